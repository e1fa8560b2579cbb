/*
 * The connection: opening one that the file cannot make run code, statements
 * prepared once, and the transaction helpers everything above uses.
 */
#include <assert.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/dbint.h"
#include "db/schema.h"

/*
 * When a connection closes, the WAL is emptied if this connection wrote to
 * the file, or if it is larger than this. The WAL outlives close (see
 * configure()), and the first connection of every process replays all of it
 * to rebuild its index: a WAL left to grow to SQLite's auto-checkpoint (1000
 * pages, up to 4 MiB) made every hit process's open several times slower
 * (doc/design.md, The store), and even the ~60 frames one compile's miss
 * leaves cost each later hit process 0.35 M instructions, a tenth of a
 * `kcache compile` hit. Hits write nothing (store/hitlog.c), so the
 * checkpoint falls to the processes that wrote, whose write was a compile.
 */
#define KC_WAL_KEEP (256 << 10)

/*
 * SQLite counts every allocation for its memory statistics under a global
 * mutex: 0.26 M of the 3.91 M instructions of a CLI hit of a CuPy kernel
 * (opening, preparing and closing allocate a few thousand times). kcache
 * reads none of them (sqlite3_memory_used(), heap limits, sqlite3_status()),
 * so they are turned off, as SQLite's own list of recommended options says,
 * but only where the SQLite is kcache's own copy, linked into the same
 * object as this code (the CLI links it statically): one shared with the
 * program (libkcache.so or the drop-in over libsqlite3.so) is left as the
 * program configures it. Before SQLite's first use, or it refuses (MISUSE)
 * and nothing changes.
 */
static pthread_once_t stats_once = PTHREAD_ONCE_INIT;

static void stats_off_if_own(void)
{
    int (*config)(int, ...) = sqlite3_config;
    void *at;
    memcpy(&at, &config, sizeof(at)); /* a function's address as dladdr() takes it */
    Dl_info sqlite, self;
    if (dladdr(at, &sqlite) && dladdr(&stats_once, &self) && sqlite.dli_fbase == self.dli_fbase)
        sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/*
 * Every SQLite connection kcache opens goes through here, even one to a file
 * it just wrote: nothing in a file may make the connection run code (no
 * triggers or views that call functions, no writes to the schema from SQL,
 * no extensions). On failure *out is NULL. Returns SQLite's code.
 */
int kc_sqlite_open(sqlite3 **out, const char *path, int flags)
{
    pthread_once(&stats_once, stats_off_if_own);
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

int kc_db_stmt(struct kc_db *db, sqlite3_stmt **out, int which)
{
    assert(which >= 0 && (size_t)which < db->n_stmts);
    sqlite3_stmt *st = db->stmts[which];
    if (!st) {
        int rc = sqlite3_prepare_v3(db->conn, db->stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                                    &st, NULL);
        if (rc != SQLITE_OK) {
            /* A newer schema whose layout this build cannot read says so here. */
            if (db->newer_schema)
                return kc_db_err(db, KCACHE_EVERSION,
                                 "%s was written by a newer kcache (schema %d): upgrade kcache",
                                 db->path, db->schema_version);
            return kc_sqlerr(db, rc, "preparing a statement");
        }
        db->stmts[which] = st;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    *out = st;
    return 0;
}

int kc_db_exec(struct kc_db *db, const char *sql, const char *what)
{
    int rc = sqlite3_exec(db->conn, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : kc_sqlerr(db, rc, what);
}

/* SQL of our own (never built from input) in one write transaction; the lock is held. */
int kc_db_write_sql(struct kc_db *db, const char *sql, const char *what)
{
    int rc = db->conn ? kc_db_begin_write(db) : kc_db_err(db, KCACHE_EIO, "no database");
    if (rc)
        return rc;
    if ((rc = kc_db_exec(db, sql, what)) || (rc = kc_db_commit(db)))
        kc_db_rollback(db);
    return rc;
}

int kc_db_writable(struct kc_db *db)
{
    if (db->newer_schema)
        return kc_db_err(db, KCACHE_EVERSION,
                         "%s was written by a newer kcache (schema %d, this one knows %d): "
                         "upgrade kcache",
                         db->path, db->schema_version, kc_schema_version);
    if (db->read_only)
        return kc_db_err(db, KCACHE_EREADONLY, "%s is open read-only", db->path);
    return 0;
}

/* kc_db_busy()'s handler: short sleeps, so that a gap between two holders is not missed. */
static int busy_wait(void *arg, int count)
{
    struct kc_db *db = arg;
    uint64_t now = kc_mono_ns();
    if (count == 0)
        db->busy_since_ns = now;
    uint64_t limit = (uint64_t)db->busy_wait_ms * 1000000u;
    if (now - db->busy_since_ns >= limit)
        return 0;
    uint64_t left_us = (limit - (now - db->busy_since_ns)) / 1000u + 1;
    /* 100 us, doubling to 2 ms: a few hundred tries a second, each one fcntl. */
    uint64_t pause_us = count < 5 ? UINT64_C(100) << count : 2000u;
    usleep((useconds_t)KC_MIN(KC_MIN(pause_us, 2000u), left_us));
    return 1;
}

void kc_db_busy(struct kc_db *db, unsigned ms)
{
    if (!db->conn)
        return;
    db->busy_wait_ms = ms;
    sqlite3_busy_handler(db->conn, ms ? busy_wait : NULL, ms ? db : NULL);
}

/* The wait by hand for a lock SQLite will not wait for (dbint.h). */
void kc_db_wait_init(struct kc_db_wait *w, unsigned ms)
{
    w->deadline_ns = kc_mono_ns() + (uint64_t)ms * 1000000u;
    w->pause_us = 1000;
}

int kc_db_wait_more(struct kc_db_wait *w)
{
    uint64_t now = kc_mono_ns();
    if (now >= w->deadline_ns)
        return 0;
    uint64_t left_us = (w->deadline_ns - now) / 1000u;
    usleep((useconds_t)KC_MIN((uint64_t)w->pause_us, left_us + 1));
    w->pause_us = KC_MIN(w->pause_us * 2, 50000u);
    return 1;
}

/*
 * BEGIN IMMEDIATE takes the write lock up front, so a transaction never has
 * to upgrade a read lock and fail half-way. SQLite's busy handler waits for
 * the lock; a BUSY that still comes back (WAL recovery in another process)
 * is retried here until the same deadline.
 */
int kc_db_begin_write(struct kc_db *db)
{
    int rc = kc_db_writable(db);
    if (rc)
        return rc;
    struct kc_db_wait wait;
    kc_db_wait_init(&wait, db->busy_timeout_ms);
    for (;;) {
        int src = sqlite3_exec(db->conn, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (src == SQLITE_OK) {
            db->changes_at_begin = sqlite3_total_changes(db->conn);
            return 0;
        }
        if ((src & 0xff) != SQLITE_BUSY || !kc_db_wait_more(&wait))
            return kc_sqlerr(db, src, "starting a write");
    }
}

int kc_db_commit(struct kc_db *db)
{
    int rc = sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        /* Rows changed: a transaction that only looked (a lease held by
         * another process) leaves the WAL to others. */
        if (sqlite3_total_changes(db->conn) != db->changes_at_begin)
            db->wrote = 1;
        return 0;
    }
    int err = kc_sqlerr(db, rc, "committing");
    kc_db_rollback(db);
    return err;
}

void kc_db_rollback(struct kc_db *db)
{
    if (db->conn && !sqlite3_get_autocommit(db->conn))
        sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL);
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

static void finalize_all(struct kc_db *db)
{
    for (size_t i = 0; i < db->n_stmts; i++) {
        sqlite3_finalize(db->stmts[i]);
        db->stmts[i] = NULL;
    }
}

/*
 * A TRUNCATE checkpoint holds the write lock while it waits for readers to
 * finish (through the busy handler): with the busy timeout of 5 s, a
 * maintenance command's checkpoint under a reader held off every writer for
 * that long. It waits at most wait_ms; a checkpoint that cannot finish is
 * done by a later one. Returns SQLite's code.
 */
int kc_db_checkpoint(struct kc_db *db, unsigned wait_ms)
{
    kc_db_busy(db, wait_ms);
    int src = sqlite3_wal_checkpoint_v2(db->conn, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    kc_db_busy(db, db->busy_timeout_ms);
    return src;
}

void kc_db_settle(struct kc_db *db)
{
    struct stat st;
    if (!db->conn || db->read_only || db->newer_schema || stat(db->wal_path, &st) != 0 ||
        st.st_size == 0)
        return;
    if (st.st_size > KC_WAL_KEEP || db->wrote) {
        /* Only if nobody is reading or writing: this never waits. */
        kc_db_busy(db, 0);
        if (sqlite3_wal_checkpoint_v2(db->conn, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) ==
            SQLITE_OK)
            db->wrote = 0; /* its frames are in the file now */
        kc_db_busy(db, db->busy_timeout_ms);
    }
}

void kc_db_close(struct kc_db *db)
{
    finalize_all(db);
    if (db->conn) {
        kc_db_settle(db);
        sqlite3_close_v2(db->conn);
        db->conn = NULL;
    }
}
