/*
 * Schema 7 rewrites the text of schema 6's objects in place (no CHECKs, no
 * comments): a file of schema 6 full of entries is migrated with every entry
 * and every table's layout as it was; a fresh file's objects are the
 * reference's, short; the guard leaves a file whose objects are not kcache's
 * with its old text, and still usable; bundles of schema 6 still import.
 * Schema 8 moves the header lists of a file's entries into shared rows.
 * Schema 9 stores closures in shared chunks, and reads those stored whole.
 */
#include <kcache/bundle.h>
#include <kcache/store.h>

#include "db/db.h"
#include "db/dbint.h"
#include "store/storelib.h"
#include "util/codec.h"
#include "storetest.h"

#define N_ENTRIES 40
#define SIZE_MAX_ENTRY (96 << 10)

static uint8_t scratch[SIZE_MAX_ENTRY];

/* Every table's and index's columns as SQLite reads them: what must not change. */
static char *layout(sqlite3 *db)
{
    static const char sql[] =
        "SELECT group_concat(x, char(10)) FROM (SELECT s.name || ': ' || ifnull((SELECT "
        "group_concat(name || ' ' || type || ' ' || \"notnull\" || ' ' || quote(dflt_value) || "
        "' ' || pk, ', ') FROM pragma_table_xinfo(s.name)), '') || ifnull((SELECT "
        "group_concat(quote(name) || ' ' || key, ', ') FROM pragma_index_xinfo(s.name)), '') "
        "AS x FROM sqlite_schema s ORDER BY s.name)";
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        out = kc_strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

static char *layout_of(const char *path)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    char *out = layout(db);
    sqlite3_close(db);
    REQUIRE(out);
    return out;
}

/* How many objects' text contains `needle`. */
static int64_t texts_with(const char *path, const char *needle)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM sqlite_schema WHERE instr(sql, '%s') > 0",
             needle);
    int64_t n = st_sql_int(db, sql);
    sqlite3_close(db);
    return n;
}

/* Schema 9's objects gone: closures whole, as schema 8 keeps them. */
#define TAKE_BACK_TO_8                                                                             \
    "DROP INDEX closure_part_by_chunk; DROP TABLE closure_part; DROP TABLE closure_chunk;"        \
    "ALTER TABLE closure DROP COLUMN parts;"

/*
 * Takes a file of this build back to schema 7: each entry's whole key
 * material and every input row its own again (as the store hands them out),
 * schema 8's and 9's objects gone. What a kcache of schema 7 left, row for row.
 */
static void take_back_to_7(const char *path)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_key *keys = NULL;
    size_t n = 0;
    kcache_filter f = KCACHE_FILTER_INIT;
    REQUIRE(kcache_store_list_keys(&keys, &n, s, &f) == 0);
    kcache_entry **es = calloc(n ? n : 1, sizeof(*es));
    REQUIRE(es);
    for (size_t i = 0; i < n; i++)
        REQUIRE(kcache_store_get(&es[i], s, &keys[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA) ==
                0);
    kcache_store_close(s);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_stmt *u = NULL;
    REQUIRE(sqlite3_prepare_v2(db,
                               "UPDATE entry_info SET key_material = ?2 WHERE id ="
                               " (SELECT id FROM entry WHERE key = ?1)",
                               -1, &u, NULL) == SQLITE_OK);
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_blob(u, 1, es[i]->key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        if (es[i]->key_material_size)
            sqlite3_bind_blob(u, 2, es[i]->key_material, (int)es[i]->key_material_size,
                              SQLITE_STATIC);
        else
            sqlite3_bind_null(u, 2);
        CHECK(sqlite3_step(u) == SQLITE_DONE);
        sqlite3_reset(u);
        kcache_entry_free(es[i]);
    }
    sqlite3_finalize(u);
    free(es);
    kcache_keys_free(keys);
    static const char drop[] =
        "INSERT INTO entry_input SELECT f.id, f.inputs_at + li.seq, li.role, li.name, li.input_id"
        " FROM entry_info f JOIN input_list_item li ON li.list_id = f.inputs_id;"
        "DROP INDEX entry_info_by_headers; DROP INDEX entry_info_by_inputs;"
        "DROP INDEX input_list_item_by_input;"
        "ALTER TABLE entry_info DROP COLUMN headers_id;"
        "ALTER TABLE entry_info DROP COLUMN headers_at;"
        "ALTER TABLE entry_info DROP COLUMN inputs_id;"
        "ALTER TABLE entry_info DROP COLUMN inputs_at;"
        "DROP TABLE input_list_item; DROP TABLE input_list; DROP TABLE header_list;"
        TAKE_BACK_TO_8 "PRAGMA user_version = 7; COMMIT";
    REQUIRE(sqlite3_exec(db, drop, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
}

/*
 * Makes the file at path what a kcache of schema `version` (6 or 7) leaves:
 * the rows of schema 7 (take_back_to_7()), the objects' text of that version (taken
 * from the migrations). The tables are the same, so the rows stay as they are.
 */
static void make_schema(const char *path, int version)
{
    take_back_to_7(path);
    sqlite3 *ref = NULL, *db = NULL;
    REQUIRE(kc_db_schema_reference(&ref, version) == SQLITE_OK);
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE; PRAGMA writable_schema = ON", NULL, NULL, NULL) ==
            SQLITE_OK);
    sqlite3_stmt *q = NULL, *u = NULL;
    REQUIRE(sqlite3_prepare_v2(ref, "SELECT type, name, sql FROM sqlite_schema WHERE sql NOT NULL",
                               -1, &q, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE sqlite_schema SET sql = ?3 WHERE type = ?1 AND name = ?2",
                               -1, &u, NULL) == SQLITE_OK);
    int n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        for (int c = 0; c < 3; c++)
            sqlite3_bind_text(u, c + 1, (const char *)sqlite3_column_text(q, c), -1,
                              SQLITE_TRANSIENT);
        CHECK(sqlite3_step(u) == SQLITE_DONE && sqlite3_changes(db) == 1);
        sqlite3_reset(u);
        n++;
    }
    CHECK(n == 16);
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    int64_t cookie = st_sql_int(db, "PRAGMA schema_version");
    char sql[96];
    snprintf(sql, sizeof(sql), "PRAGMA schema_version = %lld; PRAGMA user_version = %d",
             (long long)cookie + 1, version);
    REQUIRE(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA writable_schema = OFF; COMMIT", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    sqlite3_close(ref);
    CHECK(texts_with(path, "CHECK (") > 0 || version == 7);
}

static void make_schema_6(const char *path)
{
    make_schema(path, 6);
}

/* Entry i, keyed by material it carries, so that bundles take it too. */
static int put_entry(kcache_store *s, unsigned i)
{
    char material[32];
    kcache_entry e = KCACHE_ENTRY_INIT;
    st_entry_of(&e, i, SIZE_MAX_ENTRY, scratch);
    st_material_entry(&e, material, i);
    e.name = "migrate.cu";
    e.toolchain = "test";
    return kcache_store_put(s, &e);
}

/* A store of entries of several sizes and kinds, closed; then made schema 6. */
static void fill_schema_6(const char *path)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < N_ENTRIES; i++)
        CHECK_RC(put_entry(s, i), 0);
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", "k", 1, "value", 5), 0);
    kcache_store_close(s);
    make_schema_6(path);
}

static void check_entries(kcache_store *s)
{
    int bad = 0;
    for (unsigned i = 0; i < N_ENTRIES; i++) {
        char material[32];
        kcache_key k = st_material_key(material, i);
        kcache_entry *e = NULL;
        bad += kcache_store_get(&e, s, &k, 0) != 0 || !st_entry_ok(e, i, SIZE_MAX_ENTRY, scratch);
        kcache_entry_free(e);
    }
    CHECK(bad == 0);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get_keyed(&e, s, "cuda.core", "k", 1, 0), 0);
    CHECK(e && e->size == 5 && memcmp(e->data, "value", 5) == 0);
    kcache_entry_free(e);
}

/*
 * Whether every table and index of before is in after as it was: its line
 * there is the same or goes on (columns added at the end, by schema 8).
 */
static int kept_layout(const char *before, const char *after)
{
    for (const char *b = before; *b;) {
        size_t n = strcspn(b, "\n");
        int found = 0;
        for (const char *a = after; *a && !found;) {
            size_t m = strcspn(a, "\n");
            found = m >= n && !strncmp(a, b, n) && (m == n || a[n] == ',');
            a += m + (a[m] == '\n');
        }
        if (!found) {
            fprintf(stderr, "  layout lost: %.*s\n", (int)n, b);
            return 0;
        }
        b += n + (b[n] == '\n');
    }
    return 1;
}

/*
 * Opens the file at path with this build (migrating it), reads every entry,
 * puts one more; every table's layout is what it was, and the file sound.
 */
static void open_migrated(const char *path)
{
    char *before = layout_of(path);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    check_entries(s);
    CHECK_RC(put_entry(s, N_ENTRIES), 0);
    kcache_store_close(s);
    char *after = layout_of(path);
    CHECK(kept_layout(before, after));
    CHECK(st_integrity_ok(path));
    free(before);
    free(after);
}

/* A fresh file holds the short text, the same as the migrations' reference. */
static void test_fresh_file(void)
{
    const char *path = test_path("fresh.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    CHECK_RC(put_entry(s, 1), 0);
    kcache_store_close(s);
    CHECK(texts_with(path, "CHECK") == 0);
    CHECK(texts_with(path, "--") == 0);
    CHECK(texts_with(path, "  ") == 0);

    sqlite3 *ref = NULL, *db = NULL;
    REQUIRE(kc_db_schema_reference(&ref, kc_schema_version) == SQLITE_OK);
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    static const char all[] = "SELECT group_concat(type || name || tbl_name || ifnull(sql, ''), "
                              "char(10)) FROM (SELECT * FROM sqlite_schema ORDER BY name)";
    sqlite3_stmt *a = NULL, *b = NULL;
    REQUIRE(sqlite3_prepare_v2(db, all, -1, &a, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(ref, all, -1, &b, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_step(a) == SQLITE_ROW && sqlite3_step(b) == SQLITE_ROW);
    CHECK(strcmp((const char *)sqlite3_column_text(a, 0), (const char *)sqlite3_column_text(b, 0)) ==
          0);
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    sqlite3_close(db);
    sqlite3_close(ref);
}

/* Schema 6 with entries: migrated in place, every entry and every column as it was. */
static void test_from_schema_6(void)
{
    const char *path = test_path("six.db");
    fill_schema_6(path);
    uint64_t size_before = st_file_size(path);
    open_migrated(path);
    CHECK(texts_with(path, "CHECK") == 0);
    /* Nothing was copied: the file grew by the one entry put, not by a second copy. */
    CHECK(st_file_size(path) < size_before + 2 * SIZE_MAX_ENTRY);
    st_check_books(path, "after the migration from schema 6");
}

/*
 * A file whose objects are not the ones kcache made (a column added by hand):
 * the rewrite would drop that column from the text, so the guard undoes the
 * whole step; the file is at schema 7 with its old text and works.
 */
static void test_guard_keeps_foreign_layout(void)
{
    const char *path = test_path("altered.db");
    fill_schema_6(path);
    st_sql(path, "ALTER TABLE usage ADD COLUMN extra INTEGER");
    int64_t checks = texts_with(path, "CHECK (");
    open_migrated(path);
    CHECK(texts_with(path, "extra INTEGER") == 1);
    CHECK(texts_with(path, "CHECK (") == checks);
}

/*
 * A WITHOUT ROWID table's rows are ordered by its primary key's sort order
 * and collations, which pragma_table_xinfo does not show: a counter table
 * whose key sorts DESC must keep its text, or the rewrite's ASC key would
 * describe a b-tree ordered the other way (lookups miss, integrity_check
 * fails).
 */
static void test_guard_sees_key_order(void)
{
    const char *path = test_path("desc.db");
    fill_schema_6(path);
    st_sql(path, "CREATE TABLE c2(name TEXT PRIMARY KEY DESC, value INTEGER NOT NULL) WITHOUT ROWID;"
                 "INSERT INTO c2 SELECT name, value FROM counter;"
                 "INSERT OR IGNORE INTO c2 VALUES ('evictions', 0), ('hits', 0), ('misses', 0);"
                 "DROP TABLE counter; ALTER TABLE c2 RENAME TO counter");
    CHECK(st_integrity_ok(path));
    open_migrated(path);
    CHECK(texts_with(path, "DESC") == 1);
}

/*
 * The second guard, on a file whose objects are schema 6's: a rewrite whose
 * new text would describe other rows (a key's order, a column's type, a
 * column fewer) is undone, and the file keeps its text and stays sound; the
 * step's own text is kept.
 */
static int try_rewrite(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
    int rc = kc_schema_rewrite(db, 6, sql);
    CHECK(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
    int defensive = -1;
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, -1, &defensive);
    CHECK(defensive == 1);
    sqlite3_close(db);
    return rc;
}

static void test_layout_guard(void)
{
    static const char *const wrong[] = {
        "UPDATE sqlite_schema SET sql = 'CREATE TABLE counter(name TEXT PRIMARY KEY DESC,"
        "value INTEGER NOT NULL)WITHOUT ROWID' WHERE name = 'counter'",
        "UPDATE sqlite_schema SET sql = 'CREATE TABLE counter(name TEXT PRIMARY KEY COLLATE "
        "NOCASE,value INTEGER NOT NULL)WITHOUT ROWID' WHERE name = 'counter'",
        "UPDATE sqlite_schema SET sql = 'CREATE TABLE usage(arch TEXT NOT NULL,kind INTEGER NOT "
        "NULL,hits INTEGER NOT NULL DEFAULT 0,misses INTEGER NOT NULL DEFAULT 0,"
        "PRIMARY KEY(arch,kind))WITHOUT ROWID' WHERE name = 'usage'",
        "UPDATE sqlite_schema SET sql = 'CREATE TABLE artifact(id INTEGER PRIMARY KEY,"
        "stored_digest TEXT NOT NULL,data BLOB NOT NULL)' WHERE name = 'artifact'",
        "UPDATE sqlite_schema SET sql = 'CREATE INDEX entry_lru ON entry(accessed_at DESC)' "
        "WHERE name = 'entry_lru'",
    };
    const char *path = test_path("guard.db");
    fill_schema_6(path);
    int64_t checks = texts_with(path, "CHECK (");
    for (size_t i = 0; i < sizeof(wrong) / sizeof(*wrong); i++) {
        CHECK_RC(try_rewrite(path, wrong[i]), 0);
        CHECK(texts_with(path, "CHECK (") == checks);
        CHECK(texts_with(path, "DESC") == 0 && texts_with(path, "NOCASE") == 0);
        CHECK(st_integrity_ok(path));
    }
    CHECK(texts_with(path, "saved_ns") == 1 && texts_with(path, "stored_digest BLOB") == 1);
    CHECK_RC(try_rewrite(path, kc_schema_steps[6]), 0);
    CHECK(texts_with(path, "CHECK") == 0);
    CHECK(st_integrity_ok(path));
}

/* A bundle a kcache of schema 6 exported still imports, with every entry. */
static void test_bundle_of_schema_6(void)
{
    const char *from = test_path("bundle-src.db"), *bundle = test_path("six.kcb");
    kcache_store *s = st_open(from, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < N_ENTRIES; i++)
        CHECK_RC(put_entry(s, i), 0);
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", "k", 1, "value", 5), 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, s, bundle, NULL), 0);
    kcache_store_close(s);
    make_schema_6(bundle);
    st_sql(bundle, "PRAGMA journal_mode = DELETE"); /* as export leaves it */

    kcache_store *t = st_open(test_path("bundle-dst.db"), UINT64_MAX, NULL, NULL);
    CHECK(st_import(t, bundle) == N_ENTRIES + 1);
    check_entries(t);
    kcache_store_close(t);
}

/*
 * Kernels of two header trees, stored by a kcache of schema 7: every entry
 * with its whole key material and its own input rows. The migration moves
 * them into shared lists in its transaction; every entry reads back as it
 * was put, and the file's books hold.
 */
#define N_KERNELS 12
static struct st_kernel kernels[N_KERNELS];

static void put_kernels(const char *path)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < N_KERNELS; i++)
        CHECK_RC(kcache_store_put(s, &kernels[i].e), 0);
    kcache_store_close(s);
}

static void check_kernels(kcache_store *s)
{
    int bad = 0;
    for (unsigned i = 0; i < N_KERNELS; i++) {
        kcache_entry *e = NULL;
        bad += kcache_store_get(&e, s, &kernels[i].e.key, KCACHE_GET_INPUTS) != 0 ||
               !st_kernel_ok(e, &kernels[i]);
        kcache_entry_free(e);
    }
    CHECK(bad == 0);
}

static void test_header_lists_from_schema_7(void)
{
    const char *path = test_path("seven.db");
    put_kernels(path);
    make_schema(path, 7);
    CHECK(st_path_int(path, "PRAGMA user_version") == 7);
    CHECK(st_path_int(path, "SELECT min(length(key_material)) FROM entry_info") > ST_HEADERS * 80);
    CHECK(st_path_int(path, "SELECT count(*) FROM entry_input") == N_KERNELS * (ST_HEADERS + 1));
    char *before = layout_of(path);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    check_kernels(s);
    kcache_store_close(s);
    char *after = layout_of(path);
    CHECK(kept_layout(before, after));
    free(before);
    free(after);
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 2);
    CHECK(st_path_int(path, "SELECT count(*) FROM input_list") == 2);
    CHECK(st_path_int(path, "SELECT max(length(key_material)) FROM entry_info") < 200);
    CHECK(st_path_int(path, "SELECT count(*) FROM entry_input") == N_KERNELS);
    st_check_books(path, "the migration of header lists from schema 7");
    CHECK(st_integrity_ok(path));
    /* A kernel put after the migration finds its tree's list already there. */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_store_delete(s, &kernels[0].e.key), 0);
    CHECK_RC(kcache_store_put(s, &kernels[0].e), 0);
    check_kernels(s);
    kcache_store_close(s);
    CHECK(st_path_int(path, "SELECT count(*) FROM header_list") == 2);
    st_check_books(path, "a put after the migration");
}

/* A bundle of schema 7 (each entry whole) imports, and its lists are shared here. */
static void test_header_lists_bundle_of_schema_7(void)
{
    const char *from = test_path("b7-src.db"), *bundle = test_path("seven.kcb");
    put_kernels(from);
    kcache_store *s = st_open(from, UINT64_MAX, NULL, NULL);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, s, bundle, NULL), 0);
    kcache_store_close(s);
    make_schema(bundle, 7);
    st_sql(bundle, "PRAGMA journal_mode = DELETE");
    const char *to = test_path("b7-dst.db");
    kcache_store *t = st_open(to, UINT64_MAX, NULL, NULL);
    CHECK(st_import(t, bundle) == N_KERNELS);
    check_kernels(t);
    kcache_store_close(t);
    CHECK(st_path_int(to, "SELECT count(*) FROM header_list") == 2);
}

/* The closure under base n: 64 KiB, n in its first bytes. */
static void closure_of(uint8_t *p, size_t size, unsigned n)
{
    for (size_t i = 0; i < size; i++)
        p[i] = (uint8_t)(i * 131 % 251 ^ i >> 9);
    memcpy(p, &n, sizeof(n));
}

static int closure_is(kcache_store *s, unsigned n, const uint8_t *want, size_t size)
{
    kcache_key base = st_key(5000 + n);
    kc_manifest_row *rows = NULL;
    size_t k = 0;
    int ok = kc_store_manifest_get(&rows, &k, s, &base) == 0 && k == 1 && rows[0].size == size &&
             memcmp(rows[0].closure, want, size) == 0;
    kc_manifest_rows_free(rows, k);
    return ok;
}

/*
 * A file of schema 8, its closures whole: after the migration to 9 they are
 * served as they were, a new closure is stored in chunks beside them, and
 * each goes with its entry.
 */
static void test_closures_from_schema_8(void)
{
    const char *path = test_path("eight.db");
    static uint8_t closure[64 << 10];
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 2; i++)
        CHECK_RC(put_entry(s, i), 0);
    kcache_store_close(s);
    /* Closure 0 as schema 8 stored it: whole, raw. */
    closure_of(closure, sizeof(closure), 0);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE;" TAKE_BACK_TO_8 "PRAGMA user_version = 8", NULL,
                         NULL, NULL) == SQLITE_OK);
    sqlite3_stmt *q = NULL;
    REQUIRE(sqlite3_prepare_v2(db,
                               "INSERT INTO closure (id, digest, codec, raw_size, data)"
                               " VALUES (1, ?3, 0, ?1, ?2)",
                               -1, &q, NULL) == SQLITE_OK);
    uint8_t digest[KC_DIGEST_SIZE]; /* by which schema 4-8 stored it, and a read checks it */
    kc_digest(digest, closure, sizeof(closure));
    sqlite3_bind_int(q, 1, (int)sizeof(closure));
    sqlite3_bind_blob(q, 2, closure, (int)sizeof(closure), SQLITE_STATIC);
    sqlite3_bind_blob(q, 3, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    kcache_key base = st_key(5000), key;
    char material[32];
    key = st_material_key(material, 0);
    REQUIRE(sqlite3_prepare_v2(db,
                               "INSERT INTO manifest (base, key, closure_id, recorded_at, created_at)"
                               " VALUES (?1, ?2, 1, 1, 1)",
                               -1, &q, NULL) == SQLITE_OK);
    sqlite3_bind_blob(q, 1, base.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    REQUIRE(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);

    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    CHECK(closure_is(s, 0, closure, sizeof(closure)));
    closure_of(closure, sizeof(closure), 1);
    base = st_key(5001);
    key = st_material_key(material, 1);
    CHECK_RC(kc_store_manifest_put(s, &base, &key, 1, closure, sizeof(closure)), 0);
    CHECK(closure_is(s, 1, closure, sizeof(closure)));
    closure_of(closure, sizeof(closure), 0);
    CHECK(closure_is(s, 0, closure, sizeof(closure)));
    kcache_store_close(s);
    CHECK(st_path_int(path, "SELECT count(*) FROM closure WHERE parts IS NULL") == 1);
    CHECK(st_path_int(path, "SELECT count(*) FROM closure_chunk") > 1);
    st_check_books(path, "closures whole and in chunks");
    s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 2; i++) {
        key = st_material_key(material, i);
        CHECK_RC(kcache_store_delete(s, &key), 0);
    }
    kcache_store_close(s);
    CHECK(st_path_int(path, "SELECT count(*) FROM closure") == 0);
    st_check_books(path, "closures whole and in chunks, deleted");
    CHECK(st_integrity_ok(path));
}

int main(void)
{
    for (unsigned i = 0; i < N_KERNELS; i++)
        st_kernel_make(&kernels[i], i, i % 2);
    test_fresh_file();
    test_from_schema_6();
    test_guard_keeps_foreign_layout();
    test_guard_sees_key_order();
    test_layout_guard();
    test_bundle_of_schema_6();
    test_header_lists_from_schema_7();
    test_header_lists_bundle_of_schema_7();
    test_closures_from_schema_8();
    for (unsigned i = 0; i < N_KERNELS; i++)
        st_kernel_free(&kernels[i]);
    return test_done();
}
