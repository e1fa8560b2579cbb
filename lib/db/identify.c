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

static uint32_t read_be32(const uint8_t *p);
static int run_check(sqlite3 *conn, const char *pragma, char *why, size_t why_size);
#define quick_check(conn, why, why_size) run_check(conn, "PRAGMA quick_check(1)", why, why_size)

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
 * open, when neither may be rebuilt in place.
 *
 * The pair is read as SQLite would read it, without its -shm and without
 * writing anything anywhere: the file's pages copied into memory, then the
 * WAL's frames laid over them up to its last valid commit (each frame's salts
 * and running checksum checked as SQLite's recovery checks them), and the
 * image checked in memory (sqlite3_deserialize). Nothing is created beside
 * the cache, so a process killed during the check leaves nothing behind.
 *
 * Nothing read is torn: the file is copied before the WAL is read, and the
 * WAL's header (its salts change whenever a writer starts it over) is read
 * again afterwards. A checkpoint copies into the file only frames of the
 * WAL it runs from, which are read after the file, so every page a
 * checkpoint wrote during the copy is laid over by its frame; a WAL started
 * over meanwhile changes the header and the check is read again. Both files
 * are read through SQLite's own file layer, never opened and closed by
 * descriptor here: closing a descriptor of the file would drop the POSIX
 * locks every connection of this process holds on it.
 *
 * Returns 1 when the pair is damaged, 0 when it is sound or cannot be read
 * this way (a file over KC_WALCHECK_MAX, memory, a WAL that keeps starting
 * over).
 */
#define KC_WALCHECK_MAX (UINT64_C(1) << 30)
#define KC_WAL_HEADER 32
#define KC_WAL_FRAME_HEADER 24

static sqlite3_file *vfs_open(const char *path, int flags)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    sqlite3_file *f = vfs ? sqlite3_malloc(vfs->szOsFile) : NULL;
    if (!f)
        return NULL;
    memset(f, 0, (size_t)vfs->szOsFile);
    int out = 0;
    if (vfs->xOpen(vfs, path, f, flags | SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, &out) !=
        SQLITE_OK) {
        if (f->pMethods)
            f->pMethods->xClose(f);
        sqlite3_free(f);
        return NULL;
    }
    return f;
}

static void vfs_close(sqlite3_file *f)
{
    if (f) {
        if (f->pMethods)
            f->pMethods->xClose(f);
        sqlite3_free(f);
    }
}

/* Bytes at off; past the end they read as zeros (SQLite fills a short read). */
static int vfs_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    int rc = f->pMethods->xRead(f, buf, n, off);
    return rc == SQLITE_OK || rc == SQLITE_IOERR_SHORT_READ ? 0 : -1;
}

/* SQLite's WAL checksum (wal.c, walChecksumBytes): pairs of 32-bit words. */
static void wal_checksum(int big_endian, const uint8_t *p, size_t n, uint32_t s[2])
{
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint32_t x0, x1;
        if (big_endian) {
            x0 = read_be32(p + i);
            x1 = read_be32(p + i + 4);
        } else {
            x0 = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                 (uint32_t)p[i + 3] << 24;
            x1 = (uint32_t)p[i + 4] | (uint32_t)p[i + 5] << 8 | (uint32_t)p[i + 6] << 16 |
                 (uint32_t)p[i + 7] << 24;
        }
        s[0] += x0 + s[1];
        s[1] += x1 + s[0];
    }
}

/* A frame read but not yet committed: its page number and bytes. */
struct wal_pending {
    uint32_t pgno;
    uint8_t *page;
};

/*
 * The image of the pair in *image (sqlite3_malloc64, *size bytes), with the
 * WAL's header as read first in hdr. Returns 1 with an image, 0 when the WAL
 * adds no committed frame, -1 when it cannot be read.
 */
static int read_pair(sqlite3_file *dbf, sqlite3_file *walf, uint8_t hdr[KC_WAL_HEADER],
                     uint8_t **image, uint64_t *size)
{
    *image = NULL;
    *size = 0;
    sqlite3_int64 wal_size = 0, db_size = 0;
    if (walf->pMethods->xFileSize(walf, &wal_size) != SQLITE_OK || wal_size < KC_WAL_HEADER ||
        vfs_read(walf, hdr, KC_WAL_HEADER, 0) != 0)
        return 0;
    uint32_t magic = read_be32(hdr), page = read_be32(hdr + 8);
    if ((magic & ~1u) != 0x377f0682u || read_be32(hdr + 4) != 3007000 || page < 512 ||
        page > 65536 || (page & (page - 1)))
        return 0; /* SQLite reads such a WAL as empty */
    int big = magic & 1;
    uint32_t sum[2] = {0, 0};
    wal_checksum(big, hdr, 24, sum);
    if (sum[0] != read_be32(hdr + 24) || sum[1] != read_be32(hdr + 28))
        return 0;
    /* The file first: see above. */
    if (dbf->pMethods->xFileSize(dbf, &db_size) != SQLITE_OK || db_size < 0 ||
        (uint64_t)db_size > KC_WALCHECK_MAX)
        return -1;
    uint64_t have = (uint64_t)db_size / page * page;
    uint8_t *img = sqlite3_malloc64(have ? have : 1);
    if (!img || (have && vfs_read(dbf, img, (int)have, 0) != 0)) {
        sqlite3_free(img);
        return -1;
    }
    uint8_t *frame = sqlite3_malloc64(KC_WAL_FRAME_HEADER + (uint64_t)page);
    struct wal_pending *pending = NULL;
    size_t n_pending = 0, cap_pending = 0;
    int result = frame ? 0 : -1, failed = !frame;
    for (sqlite3_int64 off = KC_WAL_HEADER; !failed && off + KC_WAL_FRAME_HEADER + page <= wal_size;
         off += KC_WAL_FRAME_HEADER + page) {
        if (vfs_read(walf, frame, KC_WAL_FRAME_HEADER + (int)page, off) != 0)
            break;
        uint32_t pgno = read_be32(frame), commit = read_be32(frame + 4);
        if (pgno == 0 || memcmp(frame + 8, hdr + 16, 8) != 0)
            break; /* another generation's frame: the WAL ends here */
        wal_checksum(big, frame, 8, sum);
        wal_checksum(big, frame + KC_WAL_FRAME_HEADER, page, sum);
        if (sum[0] != read_be32(frame + 16) || sum[1] != read_be32(frame + 20))
            break;
        if (n_pending == cap_pending) {
            size_t cap = cap_pending ? 2 * cap_pending : 64;
            struct wal_pending *grown = sqlite3_realloc64(pending, cap * sizeof(*pending));
            if (!grown) {
                failed = 1;
                break;
            }
            pending = grown;
            cap_pending = cap;
        }
        uint8_t *copy = sqlite3_malloc64(page);
        if (!copy) {
            failed = 1;
            break;
        }
        memcpy(copy, frame + KC_WAL_FRAME_HEADER, page);
        pending[n_pending].pgno = pgno;
        pending[n_pending++].page = copy;
        if (!commit)
            continue;
        /* A commit: the transaction's pages laid over the image, sized as it says. */
        uint64_t want = (uint64_t)commit * page;
        if (want > KC_WALCHECK_MAX) {
            failed = 1;
            break;
        }
        if (want != have) {
            uint8_t *grown = sqlite3_realloc64(img, want);
            if (!grown) {
                failed = 1;
                break;
            }
            if (want > have)
                memset(grown + have, 0, want - have);
            img = grown;
            have = want;
        }
        for (size_t i = 0; i < n_pending; i++) {
            if (pending[i].pgno <= commit)
                memcpy(img + (uint64_t)(pending[i].pgno - 1) * page, pending[i].page, page);
            sqlite3_free(pending[i].page);
        }
        n_pending = 0;
        result = 1;
    }
    for (size_t i = 0; i < n_pending; i++)
        sqlite3_free(pending[i].page);
    sqlite3_free(pending);
    sqlite3_free(frame);
    if (failed || result != 1) {
        sqlite3_free(img);
        return failed ? -1 : 0;
    }
    *image = img;
    *size = have;
    return 1;
}

/* The image's verdict: 1 damaged, 0 sound, -1 cannot tell. Takes the image. */
static int image_damaged(uint8_t *img, uint64_t size)
{
    if (size >= 100) {
        img[18] = 1; /* read as a file without WAL: the frames are in it already */
        img[19] = 1;
    }
    sqlite3 *mem = NULL;
    if (kc_sqlite_open(&mem, ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) !=
            SQLITE_OK ||
        sqlite3_deserialize(mem, "main", img, (sqlite3_int64)size, (sqlite3_int64)size,
                            SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) !=
            SQLITE_OK) {
        if (!mem)
            sqlite3_free(img); /* deserialize frees it itself, even when it fails */
        sqlite3_close(mem);
        return -1;
    }
    int sound = quick_check(mem, NULL, 0);
    sqlite3_close(mem);
    return sound == 1 ? 0 : sound == 0 ? 1 : -1;
}

int kc_db_wal_foreign(struct kc_db *db)
{
    struct stat sb;
    if (!db->wal_path || lstat(db->wal_path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return 0;
    sqlite3_file *dbf = vfs_open(db->path, SQLITE_OPEN_MAIN_DB);
    sqlite3_file *walf = dbf ? vfs_open(db->wal_path, SQLITE_OPEN_WAL) : NULL;
    int foreign = 0;
    for (int attempt = 0; walf && attempt < 3; attempt++) {
        uint8_t before[KC_WAL_HEADER], after[KC_WAL_HEADER];
        uint8_t *img = NULL;
        uint64_t size = 0;
        int got = read_pair(dbf, walf, before, &img, &size);
        if (got <= 0)
            break;
        if (vfs_read(walf, after, KC_WAL_HEADER, 0) != 0 ||
            memcmp(before, after, KC_WAL_HEADER) != 0) {
            sqlite3_free(img); /* started over while read: read again */
            continue;
        }
        foreign = image_damaged(img, size) == 1;
        break;
    }
    vfs_close(walf);
    vfs_close(dbf);
    return foreign;
}

/*
 * A truncated file: the header promises more pages than the file holds and no
 * WAL could hold the rest. SQLite would only notice when it reads a missing
 * page, perhaps in the middle of a hit.
 */
static int read_header(struct kc_db *db, uint8_t h[100]);

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
    return quick_check(db->conn, why, why_size);
}

int kc_db_integrity_check(struct kc_db *db)
{
    return run_check(db->conn, "PRAGMA integrity_check(1)", NULL, 0);
}

/* A check pragma on any connection: 1 sound, 0 damaged, -1 cannot tell. */
static int run_check(sqlite3 *conn, const char *pragma, char *why, size_t why_size)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(conn, pragma, -1, &st, NULL);
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
