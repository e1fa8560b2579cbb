/* See sqlite_floor.h. */
#include "sqlite_floor.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "cmp_util.h"

struct sqf_writer {
    sqlite3 *db;
    sqlite3_stmt *put;
};

static void check(sqlite3 *db, int rc, const char *what)
{
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
        cmp_fail("sqlite floor: %s: %s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

sqf_writer *sqf_create(const char *path)
{
    sqf_writer *w = cmp_xmalloc(sizeof(*w));
    check(NULL, sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
          "create");
    check(w->db, sqlite3_exec(w->db, "PRAGMA journal_mode = WAL;"
                                     "CREATE TABLE e (id INTEGER PRIMARY KEY,"
                                     " key BLOB NOT NULL UNIQUE, data BLOB NOT NULL); BEGIN",
                              NULL, NULL, NULL),
          "schema");
    check(w->db, sqlite3_prepare_v2(w->db, "INSERT INTO e (key, data) VALUES (?1, ?2)", -1, &w->put, NULL),
          "prepare");
    return w;
}

void sqf_put(sqf_writer *w, const uint8_t key[32], const void *data, size_t size)
{
    sqlite3_bind_blob(w->put, 1, key, 32, SQLITE_STATIC);
    sqlite3_bind_blob64(w->put, 2, data, size, SQLITE_STATIC);
    check(w->db, sqlite3_step(w->put), "insert");
    sqlite3_reset(w->put);
}

void sqf_finish(sqf_writer *w)
{
    sqlite3_finalize(w->put);
    check(w->db, sqlite3_exec(w->db, "COMMIT; PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL),
          "commit");
    sqlite3_close(w->db);
    free(w);
}

int sqf_first_hit(const char *path, const uint8_t key[32], void **data, size_t *size)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    check(NULL, sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL),
          "open");
    check(db, sqlite3_prepare_v2(db, "SELECT data FROM e WHERE key = ?1", -1, &st, NULL),
          "prepare");
    sqlite3_bind_blob(st, 1, key, 32, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW)
        cmp_fail("sqlite floor: a sampled key is missing");
    *size = (size_t)sqlite3_column_bytes(st, 0);
    *data = cmp_xmalloc(*size + 1);
    memcpy(*data, sqlite3_column_blob(st, 0), *size);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return 0;
}
