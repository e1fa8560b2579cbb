/* The schema steps, generated from schema/NNN_*.sql (schema/embed.py). */
#ifndef KC_SCHEMA_H
#define KC_SCHEMA_H

/* kc_schema_steps[i] takes a database from version i to version i + 1. */
extern const char *const kc_schema_steps[];
extern const int kc_schema_version;

/* "KCCH": marks a database file as kcache's (PRAGMA application_id). */
#define KC_APPLICATION_ID 0x4B434348

#endif
