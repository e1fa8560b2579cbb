/*
 * The database file: opening it, telling what it is, migrating it, setting a
 * damaged one aside, and the transaction helpers everything else uses.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "store/alone.h"
#include "store/owner.h"
#include "store/schema.h"
#include "store/storeint.h"

/* After a checkpoint, a WAL larger than this is truncated back to it. */
#define KC_WAL_SIZE_LIMIT (4 << 20)
/* How much of the file a connection maps (address space, not memory). */
#define KC_MMAP_SIZE (256ll << 20)

/*
 * A WAL larger than this is emptied when a connection closes. The WAL
 * outlives close (see configure()), and the first connection of every
 * process replays all of it to rebuild its index: with up to 4 MiB of WAL
 * (SQLite's auto-checkpoint at 1000 pages), opening took 3.0 ms instead of
 * 0.7 ms (median of 60 hit processes on a 1000-entry cache). Each hit process
 * adds ~12 KiB (its recorded touch), so one close in ~20 pays a checkpoint.
 */
#define KC_WAL_KEEP (256 << 10)

static const char *const stmt_sql[KC_STMT_COUNT] = {
    [KC_STMT_GET] =
        "SELECT e.id, e.kind, e.arch, e.name, e.raw_size, e.stored_size, e.codec, e.digest,"
        " e.created_at, e.accessed_at, e.hits, e.compile_ns, e.toolchain,"
        " i.log, i.names, i.key_material, a.stored_digest, a.data,"
        /* The key as the row has it, read through the rowid: e.key itself
         * would be read from the very index entry that led here. */
        " (SELECT k.key FROM entry k WHERE k.id = e.id)"
        " FROM entry e LEFT JOIN entry_info i ON i.id = e.id LEFT JOIN artifact a ON a.id = e.id"
        " WHERE e.key = ?1",
    [KC_STMT_GET_INPUTS] =
        "SELECT ei.role, ei.name, i.size, i.codec, i.digest, i.data"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id"
        " WHERE ei.entry_id = ?1 ORDER BY ei.seq",
    [KC_STMT_DELETE] = "DELETE FROM entry WHERE key = ?1",
    [KC_STMT_INSERT_ENTRY] =
        "INSERT INTO entry (key, kind, arch, name, raw_size, stored_size, codec, digest,"
        " created_at, accessed_at, hits, compile_ns, toolchain)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 0, ?10, ?11)",
    [KC_STMT_INSERT_INFO] =
        "INSERT INTO entry_info (id, log, names, key_material) VALUES (?1, ?2, ?3, ?4)",
    [KC_STMT_INSERT_ARTIFACT] =
        "INSERT INTO artifact (id, stored_digest, data) VALUES (?1, ?2, ?3)",
    [KC_STMT_FIND_INPUT] = "SELECT id FROM input WHERE digest = ?1",
    [KC_STMT_INSERT_INPUT] =
        "INSERT INTO input (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    [KC_STMT_INSERT_ENTRY_INPUT] =
        "INSERT INTO entry_input (entry_id, seq, role, name, input_id) VALUES (?1, ?2, ?3, ?4, ?5)",
    [KC_STMT_TOUCH] =
        "UPDATE entry SET accessed_at = max(accessed_at, ?2), hits = hits + ?3 WHERE key = ?1",
    [KC_STMT_USAGE_ADD] =
        "INSERT INTO usage (arch, kind, hits, misses, saved_ns) VALUES (?1, ?2, ?3, ?4, ?5)"
        " ON CONFLICT (arch, kind) DO UPDATE SET hits = hits + excluded.hits,"
        " misses = misses + excluded.misses, saved_ns = saved_ns + excluded.saved_ns",
    [KC_STMT_COUNTER_ADD] =
        "INSERT INTO counter (name, value) VALUES (?1, ?2)"
        " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    [KC_STMT_FIND_PREFIX] = "SELECT key FROM entry WHERE key >= ?1 AND key < ?2 LIMIT 2",
#define KC_LIST_SELECT                                                                             \
    "SELECT id, key, kind, arch, name, raw_size, stored_size, digest, created_at, accessed_at,"    \
    " hits, compile_ns, toolchain FROM entry"                                                      \
    " WHERE (?1 IS NULL OR arch = ?1) AND (?2 = 0 OR kind = ?2)"                                   \
    " AND (?3 = 0 OR accessed_at < ?3) AND (?4 = 0 OR created_at >= ?4)"
    [KC_STMT_LIST_ACCESSED] = KC_LIST_SELECT " ORDER BY accessed_at DESC, id LIMIT ?5",
    [KC_STMT_LIST_CREATED] = KC_LIST_SELECT " ORDER BY created_at DESC, id LIMIT ?5",
    [KC_STMT_LIST_SIZE] = KC_LIST_SELECT " ORDER BY raw_size DESC, id LIMIT ?5",
    [KC_STMT_LIST_HITS] = KC_LIST_SELECT " ORDER BY hits DESC, id LIMIT ?5",
    [KC_STMT_LIST_LRU] = KC_LIST_SELECT " ORDER BY accessed_at ASC, id LIMIT ?5",
#undef KC_LIST_SELECT
    [KC_STMT_LRU_BATCH] =
        "SELECT id, stored_size, accessed_at FROM entry ORDER BY accessed_at, id LIMIT ?1",
    [KC_STMT_TOTALS] = "SELECT entries, raw_bytes, stored_bytes FROM totals",
    [KC_STMT_COUNTERS] = "SELECT name, value FROM counter",
    [KC_STMT_COUNTER_GET] = "SELECT value FROM counter WHERE name = ?1",
    [KC_STMT_USAGE] = "SELECT arch, kind, hits, misses, saved_ns FROM usage",
    [KC_STMT_MANIFEST_GET] =
        "SELECT m.key, m.recorded_at, c.codec, c.raw_size, c.data FROM manifest m"
        " JOIN closure c ON c.id = m.closure_id WHERE m.base = ?1"
        " ORDER BY m.created_at DESC LIMIT ?2",
    /* A delete, then an insert: a REPLACE would not fire manifest_removed. */
    [KC_STMT_MANIFEST_DELETE] = "DELETE FROM manifest WHERE base = ?1 AND key = ?2",
    [KC_STMT_MANIFEST_PUT] =
        "INSERT INTO manifest (base, key, closure_id, recorded_at, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5)",
    [KC_STMT_MANIFEST_TRIM] =
        "DELETE FROM manifest WHERE base = ?1 AND key NOT IN"
        " (SELECT key FROM manifest WHERE base = ?1 ORDER BY created_at DESC LIMIT ?2)",
    [KC_STMT_CLOSURE_FIND] = "SELECT id FROM closure WHERE digest = ?1",
    [KC_STMT_CLOSURE_PUT] =
        "INSERT INTO closure (digest, raw_size, codec, data) VALUES (?1, ?2, ?3, ?4)",
};

/* Whether a write may have failed for RLIMIT_FSIZE: a file is within a page of the limit. */
static int near_size_limit(kcache_store *s)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    uint64_t file_bytes, wal_bytes;
    kc_db_disk_usage(s, &file_bytes, &wal_bytes);
    uint64_t margin = 65536 + 64;
    return file_bytes + margin >= (uint64_t)rl.rlim_cur ||
           wal_bytes + margin >= (uint64_t)rl.rlim_cur;
}

int kc_sqlerr(kcache_store *s, int rc, const char *what)
{
    const char *msg = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return kc_err(s, KCACHE_EBUSY,
                      "%s: %s stayed locked for %u ms (another process holds it; "
                      "raise the busy timeout or find the stuck process)",
                      what, s->path, s->busy_timeout_ms);
    case SQLITE_FULL:
        return kc_err(s, KCACHE_EFULL, "%s: disk full writing %s: free space or lower the cap",
                      what, s->path);
    case SQLITE_READONLY:
        return kc_err(s, KCACHE_EIO, "%s: %s is read-only (check its directory's permissions)",
                      what, s->path);
    case SQLITE_IOERR: {
        /* SQLite reports only ENOSPC as SQLITE_FULL; the other ways to run out of room
         * come back as I/O errors, which would not tell the user what to do. */
        int sys = s->db ? sqlite3_system_errno(s->db) : 0;
        if (sys == 0 && rc == SQLITE_IOERR_WRITE && near_size_limit(s))
            sys = EFBIG; /* SQLite does not always keep the write's errno */
        if (sys == ENOSPC || sys == EDQUOT)
            return kc_err(s, KCACHE_EFULL, "%s: disk full writing %s: free space or lower the "
                          "cap", what, s->path);
        if (sys == EFBIG)
            return kc_err(s, KCACHE_EFULL, "%s: %s reached the file size limit (ulimit -f): "
                          "raise the limit or lower the cap", what, s->path);
        if (sys == EROFS)
            return kc_err(s, KCACHE_EIO, "%s: %s is on a read-only file system: set KCACHE_DIR "
                          "to a writable directory", what, s->path);
        return kc_err(s, KCACHE_EIO, "%s: %s: %s", what, s->path, msg);
    }
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return kc_err(s, KCACHE_EIO, "%s: %s: %s", what, s->path, msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return kc_err(s, KCACHE_ECORRUPT, "%s: %s is damaged: %s", what, s->path, msg);
    case SQLITE_NOMEM:
        return kc_err(s, KCACHE_ENOMEM, "%s: out of memory", what);
    default:
        return kc_err(s, KCACHE_EIO, "%s: %s: %s", what, s->path, msg);
    }
}

int kc_db_stmt(kcache_store *s, sqlite3_stmt **out, enum kc_stmt which)
{
    sqlite3_stmt *st = s->stmts[which];
    if (!st) {
        int rc = sqlite3_prepare_v3(s->db, stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT, &st,
                                    NULL);
        if (rc != SQLITE_OK) {
            /* A newer schema whose layout this build cannot read says so here. */
            if (s->newer_schema)
                return kc_err(s, KCACHE_EVERSION,
                              "%s was written by a newer kcache (schema %d): upgrade kcache",
                              s->path, s->schema_version);
            return kc_sqlerr(s, rc, "preparing a statement");
        }
        s->stmts[which] = st;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    *out = st;
    return 0;
}

int kc_db_exec(kcache_store *s, const char *sql, const char *what)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : kc_sqlerr(s, rc, what);
}

/* SQL of our own (never built from input) in one write transaction; the lock is held. */
int kc_db_write_sql(kcache_store *s, const char *sql, const char *what)
{
    int rc = s->db ? kc_db_begin_write(s) : kc_err(s, KCACHE_EIO, "no database");
    if (rc)
        return rc;
    if ((rc = kc_db_exec(s, sql, what)) || (rc = kc_db_commit(s)))
        kc_db_rollback(s);
    return rc;
}

int kc_db_writable(kcache_store *s)
{
    if (s->newer_schema)
        return kc_err(s, KCACHE_EVERSION,
                      "%s was written by a newer kcache (schema %d, this one knows %d): "
                      "upgrade kcache",
                      s->path, s->schema_version, kc_schema_version);
    if (s->read_only)
        return kc_err(s, KCACHE_EREADONLY, "%s is open read-only", s->path);
    return 0;
}

/*
 * BEGIN IMMEDIATE takes the write lock up front, so a transaction never has
 * to upgrade a read lock and fail half-way. SQLite's busy handler waits for
 * the lock; a BUSY that still comes back (WAL recovery in another process)
 * is retried here until the same deadline.
 */
int kc_db_begin_write(kcache_store *s)
{
    int rc = kc_db_writable(s);
    if (rc)
        return rc;
    uint64_t deadline = kc_mono_ns() + (uint64_t)s->busy_timeout_ms * 1000000u;
    unsigned pause_us = 1000;
    for (;;) {
        int src = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (src == SQLITE_OK)
            return 0;
        if ((src & 0xff) != SQLITE_BUSY || kc_mono_ns() >= deadline)
            return kc_sqlerr(s, src, "starting a write");
        usleep(pause_us);
        pause_us = KC_MIN(pause_us * 2, 50000u);
    }
}

int kc_db_commit(kcache_store *s)
{
    int rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        return 0;
    int err = kc_sqlerr(s, rc, "committing");
    kc_db_rollback(s);
    return err;
}

void kc_db_rollback(kcache_store *s)
{
    if (s->db && !sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int64_t kc_pragma_int(sqlite3 *db, const char *sql, int *rc_out)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            v = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    *rc_out = rc;
    return v;
}

void kc_db_disk_usage(kcache_store *s, uint64_t *file_bytes, uint64_t *wal_bytes)
{
    struct stat st;
    *file_bytes = stat(s->path, &st) == 0 ? (uint64_t)st.st_size : 0;
    *wal_bytes = stat(s->wal_path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void finalize_all(kcache_store *s)
{
    for (size_t i = 0; i < KC_STMT_COUNT; i++) {
        sqlite3_finalize(s->stmts[i]);
        s->stmts[i] = NULL;
    }
}

void kc_db_close(kcache_store *s)
{
    finalize_all(s);
    if (s->db) {
        struct stat st;
        if (!s->read_only && !s->newer_schema && stat(s->wal_path, &st) == 0 &&
            st.st_size > KC_WAL_KEEP) {
            /* Only if nobody is reading or writing: a close never waits. */
            sqlite3_busy_timeout(s->db, 0);
            sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        }
        sqlite3_close_v2(s->db);
        s->db = NULL;
    }
}

/*
 * Network file systems cannot give WAL the shared memory it needs between
 * hosts; SQLite's documentation is plain that the file would be corrupted.
 */
static const char *network_fs_name(const char *dir)
{
    static const struct {
        long magic;
        const char *name;
    } fs[] = {
        {0x6969, "NFS"},          {0x517B, "SMB"},       {(long)0xFF534D42, "CIFS"},
        {(long)0xFE534D42, "SMB2"}, {0x73757245, "Coda"}, {0x5346414F, "AFS"},
        {0x00C36400, "Ceph"},     {0x01021997, "9P"},    {0x0BD00BD0, "Lustre"},
        {0x47504653, "GPFS"},     {0x01161970, "GFS2"},  {0x7461636F, "OCFS2"},
    };
    struct statfs sfs;
    if (statfs(dir, &sfs) != 0)
        return NULL;
    for (size_t i = 0; i < KC_ARRAY_SIZE(fs); i++)
        if ((long)sfs.f_type == fs[i].magic)
            return fs[i].name;
    return NULL;
}

/* Creates the missing directories of path's parent, 0700 each. */
static int make_parent_dirs(kcache_store *s, const char *path)
{
    char *dir = kc_strdup(path);
    if (!dir)
        return kc_err(s, KCACHE_ENOMEM, "out of memory");
    int rc = 0;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        goto out;
    *slash = '\0';
    for (char *p = dir + 1; ; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            rc = kc_err(s, KCACHE_EIO, "cannot create directory %s: %s (set KCACHE_DIR to a "
                        "writable directory)", dir, strerror(errno));
            goto out;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = kc_err(s, KCACHE_EIO, "%s is not a directory (set KCACHE_DIR to a directory)", dir);
        goto out;
    }
    const char *net = network_fs_name(dir);
    if (net) {
        rc = kc_err(s, KCACHE_ENOTSUP,
                    "%s is on a network file system (%s); SQLite's WAL needs one host: "
                    "set KCACHE_DIR to a local directory",
                    dir, net);
        goto out;
    }
    if (st.st_mode & S_IWOTH && !(st.st_mode & S_ISVTX))
        kc_log(s, KCACHE_LOG_WARNING,
               "cache directory %s is writable by other users: anyone can alter cached kernels "
               "(chmod 700 it)", dir);
out:
    free(dir);
    return rc;
}

static int set_identity(kcache_store *s)
{
    struct stat st;
    if (stat(s->path, &st) != 0)
        return kc_err(s, KCACHE_EIO, "cannot examine %s: %s", s->path, strerror(errno));
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    return 0;
}

/* Creates the file ourselves so that it is 0600 from its first byte on. */
static int create_file(kcache_store *s)
{
    int fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return 0;
        return kc_err(s, KCACHE_EIO, "cannot create %s: %s (set KCACHE_DIR to a writable "
                      "directory)", s->path, strerror(errno));
    }
    close(fd);
    return 0;
}

static int apply_steps(kcache_store *s, int from, int to)
{
    for (int v = from; v < to; v++) {
        int rc = kc_db_exec(s, kc_schema_steps[v], "migrating the schema");
        if (rc)
            return rc;
    }
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", to);
    return kc_db_exec(s, sql, "migrating the schema");
}

/*
 * Brings the file to `target` in one transaction. The version is read again
 * under the write lock: another process may have migrated it meanwhile.
 */
static int migrate(kcache_store *s, int target)
{
    int rc = kc_db_begin_write(s);
    if (rc)
        return rc;
    int src;
    int64_t app = kc_pragma_int(s->db, "PRAGMA application_id", &src);
    int64_t version = src ? 0 : kc_pragma_int(s->db, "PRAGMA user_version", &src);
    int64_t objects = src ? 0 : kc_pragma_int(s->db, "SELECT count(*) FROM sqlite_schema", &src);
    if (src) {
        rc = kc_sqlerr(s, src, "reading the schema version");
        goto fail;
    }
    if (app == 0 && version == 0 && objects == 0) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA application_id = %d", KC_APPLICATION_ID);
        if ((rc = kc_db_exec(s, sql, "creating the database")))
            goto fail;
    } else if (app != KC_APPLICATION_ID) {
        rc = kc_err(s, KCACHE_EFOREIGN, "%s is not a kcache database", s->path);
        goto fail;
    }
    if (version < target) {
        if ((rc = apply_steps(s, (int)version, target)))
            goto fail;
        if (version == 0) {
            char sql[96];
            snprintf(sql, sizeof(sql), "INSERT INTO counter VALUES ('since', %lld)",
                     (long long)kc_now_ms());
            if ((rc = kc_db_exec(s, sql, "creating the database")))
                goto fail;
        }
    }
    if ((rc = kc_db_commit(s)))
        return rc;
    s->schema_version = version < target ? target : (int)version;
    return 0;
fail:
    kc_db_rollback(s);
    return rc;
}

int kc_db_migrate_to(kcache_store *s, int version)
{
    return migrate(s, version);
}

/*
 * Every SQLite connection kcache opens goes through here, even one to a file
 * it just wrote: nothing in a file may make the connection run code (no
 * triggers or views that call functions, no writes to the schema from SQL,
 * no extensions). On failure *out is NULL. Returns SQLite's code.
 */
int kc_sqlite_open(sqlite3 **out, const char *path, int flags)
{
    int rc = sqlite3_open_v2(path, out, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close_v2(*out);
        *out = NULL;
        return rc;
    }
    sqlite3_extended_result_codes(*out, 1);
    sqlite3_db_config(*out, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(*out, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    sqlite3_db_config(*out, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
    return SQLITE_OK;
}

/*
 * A read-only connection that takes no locks and makes no -journal, -wal or
 * -shm file (immutable=1): looking at a file this way writes nothing at all.
 * Returns SQLite's code; *out is NULL on failure.
 */
int kc_sqlite_open_immutable(sqlite3 **out, const char *path)
{
    /* A URI, so that immutable=1 applies; the path's own '%', '?' and '#' escaped. */
    *out = NULL;
    size_t n = strlen(path);
    char *uri = kc_malloc(3 * n + 32);
    if (!uri)
        return SQLITE_NOMEM;
    char *q = uri + sprintf(uri, "file:");
    for (const char *p = path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#')
            q += sprintf(q, "%%%02x", (unsigned char)*p);
        else
            *q++ = *p;
    }
    strcpy(q, "?immutable=1");
    int rc = kc_sqlite_open(out, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    free(uri);
    return rc;
}

static int connect(kcache_store *s)
{
    /* NOFOLLOW: a link planted after kc_owner_check() looked is refused, not written through. */
    int flags = (s->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
                SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE |
                (s->any_owner ? 0 : SQLITE_OPEN_NOFOLLOW);
    int rc = kc_sqlite_open(&s->db, s->path, flags);
    if (rc != SQLITE_OK)
        return kc_sqlerr(s, rc, "opening the cache");
    sqlite3_busy_timeout(s->db, (int)s->busy_timeout_ms);
    return 0;
}

static int configure(kcache_store *s)
{
    int rc;
    char sql[128];
    if (!s->read_only) {
        /*
         * A hit is a whole process for the CLI, so opening and closing must
         * not write or sync when nothing changed. Pragmas that would write
         * are issued only when the file does not have the setting yet, and
         * the WAL survives a close without a checkpoint: deleting and
         * recreating it cost every hit three fsyncs. The WAL stays bounded
         * (autocheckpoint, journal_size_limit) and counts toward the cap.
         */
        int persist = 1;
        sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
        /* On a new file this must precede the first table. */
        if (kc_pragma_int(s->db, "PRAGMA auto_vacuum", &rc) != 2 && rc == SQLITE_OK &&
            (rc = kc_db_exec(s, "PRAGMA auto_vacuum = INCREMENTAL", "configuring the database")))
            return rc;
        sqlite3_stmt *st = NULL;
        int src = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode", -1, &st, NULL);
        if (src == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
            sqlite3_column_text(st, 0) &&
            strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0) {
            sqlite3_finalize(st);
            st = NULL;
        } else {
            sqlite3_finalize(st);
            st = NULL;
            src = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        }
        if (!st)
            src = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode", -1, &st, NULL);
        if (src == SQLITE_OK)
            src = sqlite3_step(st);
        const unsigned char *mode = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        int wal = mode && strcmp((const char *)mode, "wal") == 0;
        sqlite3_finalize(st);
        if (!wal)
            return src == SQLITE_ROW || src == SQLITE_DONE
                       ? kc_err(s, KCACHE_ENOTSUP,
                                "%s cannot use WAL mode here: set KCACHE_DIR to a local directory",
                                s->path)
                       : kc_sqlerr(s, src, "switching to WAL");
        snprintf(sql, sizeof(sql), "PRAGMA journal_size_limit = %d", KC_WAL_SIZE_LIMIT);
        if ((rc = kc_db_exec(s, sql, "configuring the database")))
            return rc;
    }
    /*
     * Pages read through a mapping rather than a pread() each: a warm hit of
     * a 58 KB entry went from 30.0 to 23.2 us with lz4 and from 18.7 to 8.4
     * us stored raw, 212 KB lz4 from 93 to 67 us (doc/design.md, the store).
     * Nothing is written through it (SQLite writes with write()).
     */
    snprintf(sql, sizeof(sql), "PRAGMA mmap_size = %lld", (long long)KC_MMAP_SIZE);
    if ((rc = kc_db_exec(s, sql, "configuring the database")))
        return rc;
    return kc_db_exec(s, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF;"
                         "PRAGMA trusted_schema = OFF",
                      "configuring the database");
}

int kc_db_open_once(kcache_store *s, int *damaged)
{
    int rc;
    *damaged = 0;
    struct stat st;
    int exists = stat(s->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
    if (!exists && !s->read_only && (rc = create_file(s)))
        return rc;
    /* Connected first, so that the peek reads through this connection (recovery.c). */
    if ((rc = connect(s)) || (rc = set_identity(s)))
        return rc;
    switch (exists ? kc_db_peek(s) : KC_NEW) {
    case KC_DAMAGED:
        *damaged = 1;
        return kc_err(s, KCACHE_ECORRUPT, "%s is damaged: not an SQLite database", s->path);
    case KC_FOREIGN:
        return kc_db_foreign_error(s);
    case KC_NEW:
    case KC_OURS:
        break;
    }
    int64_t version;
    int src;
    switch (kc_db_classify(s, &version, &src)) {
    case KC_DAMAGED:
        *damaged = 1;
        return kc_err(s, KCACHE_ECORRUPT, "%s is damaged: %s", s->path,
                      src ? sqlite3_errstr(src) : "truncated");
    case KC_FOREIGN:
        if (src)
            return kc_sqlerr(s, src, "reading the cache");
        return kc_db_foreign_error(s);
    case KC_NEW:
        if (s->read_only)
            return kc_err(s, KCACHE_ENOTFOUND, "%s holds no cache yet", s->path);
        break;
    case KC_OURS:
        break;
    }
    s->schema_version = (int)version;
    if (version > kc_schema_version) {
        /* Serve what this build can read; refuse every write. */
        s->newer_schema = 1;
        kc_log(s, KCACHE_LOG_WARNING,
               "%s was written by a newer kcache (schema %lld); reading only: upgrade kcache",
               s->path, (long long)version);
        return kc_db_exec(s, "PRAGMA trusted_schema = OFF", "configuring the database");
    }
    if ((rc = configure(s)))
        return rc;
    if (!s->read_only && version < kc_schema_version) {
        rc = migrate(s, kc_schema_version);
        if (rc == KCACHE_ECORRUPT)
            *damaged = 1;
        return rc;
    }
    return 0;
}

/*
 * A read-only open found the file made and its tables not yet: another
 * process may be creating the cache (it makes the file, then the tables in
 * one transaction), and `kcache ls` at that moment said "holds no cache yet"
 *. Every handle holds its lock (alone.c) from before the
 * file is made, so when this one is alone nobody is creating anything and
 * the answer stands; otherwise it looks again, for at most 2 s (creating
 * takes milliseconds) and never past the busy timeout.
 */
static int wait_for_creator(kcache_store *s, int *damaged)
{
    uint64_t wait_ms = KC_MIN(s->busy_timeout_ms, 2000u);
    uint64_t deadline = kc_mono_ns() + wait_ms * 1000000u;
    unsigned pause_us = 1000;
    int rc = KCACHE_ENOTFOUND;
    while (rc == KCACHE_ENOTFOUND && kc_mono_ns() < deadline) {
        if (kc_alone_begin(s)) {
            kc_alone_end(s);
            break;
        }
        kc_db_close(s);
        usleep(pause_us);
        pause_us = KC_MIN(pause_us * 2, 50000u);
        rc = kc_db_open_once(s, damaged);
    }
    return rc;
}

int kc_db_open(kcache_store *s)
{
    struct stat st;
    /* Looking must not leave a cache (or its directory) behind: an empty
     * file is what a crash before the first table leaves, and holds none. */
    if (s->no_create && (stat(s->path, &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0)))
        return kc_err(s, KCACHE_ENOTFOUND, "no cache yet at %s", s->path);
    int rc = make_parent_dirs(s, s->path);
    if (rc)
        return rc;
    if (stat(s->path, &st) == 0 && S_ISDIR(st.st_mode))
        return kc_err(s, KCACHE_EIO, "%s is a directory, not a cache file: move it away or "
                      "set KCACHE_PATH to a file", s->path);
    /* Another user's cache, or a link at the database, -wal or -shm: refused (owner.c). */
    if ((rc = kc_owner_check(s)))
        return rc;
    if (!s->any_owner)
        kc_alone_open(s);
    int damaged;
    rc = kc_db_open_once(s, &damaged);
    if (rc == KCACHE_ENOTFOUND && s->read_only && !s->any_owner)
        rc = wait_for_creator(s, &damaged);
    if (rc && damaged && !s->read_only) {
        char why[KC_ERRMSG_SIZE];
        snprintf(why, sizeof(why), "%s", s->errmsg);
        kc_db_close(s);
        /*
         * Alone, SQLite has just rebuilt the -shm from the WAL for this open:
         * what looks damaged is the file or its WAL (another database moved
         * over the file under an old WAL), never someone's index.
         */
        int alone = kc_alone_begin(s);
        rc = kc_db_quarantine(s, why, alone);
        if (!rc)
            rc = kc_db_open_once(s, &damaged);
        if (alone)
            kc_alone_end(s);
        if (rc) {
            kc_db_close(s);
            return rc;
        }
        /* stats' corrupt counts damaged databases too; written with the next batch. */
        s->pending_corrupt++;
    }
    if (rc)
        kc_db_close(s);
    return rc;
}
