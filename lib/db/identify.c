/*
 * What the file at the path is: kcache's, new, another application's, or
 * damaged; read without SQLite writing anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/dbint.h"
#include "db/schema.h"

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
int kc_db_file_itself_sound(struct kc_db *db)
{
    char shm[4200];
    struct stat sb;
    snprintf(shm, sizeof(shm), "%s" KC_DB_SHM, db->path);
    if (stat(db->path, &sb) != 0 || sb.st_size == 0 || lstat(shm, &sb) != 0 ||
        !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return 0; /* no file to read, or no index to blame */
    sqlite3 *ro = open_untouched(db->path);
    if (!ro)
        return 0;
    sqlite3_stmt *st = NULL;
    int sound = 0, rc;
    /*
     * Only a file that says it is kcache's is looked into any further; and
     * the full integrity check, not quick_check: an index that disagrees with
     * its table is damage that only the full check sees.
     */
    if (kc_pragma_int(ro, "PRAGMA application_id", &rc) == KC_APPLICATION_ID && rc == SQLITE_OK &&
        sqlite3_prepare_v2(ro, "PRAGMA integrity_check(1)", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *verdict = sqlite3_column_text(st, 0);
        sound = verdict && !strcmp((const char *)verdict, "ok");
    }
    sqlite3_finalize(st);
    sqlite3_close(ro);
    return sound;
}

/*
 * Whether the file and its WAL read together are damaged where the file alone
 * is sound (kc_db_file_itself_sound): the WAL is another file's, as when a
 * database was moved over the file under a WAL that still held frames. Only
 * this tells it from a damaged -shm while other processes have the cache
 * open, when neither may be rebuilt in place. Reads hard links to both in a
 * directory of its own beside them, read-only, so that SQLite builds a fresh
 * index of the WAL there and writes nothing to either file. Returns 1 when
 * the pair is damaged, 0 when it is sound or cannot be read this way.
 */
int kc_db_wal_foreign(struct kc_db *db)
{
    struct stat sb;
    if (!db->wal_path || lstat(db->wal_path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return 0;
    char dir[4200], file[4300], wal[4300], shm[4300];
    snprintf(dir, sizeof(dir), "%s.walcheck-XXXXXX", db->path);
    if (!mkdtemp(dir))
        return 0;
    snprintf(file, sizeof(file), "%s/db", dir);
    snprintf(wal, sizeof(wal), "%s/db" KC_DB_WAL, dir);
    snprintf(shm, sizeof(shm), "%s/db" KC_DB_SHM, dir);
    int foreign = 0;
    sqlite3 *ro = NULL;
    if (link(db->path, file) == 0 && link(db->wal_path, wal) == 0 &&
        kc_sqlite_open(&ro, file, SQLITE_OPEN_READONLY) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        int src = sqlite3_prepare_v2(ro, "PRAGMA quick_check(1)", -1, &st, NULL);
        if (src == SQLITE_OK)
            src = sqlite3_step(st);
        const unsigned char *verdict = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        foreign = verdict ? strcmp((const char *)verdict, "ok") != 0
                          : (src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB;
        sqlite3_finalize(st);
    }
    sqlite3_close(ro);
    unlink(shm);
    unlink(wal);
    unlink(file);
    rmdir(dir);
    return foreign;
}

/*
 * A truncated file: the header promises more pages than the file holds and no
 * WAL could hold the rest. SQLite would only notice when it reads a missing
 * page, perhaps in the middle of a hit.
 */
static int read_header(struct kc_db *db, uint8_t h[100]);
static uint32_t read_be32(const uint8_t *p);

/*
 * Read from the header itself, not with PRAGMA page_count, which parses the
 * whole schema first: without a WAL the file's header is the database's. Its
 * page count counts only when SQLite would trust it (the change counter it
 * was written with is the current one); otherwise SQLite takes the size from
 * the file, and there is nothing to compare.
 */
static int looks_truncated(struct kc_db *db)
{
    uint64_t file_bytes, wal_bytes;
    kc_db_disk_usage(db, &file_bytes, &wal_bytes);
    if (wal_bytes > 0 || file_bytes == 0)
        return 0;
    uint8_t h[100];
    if (read_header(db, h) != 0 || read_be32(h + 92) != read_be32(h + 24))
        return 0;
    uint64_t page_size = (unsigned)h[16] << 8 | h[17];
    if (page_size == 1)
        page_size = 65536;
    return (uint64_t)read_be32(h + 28) * page_size > file_bytes;
}

/*
 * The file's marks: how many schema objects, application_id, user_version,
 * in one statement, so one read transaction (see kc_db_classify()).
 */
static int read_marks(sqlite3 *conn, int64_t *objects, int64_t *app, int64_t *version)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn,
                                "SELECT (SELECT count(*) FROM sqlite_schema), application_id, "
                                "user_version FROM pragma_application_id, pragma_user_version",
                                -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        *objects = sqlite3_column_int64(st, 0);
        *app = sqlite3_column_int64(st, 1);
        *version = sqlite3_column_int64(st, 2);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Reads only: a foreign file must stay byte for byte as it was. */
enum kc_file_kind kc_db_classify(struct kc_db *db, int64_t *version, int *sqlite_rc)
{
    int rc;
    /*
     * The header's fields first: they are read without the schema. Only a
     * file without our id has its objects counted, a statement that parses
     * the whole schema; a kcache file's schema is parsed once, by the first
     * statement that needs it (a hit's lookup), and damage found there is
     * recovered from as anywhere else (store/storeint.h).
     *
     * All in one read transaction: read one at a time, another process
     * creating the cache could commit between them, and no id from before
     * its commit with the version from after it called a cache that is
     * kcache's another application's (tests/store/test_hostile_files.c,
     * create-between-reads).
     */
    int own_txn = sqlite3_get_autocommit(db->conn) &&
                  sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int64_t app = kc_pragma_int(db->conn, "PRAGMA application_id", &rc);
    *version = rc ? 0 : kc_pragma_int(db->conn, "PRAGMA user_version", &rc);
    int64_t objects = rc || app == KC_APPLICATION_ID
                          ? 0
                          : kc_pragma_int(db->conn, "SELECT count(*) FROM sqlite_schema", &rc);
    if (own_txn)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    *sqlite_rc = rc;
    if (rc != SQLITE_OK)
        return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ? KC_DAMAGED
                                                                             : KC_FOREIGN;
    if (app == KC_APPLICATION_ID)
        return looks_truncated(db) ? KC_DAMAGED : KC_OURS;
    if (app == 0 && objects == 0 && *version == 0)
        return KC_NEW;
    return KC_FOREIGN;
}

static uint32_t read_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The file's first 100 bytes, read through the connection's own file (see kc_db_peek). */
static int read_header(struct kc_db *db, uint8_t h[100])
{
    sqlite3_file *f = NULL;
    if (!db->conn ||
        sqlite3_file_control(db->conn, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || !f ||
        !f->pMethods || f->pMethods->xRead(f, h, 100, 0) != SQLITE_OK)
        return -1;
    return 0;
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
enum kc_file_kind kc_db_peek(struct kc_db *db)
{
    struct stat st;
    if (stat(db->path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return KC_NEW; /* absent or empty; anything else is reported by SQLite's open */
    /* What quarantine may move aside is this file and no other. */
    db->dev = st.st_dev;
    db->ino = st.st_ino;
    uint8_t h[100];
    if (st.st_size < (off_t)sizeof(h))
        return KC_DAMAGED;
    if (read_header(db, h) != 0)
        return KC_NEW; /* could not look: the real open tells */
    /* The fields SQLite itself insists on: magic, page size, fixed fractions. */
    unsigned page = (unsigned)h[16] << 8 | h[17];
    int valid = memcmp(h, "SQLite format 3", 16) == 0 &&
                (page == 1 || (page >= 512 && (page & (page - 1)) == 0)) && h[21] == 64 &&
                h[22] == 32 && h[23] == 32;
    uint32_t app = read_be32(h + 68), version = read_be32(h + 60);
    if (!valid)
        return KC_DAMAGED;
    /* Largest root page and incremental flag: what PRAGMA auto_vacuum would
     * tell after parsing the whole schema. */
    db->incremental_vacuum = read_be32(h + 52) != 0 && read_be32(h + 64) != 0;
    /* Read and write format 2: a WAL database, which every connection opens in WAL mode. */
    db->header_wal = h[18] == 2 && h[19] == 2;
    if (app == KC_APPLICATION_ID)
        return KC_OURS;
    if (app != 0 || version != 0)
        return KC_FOREIGN;
    /* Counting its objects is a statement: on a connection of its own that
     * writes nothing (immutable), since this one would make -wal and -shm. */
    sqlite3 *ro = open_untouched(db->path);
    if (!ro)
        return KC_NEW;
    int64_t app64 = 0, version64 = 0;
    /* Its marks read again with its objects: the header above may be from
     * before a creator's checkpoint that the count sees. */
    int64_t objects = 0;
    int rc = read_marks(ro, &objects, &app64, &version64);
    sqlite3_close(ro);
    if (rc != SQLITE_OK || app64 == KC_APPLICATION_ID)
        return rc == SQLITE_OK ? KC_OURS : KC_NEW;
    return objects > 0 || app64 != 0 || version64 != 0 ? KC_FOREIGN : KC_NEW;
}

int kc_db_foreign_error(struct kc_db *db)
{
    return kc_db_err(db, KCACHE_EFOREIGN,
                     "%s is another application's SQLite database; kcache leaves it alone: "
                     "set KCACHE_PATH to another file",
                     db->path);
}

/*
 * SQLite reports some damage as something else: a page number gone wrong in
 * a damaged file makes a write ask for a page past the maximum and come back
 * as SQLITE_FULL. Before a full disk is reported, SQLite checks the file
 * (quick_check reads it all, so only on this rare path): damage found is
 * damage, for recovery to set aside.
 */
int kc_db_quick_check(struct kc_db *db, char *why, size_t why_size)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db->conn, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_step(st);
    const unsigned char *verdict = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    int result = verdict && !strcmp((const char *)verdict, "ok")                              ? 1
                 : verdict || (src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB ? 0
                                                                                              : -1;
    if (result != 1 && why)
        snprintf(why, why_size, "%s", verdict ? (const char *)verdict : sqlite3_errstr(src));
    sqlite3_finalize(st);
    return result;
}
