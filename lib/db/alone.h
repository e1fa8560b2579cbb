/* Whether any other handle uses the cache: alone.c says how and why. */
#ifndef KC_ALONE_H
#define KC_ALONE_H

#include "db/db.h"

/* Takes this handle's shared lock on PATH-lock (db->lock_fd; -1 without one). */
void kc_alone_open(struct kc_db *db);
/* 1 when no other handle has the cache open; it then stays so until kc_alone_end(). */
int kc_alone_begin(struct kc_db *db);
void kc_alone_end(struct kc_db *db);
void kc_alone_close(struct kc_db *db);

/* Room in PATH-lock for the store failures kept there (kc_spill_add(), db.h). */
void kc_alone_reserve(struct kc_db *db);

#endif
