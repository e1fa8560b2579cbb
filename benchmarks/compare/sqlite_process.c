/*
 * The least a whole-process hit from one SQLite file costs: open the file,
 * one SELECT of the bytes by key from a one-table database, write them to
 * the output (left as it is when it already holds them, as kcache does).
 * No key is computed and nothing is checked; the WAL is kept between
 * processes. Linked as the kcache CLI links
 * SQLite (statically where the distribution ships the archive), so that
 * `kcache compile`'s hit is compared with the same process start.
 *
 *   sqlite_process DB put KEY FILE   # store FILE's bytes under KEY (text)
 *   sqlite_process DB get KEY OUT    # the timed process: a hit written to OUT
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(sqlite3 *db, const char *what)
{
    fprintf(stderr, "sqlite_process: %s: %s\n", what, db ? sqlite3_errmsg(db) : strerror(errno));
    return 1;
}

static int put(sqlite3 *db, const char *key, const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return fail(NULL, file);
    static char buf[64 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    sqlite3_stmt *st = NULL;
    if (sqlite3_exec(db,
                     "PRAGMA journal_mode = WAL;"
                     "CREATE TABLE IF NOT EXISTS e (id INTEGER PRIMARY KEY,"
                     " key BLOB NOT NULL UNIQUE, data BLOB NOT NULL)",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO e (key, data) VALUES (?1, ?2)", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(db, "schema");
    sqlite3_bind_blob(st, 1, key, (int)strlen(key), SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, buf, (int)n, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(db, "insert");
    sqlite3_finalize(st);
    /* Nothing left in the WAL for the hits to replay (kcache empties it too). */
    if (!rc && sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK)
        rc = fail(db, "checkpoint");
    return rc;
}

/* Whether out holds exactly data already (then its times are set to now). */
static int same(const char *out, const void *data, size_t size)
{
    int fd = open(out, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && (size_t)st.st_size == size;
    char *buf = ok ? malloc(size + 1) : NULL;
    ok = buf && read(fd, buf, size + 1) == (ssize_t)size && memcmp(buf, data, size) == 0 &&
         futimens(fd, NULL) == 0;
    free(buf);
    close(fd);
    return ok;
}

static int get(sqlite3 *db, const char *key, const char *out)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT data FROM e WHERE key = ?1", -1, &st, NULL) != SQLITE_OK)
        return fail(db, "prepare");
    sqlite3_bind_blob(st, 1, key, (int)strlen(key), SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW)
        return fail(db, "no entry for this key");
    const void *data = sqlite3_column_blob(st, 0);
    size_t size = (size_t)sqlite3_column_bytes(st, 0);
    int rc = 0;
    if (!same(out, data, size)) {
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", out, (long)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        rc = fd < 0 || write(fd, data, size) != (ssize_t)size || close(fd) != 0 ||
             rename(tmp, out) != 0;
        if (rc)
            rc = fail(NULL, out);
    }
    sqlite3_finalize(st);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[2], "put") && strcmp(argv[2], "get"))) {
        fprintf(stderr, "usage: sqlite_process DB put KEY FILE | sqlite_process DB get KEY OUT\n");
        return 2;
    }
    int get_ = argv[2][0] == 'g';
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(argv[1], &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (get_ ? 0 : SQLITE_OPEN_CREATE),
                        NULL) != SQLITE_OK)
        return fail(db, argv[1]);
    /* The WAL kept across processes, as kcache keeps it: creating and deleting it
     * in every process costs a file system transaction each. */
    int persist = 1;
    sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    int rc = get_ ? get(db, argv[3], argv[4]) : put(db, argv[3], argv[4]);
    sqlite3_close(db);
    return rc;
}
