/*
 * Recognising the file at the path, and setting a damaged one aside
 * (doc/design.md, Recovery): a cache may lose entries, never a user's data.
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
#include "db/schema.h"
#include "store/storeint.h"

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
static void trim_quarantine(kcache_store *s)
{
    const char *slash = strrchr(s->path, '/');
    char *dir = slash ? kc_memdup(s->path, (size_t)(slash - s->path)) : kc_strdup(".");
    const char *base = slash ? slash + 1 : s->path;
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
        snprintf(victim, sizeof(victim), "%s/%s-wal", dir, names[i]);
        unlink(victim);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(dir);
}


static sqlite3 *open_untouched(const char *path)
{
    sqlite3 *db;
    return kc_sqlite_open_immutable(&db, path) == SQLITE_OK ? db : NULL;
}

/*
 * Whether the database file itself is sound although a connection reading it
 * through its WAL was told it is damaged. The pages a connection reads are
 * found through the shared-memory index (-shm), which every process using
 * the cache maps and none checks beyond its header: a stray write into it
 * makes a sound file look damaged to everyone until the last connection
 * closes and the next one rebuilds it from the WAL (whose frames carry
 * checksums). Setting the file aside then would throw away a good cache.
 * Reads the file alone (immutable: no WAL, no -shm, no locks).
 */
static int file_itself_sound(kcache_store *s)
{
    char shm[4200];
    struct stat sb;
    snprintf(shm, sizeof(shm), "%s-shm", s->path);
    if (stat(s->path, &sb) != 0 || sb.st_size == 0 || lstat(shm, &sb) != 0 ||
        !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return 0; /* no file to read, or no index to blame */
    sqlite3 *db = open_untouched(s->path);
    if (!db)
        return 0;
    sqlite3_stmt *st = NULL;
    int sound = 0, rc;
    /*
     * Only a file that says it is kcache's is looked into any further; and
     * the full integrity check, not quick_check: an index that disagrees with
     * its table is damage that only the full check sees.
     */
    if (kc_pragma_int(db, "PRAGMA application_id", &rc) == KC_APPLICATION_ID && rc == SQLITE_OK &&
        sqlite3_prepare_v2(db, "PRAGMA integrity_check(1)", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *verdict = sqlite3_column_text(st, 0);
        sound = verdict && !strcmp((const char *)verdict, "ok");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return sound;
}

static int index_damaged(kcache_store *s)
{
    return kc_err(s, KCACHE_ECORRUPT,
                  "%s looks damaged through its shared-memory index (%s-shm) but the file "
                  "itself is sound: kcache leaves it; the index is rebuilt once no process "
                  "has the cache open",
                  s->path, s->path);
}

/*
 * Moves the damaged file (and its WAL, which must never be replayed into a
 * new file) to PATH.corrupt-TIMESTAMP. Only if PATH is still the file this
 * connection opened: another process may already have replaced it. Without
 * `force`, a file that is sound by itself stays (the damage is in the -shm
 * of other processes: alone.c); with it (nobody else has the cache open, or
 * kcache clear), the WAL or -shm that made it look damaged goes with it.
 */
int kc_db_quarantine(kcache_store *s, const char *why, int force)
{
    struct stat st;
    if (lstat(s->path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return kc_err(s, KCACHE_EIO, "cannot examine %s: %s", s->path, strerror(errno));
    }
    if (s->ino && (st.st_ino != s->ino || st.st_dev != s->dev))
        return 0;
    if (!force && file_itself_sound(s))
        return index_damaged(s);
    char stamp[64], aside[4096], aside_wal[4200], shm[4200];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
    snprintf(aside, sizeof(aside), "%s.corrupt-%s.%09ld", s->path, stamp, (long)ts.tv_nsec);
    snprintf(aside_wal, sizeof(aside_wal), "%s-wal", aside);
    snprintf(shm, sizeof(shm), "%s-shm", s->path);
    if (rename(s->path, aside) != 0)
        return kc_err(s, KCACHE_EIO, "cannot move damaged %s aside: %s", s->path, strerror(errno));
    if (rename(s->wal_path, aside_wal) != 0 && errno != ENOENT)
        unlink(s->wal_path);
    unlink(shm);
    kc_log(s, KCACHE_LOG_WARNING, "%s was damaged (%s); moved it to %s and started an empty cache",
           s->path, why, aside);
    trim_quarantine(s);
    return 0;
}

/*
 * A truncated file: the header promises more pages than the file holds and no
 * WAL could hold the rest. SQLite would only notice when it reads a missing
 * page, perhaps in the middle of a hit.
 */
static int looks_truncated(kcache_store *s)
{
    uint64_t file_bytes, wal_bytes;
    kc_db_disk_usage(s, &file_bytes, &wal_bytes);
    if (wal_bytes > 0 || file_bytes == 0)
        return 0;
    int rc;
    int64_t pages = kc_pragma_int(s->db, "PRAGMA page_count", &rc);
    int64_t page_size = rc ? 0 : kc_pragma_int(s->db, "PRAGMA page_size", &rc);
    return rc == SQLITE_OK && (uint64_t)(pages * page_size) > file_bytes;
}


/* Reads only: a foreign file must stay byte for byte as it was. */
enum kc_file_kind kc_db_classify(kcache_store *s, int64_t *version, int *sqlite_rc)
{
    int rc;
    int64_t objects = kc_pragma_int(s->db, "SELECT count(*) FROM sqlite_schema", &rc);
    int64_t app = rc ? 0 : kc_pragma_int(s->db, "PRAGMA application_id", &rc);
    *version = rc ? 0 : kc_pragma_int(s->db, "PRAGMA user_version", &rc);
    *sqlite_rc = rc;
    if (rc != SQLITE_OK)
        return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ? KC_DAMAGED
                                                                             : KC_FOREIGN;
    if (app == KC_APPLICATION_ID)
        return looks_truncated(s) ? KC_DAMAGED : KC_OURS;
    if (app == 0 && objects == 0 && *version == 0)
        return KC_NEW;
    return KC_FOREIGN;
}

static uint32_t read_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}


/*
 * Looks at what is at the path before SQLite reads it, from the file's first
 * bytes. SQLite would take a short non-empty file for an empty database and
 * write over it, and reading another application's WAL database creates
 * -wal and -shm files beside it (a read-only connection even leaves them
 * there).
 *
 * The bytes are read through the store's own connection, opened but not yet
 * used (sqlite3_open_v2 opens the file and reads nothing), never with
 * open()/close() of our own: closing any descriptor of a file drops every
 * POSIX lock this process holds on it, including those of another handle on
 * the same cache. Reading through the connection that will serve the store,
 * rather than a second immutable one, is most of a process's first hit
 * saved (benchmarks/PROFILE-first-hit.md: 0.13 M instructions and an open
 * and close of the file).
 *
 * A kcache file's first page carries application_id and user_version from
 * the transaction that creates its tables on, so a header without our id is
 * either a file not yet initialised (id 0, version 0, no objects) or not
 * ours. A header so damaged that the id is wrong is refused as foreign: a
 * file kcache cannot prove is its own is never moved or written.
 */
enum kc_file_kind kc_db_peek(kcache_store *s)
{
    struct stat st;
    if (stat(s->path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return KC_NEW; /* absent or empty; anything else is reported by SQLite's open */
    /* What quarantine may move aside is this file and no other. */
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    uint8_t h[100];
    if (st.st_size < (off_t)sizeof(h))
        return KC_DAMAGED;
    sqlite3_file *f = NULL;
    if (!s->db || sqlite3_file_control(s->db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
        !f || !f->pMethods || f->pMethods->xRead(f, h, sizeof(h), 0) != SQLITE_OK)
        return KC_NEW; /* could not look: the real open tells */
    /* The fields SQLite itself insists on: magic, page size, fixed fractions. */
    unsigned page = (unsigned)h[16] << 8 | h[17];
    int valid = memcmp(h, "SQLite format 3", 16) == 0 &&
                (page == 1 || (page >= 512 && (page & (page - 1)) == 0)) && h[21] == 64 &&
                h[22] == 32 && h[23] == 32;
    uint32_t app = read_be32(h + 68), version = read_be32(h + 60);
    if (!valid)
        return KC_DAMAGED;
    if (app == KC_APPLICATION_ID)
        return KC_OURS;
    if (app != 0 || version != 0)
        return KC_FOREIGN;
    /* Counting its objects is a statement: on a connection of its own that
     * writes nothing (immutable), since this one would make -wal and -shm. */
    sqlite3 *db = open_untouched(s->path);
    if (!db)
        return KC_NEW;
    int rc;
    int64_t objects = kc_pragma_int(db, "SELECT count(*) FROM sqlite_schema", &rc);
    sqlite3_close(db);
    return rc == SQLITE_OK && objects > 0 ? KC_FOREIGN : KC_NEW;
}

int kc_db_foreign_error(kcache_store *s)
{
    return kc_err(s, KCACHE_EFOREIGN,
                  "%s is another application's SQLite database; kcache leaves it alone: "
                  "set KCACHE_PATH to another file",
                  s->path);
}

/*
 * SQLite reports some damage as something else: a page number gone wrong in
 * a damaged file makes a write ask for a page past the maximum and come back
 * as SQLITE_FULL. Before a full disk is reported, SQLite checks the file
 * (quick_check reads it all, so only on this rare path): damage found is
 * damage, for recovery to set aside.
 */
int kc_db_quick_check(kcache_store *s, char *why, size_t why_size)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(s->db, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_step(st);
    const unsigned char *verdict = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    int result = verdict && !strcmp((const char *)verdict, "ok") ? 1
                 : verdict || (src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB
                     ? 0
                     : -1;
    if (result != 1 && why)
        snprintf(why, why_size, "%s", verdict ? (const char *)verdict : sqlite3_errstr(src));
    sqlite3_finalize(st);
    return result;
}

int kc_db_classify_failure(kcache_store *s, int rc)
{
    if (rc != KCACHE_EFULL || !s->db)
        return rc;
    /* A disk that really is full is the common case: then the check, which
     * reads the whole file, is skipped. */
    struct statvfs vfs;
    if (statvfs(s->path, &vfs) != 0 ||
        (uint64_t)vfs.f_bavail * vfs.f_frsize < KC_FULL_MARGIN)
        return rc;
    kc_db_rollback(s);
    if (kc_db_quick_check(s, NULL, 0) != 0)
        return rc;
    return kc_err(s, KCACHE_ECORRUPT, "%s is damaged: quick_check failed after a write found "
                  "no room", s->path);
}

/* Alone: the -shm rebuilt from the WAL, then the file set aside if it is still damaged. */
static int recover_alone(kcache_store *s, const char *reason)
{
    char shm[4200];
    snprintf(shm, sizeof(shm), "%s-shm", s->path);
    kc_db_close(s);
    unlink(shm); /* nobody maps it: the next connection builds it anew from the WAL */
    int damaged;
    int rc = kc_db_open_once(s, &damaged);
    if (!rc) {
        if (kc_db_quick_check(s, NULL, 0) == 1) {
            kc_log(s, KCACHE_LOG_WARNING, "%s looked damaged through its shared-memory index; "
                   "rebuilt the index (nothing else used the cache)", s->path);
            return 0;
        }
        damaged = 1;
    }
    if (!damaged)
        return rc;
    kc_db_close(s);
    if ((rc = kc_db_quarantine(s, reason, 1)))
        return rc;
    return kc_db_open_once(s, &damaged);
}

int kc_db_recover(kcache_store *s, const char *why)
{
    char reason[KC_ERRMSG_SIZE];
    snprintf(reason, sizeof(reason), "%s", why);
    int rc;
    if (kc_alone_begin(s)) {
        /* Nobody else has the cache open: nothing to spare, everything may be rebuilt. */
        s->index_damaged_ns = 0;
        rc = recover_alone(s, reason);
        kc_alone_end(s);
        if (rc)
            kc_db_close(s);
        return rc;
    }
    /*
     * Checked before closing: a handle whose file is left where it is keeps its
     * connection. The check reads the whole file, so while the index stays
     * damaged it is not repeated on every call.
     */
    uint64_t now = kc_mono_ns();
    if (s->index_damaged_ns && now - s->index_damaged_ns < UINT64_C(60000000000))
        return index_damaged(s);
    if (file_itself_sound(s)) {
        s->index_damaged_ns = now;
        return index_damaged(s);
    }
    kc_db_close(s);
    int damaged;
    rc = kc_db_quarantine(s, reason, 0);
    if (rc)
        return rc;
    rc = kc_db_open_once(s, &damaged);
    if (rc)
        kc_db_close(s);
    return rc;
}

int kc_db_replace(kcache_store *s, const char *why)
{
    char reason[KC_ERRMSG_SIZE];
    snprintf(reason, sizeof(reason), "%s", why);
    kc_db_close(s);
    int damaged;
    int rc = kc_db_quarantine(s, reason, 1);
    if (!rc)
        rc = kc_db_open_once(s, &damaged);
    if (rc)
        kc_db_close(s);
    return rc;
}
