/*
 * Whose cache this is, checked before SQLite opens anything: alone, as the
 * trust rule doc/design.md names by this file.
 *
 * A cache serves code that the caller runs: whoever can write the database
 * decides what a hit returns. So kcache uses a cache directory and files
 * only when they are the current user's, and never follows a symbolic link
 * at the database, its -wal or its -shm (SQLite would write through it, and
 * make -wal/-shm files beside the link's target).
 *
 * Decision about root: a directory or file owned by root is accepted for
 * every user, because root can change anything anyway, so trusting it adds
 * no one; root-owned files must not be writable by group or others (a
 * shared read-only cache that root provisions, e.g. in a container image).
 * Root itself gets no exception the other way: `sudo kcache` on a user's
 * cache is refused, because the -wal and -shm that root would create there
 * belong to root and lock the user out of their own cache.
 *
 * The checks use lstat() on the names; what SQLite then opens cannot be
 * swapped for a link in between, because the main file is opened with
 * SQLITE_OPEN_NOFOLLOW and the -wal/-shm with O_NOFOLLOW by SQLite itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/owner.h"

static int trusted_owner(const struct stat *st, int is_dir)
{
    if (st->st_uid == geteuid())
        return 1;
    if (st->st_uid != 0)
        return 0;
    /* Root's directories may be shared ones (/tmp: sticky); root's files only unwritable. */
    return is_dir || !(st->st_mode & (S_IWGRP | S_IWOTH));
}

static int check_side(struct kc_db *db, const char *suffix)
{
    char side[4200];
    struct stat st;
    snprintf(side, sizeof(side), "%s%s", db->path, suffix);
    if (lstat(side, &st) != 0)
        return 0;
    if (S_ISLNK(st.st_mode))
        return kc_db_err(db, KCACHE_EIO,
                         "%s is a symbolic link: kcache does not write through links "
                         "it did not make; remove it",
                         side);
    if (!db->any_owner && !trusted_owner(&st, 0))
        return kc_db_err(db, KCACHE_EIO,
                         "%s is owned by uid %u, not by you (uid %u): kcache uses "
                         "only its user's cache; remove it or set KCACHE_DIR to a directory of "
                         "your own",
                         side, (unsigned)st.st_uid, (unsigned)geteuid());
    return 0;
}

int kc_owner_check(struct kc_db *db)
{
    /* A bundle is read from wherever it is, whoever made it: the import checks every entry. */
    if (db->any_owner)
        return check_side(db, KC_DB_WAL) ? KCACHE_EIO : check_side(db, KC_DB_SHM);
    char *dir = kc_path_dir(db->path);
    if (!dir)
        return kc_db_err(db, KCACHE_ENOMEM, "out of memory");
    struct stat st;
    int rc = 0;
    if (stat(dir, &st) == 0 && !trusted_owner(&st, 1))
        rc = kc_db_err(
            db, KCACHE_EIO,
            "cache directory %s is owned by uid %u, not by you (uid %u): "
            "kcache uses only its user's cache; set KCACHE_DIR to a directory of your own",
            dir, (unsigned)st.st_uid, (unsigned)geteuid());
    free(dir);
    if (rc)
        return rc;
    if (lstat(db->path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return kc_db_err(
                db, KCACHE_EIO,
                "%s is a symbolic link: kcache does not write through "
                "links it did not make; remove it or set KCACHE_PATH to the file itself",
                db->path);
        if (!trusted_owner(&st, 0))
            return kc_db_err(
                db, KCACHE_EIO,
                "%s is owned by uid %u, not by you (uid %u): kcache "
                "uses only its user's cache; set KCACHE_DIR to a directory of your own",
                db->path, (unsigned)st.st_uid, (unsigned)geteuid());
    }
    if ((rc = check_side(db, KC_DB_WAL)) || (rc = check_side(db, KC_DB_SHM)))
        return rc;
    return 0;
}
