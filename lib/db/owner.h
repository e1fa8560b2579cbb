/* Whose cache this is: checked before SQLite opens anything (owner.c says why). */
#ifndef KC_OWNER_H
#define KC_OWNER_H

#include "db/db.h"

/*
 * Refuses (KCACHE_EIO, with a message saying what to do) a cache directory,
 * database, -wal or -shm of another user, and a symbolic link at any of the
 * three names. With db->any_owner (a bundle being read) only the -wal/-shm
 * links are refused.
 */
int kc_owner_check(struct kc_db *db);

#endif
