/*
 * Opening the cache file: its directory made, whose it is checked, the
 * handle's lock on PATH-lock taken, and a damaged file set aside and begun
 * anew. The top of db/.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/alone.h"
#include "db/dbint.h"
#include "db/owner.h"
#include "util/netfs.h"

/* Creates the missing directories of path's parent, 0700 each. */
static int make_parent_dirs(struct kc_db *db, const char *path)
{
    char *dir = kc_strdup(path);
    if (!dir)
        return kc_db_err(db, KCACHE_ENOMEM, "out of memory");
    int rc = 0;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        goto out;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            rc = kc_db_err(db, KCACHE_EIO,
                           "cannot create directory %s: %s (set KCACHE_DIR to a "
                           "writable directory)",
                           dir, strerror(errno));
            goto out;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc =
            kc_db_err(db, KCACHE_EIO, "%s is not a directory (set KCACHE_DIR to a directory)", dir);
        goto out;
    }
    /* WAL needs memory shared by the file's processes: one host (util/netfs.c). */
    char net[128];
    if (kc_netfs_name(dir, net, sizeof(net))) {
        rc = kc_db_err(db, KCACHE_ENOTSUP,
                       "%s is on a network file system (%s); SQLite's WAL needs one host: "
                       "set KCACHE_DIR to a local directory (unset, kcache picks a node-local "
                       "one), and shared = DIR to share kernels between nodes (the shared tier)",
                       dir, net);
        goto out;
    }
    if (st.st_mode & S_IWOTH && !(st.st_mode & S_ISVTX))
        kc_db_log(db, KCACHE_LOG_WARNING,
                  "cache directory %s is writable by other users: anyone can alter cached kernels "
                  "(chmod 700 it)",
                  dir);
out:
    free(dir);
    return rc;
}

/*
 * A read-only open found the file made and its tables not yet: another
 * process may be creating the cache (it makes the file, then the tables in
 * one transaction), and `kcache ls` at that moment said "holds no cache
 * yet". Every handle holds its lock (alone.c) from before the file is made,
 * so when this one is alone nobody is creating anything and the answer
 * stands; otherwise it looks again, for at most 2 s (creating is far
 * quicker) and never past the busy timeout.
 */
static int wait_for_creator(struct kc_db *db, int *damaged)
{
    struct kc_db_wait wait;
    kc_db_wait_init(&wait, KC_MIN(db->busy_timeout_ms, 2000u));
    int rc = KCACHE_ENOTFOUND;
    while (rc == KCACHE_ENOTFOUND) {
        if (kc_alone_begin(db)) {
            kc_alone_end(db);
            break;
        }
        kc_db_close(db);
        if (!kc_db_wait_more(&wait))
            break;
        rc = kc_db_open_once(db, damaged);
    }
    return rc;
}

int kc_db_open(struct kc_db *db)
{
    struct stat st;
    size_t n = strlen(db->path) + sizeof(KC_DB_WAL);
    db->replaced_damaged = 0;
    if (!db->wal_path && !(db->wal_path = kc_malloc(n)))
        return kc_db_err(db, KCACHE_ENOMEM, "out of memory");
    snprintf(db->wal_path, n, "%s" KC_DB_WAL, db->path);
    /* Looking must not leave a cache (or its directory) behind: an empty
     * file is what a crash before the first table leaves, and holds none. */
    if (db->no_create && (stat(db->path, &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0)))
        return kc_db_err(db, KCACHE_ENOTFOUND, "no cache yet at %s", db->path);
    /* A bundle is read where it is (db.c reads it immutable): nothing to make, no WAL. */
    int rc = db->any_owner && db->read_only ? 0 : make_parent_dirs(db, db->path);
    if (rc)
        return rc;
    if (stat(db->path, &st) == 0 && S_ISDIR(st.st_mode))
        return kc_db_err(db, KCACHE_EIO,
                         "%s is a directory, not a cache file: move it away or "
                         "set KCACHE_PATH to a file",
                         db->path);
    /* Another user's cache, or a link at the database, -wal or -shm: refused (owner.c). */
    if ((rc = kc_owner_check(db)))
        return rc;
    if (!db->any_owner)
        kc_alone_open(db);
    int damaged;
    rc = kc_db_open_once(db, &damaged);
    if (rc == KCACHE_ENOTFOUND && db->read_only && !db->any_owner)
        rc = wait_for_creator(db, &damaged);
    if (rc && damaged && !db->read_only) {
        char why[KC_ERRMSG_SIZE];
        snprintf(why, sizeof(why), "%s", db->errmsg);
        kc_db_close(db);
        /*
         * Alone, SQLite has just rebuilt the -shm from the WAL for this open:
         * what looks damaged is the file or its WAL (another database moved
         * over the file under an old WAL), never someone's index.
         */
        int alone = kc_alone_begin(db);
        rc = kc_db_quarantine(db, why, alone);
        if (!rc)
            rc = kc_db_open_once(db, &damaged);
        if (alone)
            kc_alone_end(db);
        if (rc) {
            kc_db_close(db);
            return rc;
        }
        /* stats' corrupt counts damaged databases too: the store counts it. */
        db->replaced_damaged = 1;
    }
    if (rc)
        kc_db_close(db);
    return rc;
}

void kc_db_free(struct kc_db *db)
{
    kc_db_close(db);
    kc_alone_close(db);
    free(db->path);
    free(db->wal_path);
    db->path = db->wal_path = NULL;
    kc_logq_deliver(&db->logq, NULL, NULL); /* what no caller was left to hear */
}
