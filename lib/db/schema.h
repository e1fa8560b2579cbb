/* The schema steps, generated from schema/NNN_*.sql (schema/embed.py). */
#ifndef KC_SCHEMA_H
#define KC_SCHEMA_H

/* kc_schema_steps[i] takes a database from version i to version i + 1. */
extern const char *const kc_schema_steps[];
/*
 * kc_schema_rewrites[i] is 1 where step i rewrites the CREATE text of objects
 * in place (sqlite_schema) rather than creating or altering them: it runs
 * under a guard that keeps every table's layout (lib/db/steps.c).
 */
extern const unsigned char kc_schema_rewrites[];
extern const int kc_schema_version;

/* "KCCH": marks a database file as kcache's (PRAGMA application_id). */
#define KC_APPLICATION_ID 0x4B434348

#endif
