/*
 * Setting a damaged file aside and beginning anew (doc/design.md, Recovery):
 * a cache may lose entries, never a user's data.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "db/alone.h"
#include "db/dbint.h"

/* How many NAME.corrupt-* sets are kept; older ones go (kcache made them). */
#define KC_QUARANTINE_KEEP 3

/* Free space under which SQLITE_FULL is taken for what it says. */
#define KC_FULL_MARGIN (UINT64_C(64) << 20)

/*
 * Whether name is exactly what quarantine() makes: PREFIX + YYYYMMDDTHHMMSS +
 * '.' + 9 digits. A user's own NAME.corrupt-backup is not kcache's to delete.
 */
static int is_quarantine_name(const char *name, const char *prefix, size_t plen)
{
    static const char shape[] = "DDDDDDDDTDDDDDD.DDDDDDDDD";
    if (strncmp(name, prefix, plen) != 0 || strlen(name + plen) != sizeof(shape) - 1)
        return 0;
    for (size_t i = 0; shape[i]; i++) {
        char c = name[plen + i];
        if (shape[i] == 'D' ? c < '0' || c > '9' : c != shape[i])
            return 0;
    }
    return 1;
}

/* Removes the oldest NAME.corrupt-* sets beyond what is kept. */
static void trim_quarantine(struct kc_db *db)
{
    const char *slash = strrchr(db->path, '/');
    char *dir = slash ? kc_memdup(db->path, (size_t)(slash - db->path)) : kc_strdup(".");
    const char *base = slash ? slash + 1 : db->path;
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s.corrupt-", base);
    size_t plen = strlen(prefix);
    DIR *d = dir ? opendir(*dir ? dir : "/") : NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    if (!d)
        goto out;
    for (struct dirent *de; (de = readdir(d));) {
        /* Only the main files count; their -wal companions go with them. */
        if (!is_quarantine_name(de->d_name, prefix, plen))
            continue;
        char **grown = kc_grow(names, &cap, n, sizeof(*names), 8);
        if (!grown)
            break;
        names = grown;
        if (!(names[n] = kc_strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    /* Timestamps sort as text: the oldest come first. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j - 1];
            names[j - 1] = names[j];
            names[j] = t;
        }
    for (size_t i = 0; i + KC_QUARANTINE_KEEP < n; i++) {
        char victim[4096];
        snprintf(victim, sizeof(victim), "%s/%s", dir, names[i]);
        unlink(victim);
        snprintf(victim, sizeof(victim), "%s/%s" KC_DB_WAL, dir, names[i]);
        unlink(victim);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(dir);
}

static int index_damaged(struct kc_db *db)
{
    return kc_db_err(db, KCACHE_ECORRUPT,
                     "%s looks damaged through its shared-memory index (%s-shm) but the file "
                     "itself is sound: kcache leaves it; the index is rebuilt once no process "
                     "has the cache open",
                     db->path, db->path);
}

/*
 * Moves the damaged file (and its WAL, which must never be replayed into a
 * new file) to PATH.corrupt-TIMESTAMP. Only if PATH is still the file this
 * connection opened: another process may already have replaced it. Without
 * `force`, a file that is sound by itself stays (the damage is in the -shm
 * of other processes: alone.c); with it (nobody else has the cache open, or
 * kcache clear), the WAL or -shm that made it look damaged goes with it.
 */
int kc_db_quarantine(struct kc_db *db, const char *why, int force)
{
    struct stat st;
    if (lstat(db->path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return kc_db_err(db, KCACHE_EIO, "cannot examine %s: %s", db->path, strerror(errno));
    }
    if (db->ino && (st.st_ino != db->ino || st.st_dev != db->dev))
        return 0;
    if (!force && kc_db_file_itself_sound(db)) {
        if (!kc_db_wal_foreign(db))
            return index_damaged(db);
        why = "its WAL belongs to another file";
    }
    char stamp[64], aside[4096], aside_wal[4200], shm[4200];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
    snprintf(aside, sizeof(aside), "%s.corrupt-%s.%09ld", db->path, stamp, (long)ts.tv_nsec);
    snprintf(aside_wal, sizeof(aside_wal), "%s" KC_DB_WAL, aside);
    snprintf(shm, sizeof(shm), "%s" KC_DB_SHM, db->path);
    if (rename(db->path, aside) != 0)
        return kc_db_err(db, KCACHE_EIO, "cannot move damaged %s aside: %s", db->path,
                         strerror(errno));
    if (rename(db->wal_path, aside_wal) != 0 && errno != ENOENT)
        unlink(db->wal_path);
    unlink(shm);
    kc_db_log(db, KCACHE_LOG_WARNING,
              "%s was damaged (%s); moved it to %s and started an empty cache", db->path, why,
              aside);
    trim_quarantine(db);
    return 0;
}

int kc_db_classify_failure(struct kc_db *db, int rc)
{
    if (rc != KCACHE_EFULL || !db->conn)
        return rc;
    /* A disk that really is full is the common case: then the check, which
     * reads the whole file, is skipped. */
    struct statvfs vfs;
    if (statvfs(db->path, &vfs) != 0 || (uint64_t)vfs.f_bavail * vfs.f_frsize < KC_FULL_MARGIN)
        return rc;
    kc_db_rollback(db);
    if (kc_db_quick_check(db, NULL, 0) != 0)
        return rc;
    return kc_db_err(db, KCACHE_ECORRUPT,
                     "%s is damaged: quick_check failed after a write found "
                     "no room",
                     db->path);
}

/* Alone: the -shm rebuilt from the WAL, then the file set aside if it is still damaged. */
static int recover_alone(struct kc_db *db, const char *reason)
{
    char shm[4200];
    snprintf(shm, sizeof(shm), "%s" KC_DB_SHM, db->path);
    kc_db_close(db);
    unlink(shm); /* nobody maps it: the next connection builds it anew from the WAL */
    int damaged;
    int rc = kc_db_open_once(db, &damaged);
    if (!rc) {
        /* The full check: SQLite said damaged, and an index that disagrees with its
         * table is damage quick_check does not see (each retry would meet it again). */
        if (kc_db_integrity_check(db) == 1) {
            kc_db_log(db, KCACHE_LOG_WARNING,
                      "%s looked damaged through its shared-memory index; "
                      "rebuilt the index (nothing else used the cache)",
                      db->path);
            return 0;
        }
        damaged = 1;
    }
    if (!damaged)
        return rc;
    kc_db_close(db);
    if ((rc = kc_db_quarantine(db, reason, 1)))
        return rc;
    return kc_db_open_once(db, &damaged);
}

int kc_db_recover(struct kc_db *db, const char *why)
{
    char reason[KC_ERRMSG_SIZE];
    snprintf(reason, sizeof(reason), "%s", why);
    int rc;
    if (kc_alone_begin(db)) {
        /* Nobody else has the cache open: nothing to spare, everything may be rebuilt. */
        db->index_damaged_ns = 0;
        rc = recover_alone(db, reason);
        kc_alone_end(db);
        if (rc)
            kc_db_close(db);
        return rc;
    }
    /*
     * Checked before closing: a handle whose file is left where it is keeps its
     * connection. The check reads the whole file, so while the index stays
     * damaged it is not repeated on every call.
     */
    uint64_t now = kc_mono_ns();
    if (db->index_damaged_ns && now - db->index_damaged_ns < UINT64_C(60000000000))
        return index_damaged(db);
    if (kc_db_file_itself_sound(db) && !kc_db_wal_foreign(db)) {
        db->index_damaged_ns = now;
        return index_damaged(db);
    }
    kc_db_close(db);
    int damaged;
    rc = kc_db_quarantine(db, reason, 0);
    if (rc)
        return rc;
    rc = kc_db_open_once(db, &damaged);
    if (rc)
        kc_db_close(db);
    return rc;
}

int kc_db_replace(struct kc_db *db, const char *why)
{
    char reason[KC_ERRMSG_SIZE];
    snprintf(reason, sizeof(reason), "%s", why);
    kc_db_close(db);
    int damaged;
    int rc = kc_db_quarantine(db, reason, 1);
    if (!rc)
        rc = kc_db_open_once(db, &damaged);
    if (rc)
        kc_db_close(db);
    return rc;
}

int kc_db_start_over(struct kc_db *db)
{
    struct stat st;
    char shm[4200];
    snprintf(shm, sizeof(shm), "%s" KC_DB_SHM, db->path);
    kc_db_close(db);
    /* Only the file this handle opened: another process may have made a new one already. */
    if (lstat(db->path, &st) == 0 && st.st_ino == db->ino && st.st_dev == db->dev) {
        if (unlink(db->path) != 0)
            return kc_db_err(db, KCACHE_EIO, "cannot remove %s: %s", db->path, strerror(errno));
        unlink(db->wal_path);
        unlink(shm);
    }
    kc_db_reserve_release(db); /* the new file's first pages, while the old ones are still held */
    int damaged;
    int rc = kc_db_open_once(db, &damaged);
    if (rc)
        kc_db_close(db);
    return rc;
}
