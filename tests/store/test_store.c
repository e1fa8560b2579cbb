/* The store's basic contract: put, get, replace, delete, find, list, stats. */
#include <kcache/store.h>
#include <sqlite3.h>

#include "store/storelib.h"
#include "util/codec.h"
#include "storetest.h"

static kcache_key key_of(unsigned n)
{
    kcache_key k;
    memset(&k, 0, sizeof(k));
    for (int i = 0; i < 4; i++)
        k.bytes[i] = (uint8_t)(n >> (8 * (3 - i)));
    k.bytes[31] = 0x5a;
    return k;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    /* Compressible like a CUBIN: repeated structure with some variation. */
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i % 64 < 48) ? (i * 7 + seed) % 13 : (seed * 31 + i) % 251);
}

static kcache_store *open_at(const char *path, uint64_t max_size)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = max_size;
    kcache_store *s = NULL;
    char err[256];
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "open %s: %s\n", path, err);
    REQUIRE(rc == 0 && s);
    return s;
}

static void test_put_get(void)
{
    kcache_store *s = open_at(test_path("a.db"), UINT64_MAX);
    static uint8_t data[300000];
    fill(data, sizeof(data), 1);
    const char *exprs[] = {"tiled_gemm<float, 16>", "tiled_gemm<double, 8>"};
    const char *lowered[] = {"_Z10tiled_gemmIfLi16EEvPKT_S2_PS0_i",
                             "_Z10tiled_gemmIdLi8EEvPKT_S2_PS0_i"};
    const char hdr[] = "#pragma once\n";
    kcache_input inputs[] = {{KCACHE_INPUT_SOURCE, "tiled_gemm.cu", "int x;", 6},
                             {KCACHE_INPUT_HEADER, "common.cuh", hdr, sizeof(hdr) - 1}};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = key_of(1);
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = "sm_90";
    e.name = "tiled_gemm.cu";
    e.data = data;
    e.size = sizeof(data);
    e.log = "warning: something";
    e.toolchain = "nvrtc 13.0";
    e.compile_ns = 123456789;
    e.key_material = "material";
    e.key_material_size = 8;
    e.n_names = 2;
    e.name_exprs = exprs;
    e.lowered_names = lowered;
    e.n_inputs = 2;
    e.inputs = inputs;
    CHECK_RC(kcache_store_put(s, &e), 0);

    kcache_entry *got = NULL;
    CHECK_RC(kcache_store_get(&got, s, &e.key, KCACHE_GET_INPUTS), 0);
    REQUIRE(got);
    CHECK(got->size == sizeof(data));
    CHECK(memcmp(got->data, data, sizeof(data)) == 0);
    CHECK(((const char *)got->data)[got->size] == '\0');
    CHECK(got->stored_size < got->size / 4);
    CHECK(got->kind == KCACHE_KIND_CUBIN);
    CHECK(strcmp(got->arch, "sm_90") == 0);
    CHECK(strcmp(got->name, "tiled_gemm.cu") == 0);
    CHECK(strcmp(got->log, "warning: something") == 0);
    CHECK(strcmp(got->toolchain, "nvrtc 13.0") == 0);
    CHECK(got->compile_ns == 123456789);
    CHECK(got->key_material_size == 8 && memcmp(got->key_material, "material", 8) == 0);
    REQUIRE(got->n_names == 2);
    CHECK(strcmp(got->name_exprs[1], exprs[1]) == 0);
    CHECK(strcmp(got->lowered_names[0], lowered[0]) == 0);
    REQUIRE(got->n_inputs == 2);
    CHECK(got->inputs[1].role == KCACHE_INPUT_HEADER);
    CHECK(strcmp(got->inputs[1].name, "common.cuh") == 0);
    CHECK(got->inputs[1].size == sizeof(hdr) - 1 &&
          memcmp(got->inputs[1].data, hdr, sizeof(hdr) - 1) == 0);
    kcache_entry_free(got);

    /* A miss. */
    kcache_key other = key_of(2);
    got = (kcache_entry *)1;
    CHECK_RC(kcache_store_get(&got, s, &other, 0), KCACHE_ENOTFOUND);
    CHECK(got == NULL);

    /* Replace: same key, new bytes. */
    fill(data, 5000, 9);
    e.size = 5000;
    e.n_inputs = 0;
    CHECK_RC(kcache_store_put(s, &e), 0);
    CHECK_RC(kcache_store_get(&got, s, &e.key, 0), 0);
    REQUIRE(got);
    CHECK(got->size == 5000 && memcmp(got->data, data, 5000) == 0);
    kcache_entry_free(got);

    /* find by prefix */
    kcache_key found;
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &e.key);
    hex[10] = '\0';
    CHECK_RC(kcache_store_find(&found, s, hex), 0);
    CHECK(memcmp(found.bytes, e.key.bytes, 32) == 0);
    CHECK_RC(kcache_store_find(&found, s, "zzzz"), KCACHE_EINVAL);
    CHECK_RC(kcache_store_find(&found, s, "ffff"), KCACHE_ENOTFOUND);

    /* stats see one entry and the hits above */
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    REQUIRE(st);
    CHECK(st->entries == 1);
    CHECK(st->raw_bytes == 5000);
    CHECK(st->hits == 2);
    CHECK(st->schema_version == 9);
    kcache_stats_free(st);

    CHECK_RC(kcache_store_delete(s, &e.key), 0);
    CHECK_RC(kcache_store_delete(s, &e.key), KCACHE_ENOTFOUND);
    CHECK_RC(kcache_store_get(&got, s, &e.key, 0), KCACHE_ENOTFOUND);
    kcache_store_close(s);
}

static int count_cb(void *ud, const kcache_entry *e)
{
    (void)e;
    (*(int *)ud)++;
    return 0;
}

static void test_list_and_prune(void)
{
    kcache_store *s = open_at(test_path("b.db"), UINT64_MAX);
    static uint8_t data[20000];
    for (unsigned i = 0; i < 50; i++) {
        fill(data, sizeof(data), i);
        kcache_entry e = KCACHE_ENTRY_INIT;
        e.key = key_of(100 + i);
        e.kind = i % 2 ? KCACHE_KIND_PTX : KCACHE_KIND_CUBIN;
        e.arch = i % 3 ? "sm_90" : "sm_80";
        e.data = data;
        e.size = sizeof(data);
        CHECK_RC(kcache_store_put(s, &e), 0);
    }
    int n = 0;
    kcache_filter f = KCACHE_FILTER_INIT;
    CHECK_RC(kcache_store_list(s, &f, count_cb, &n), 0);
    CHECK(n == 50);
    n = 0;
    f.kind = KCACHE_KIND_PTX;
    f.arch = "sm_80";
    CHECK_RC(kcache_store_list(s, &f, count_cb, &n), 0);
    CHECK(n == 8); /* i odd and i % 3 == 0: 3, 9, ..., 45 */

    kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    po.max_entries = 20;
    CHECK_RC(kcache_store_prune(&r, s, &po), 0);
    CHECK(r.evicted == 30);
    kcache_stats *st;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st->entries == 20);
    CHECK(st->evictions == 30);
    kcache_stats_free(st);
    /* The oldest went: entry 100 is gone, 149 is there. */
    kcache_entry *got = NULL;
    kcache_key k = key_of(100);
    CHECK_RC(kcache_store_get(&got, s, &k, KCACHE_GET_NO_TOUCH), KCACHE_ENOTFOUND);
    k = key_of(149);
    CHECK_RC(kcache_store_get(&got, s, &k, KCACHE_GET_NO_TOUCH), 0);
    kcache_entry_free(got);
    kcache_store_close(s);
}

/* A prefix two entries share is ambiguous, and said so; enough digits find each. */
static void test_find_ambiguous(void)
{
    kcache_store *s = open_at(test_path("ambiguous.db"), UINT64_MAX);
    static uint8_t data[100];
    fill(data, sizeof(data), 3);
    for (unsigned n = 0x12340001; n <= 0x12340002; n++) {
        kcache_entry e = KCACHE_ENTRY_INIT;
        e.key = key_of(n);
        e.kind = KCACHE_KIND_CUBIN;
        e.arch = "sm_90";
        e.name = "a.cu";
        e.data = data;
        e.size = sizeof(data);
        e.toolchain = "test";
        CHECK_RC(kcache_store_put(s, &e), 0);
    }
    kcache_key found;
    CHECK_RC(kcache_store_find(&found, s, "1234"), KCACHE_EAMBIGUOUS);
    CHECK(strstr(kcache_store_errmsg(s), "more than one entry starts with 1234") != NULL);
    CHECK_RC(kcache_store_find(&found, s, "1234000"), KCACHE_EAMBIGUOUS);
    for (unsigned n = 0x12340001; n <= 0x12340002; n++) {
        char hex[9];
        snprintf(hex, sizeof(hex), "%08x", n);
        kcache_key want = key_of(n);
        memset(&found, 0, sizeof(found));
        CHECK_RC(kcache_store_find(&found, s, hex), 0);
        CHECK(memcmp(found.bytes, want.bytes, KCACHE_KEY_SIZE) == 0);
    }
    CHECK(strcmp(kcache_strerror(KCACHE_EAMBIGUOUS), "ambiguous key prefix") == 0);
    kcache_store_close(s);
}

/* One integer from the file, through a connection of its own. */
static int64_t sql_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Entry n: a shared header, a header of its own, a closure shared by even n. */
static int put_booked(kcache_store *s, unsigned n, uint8_t *data, size_t size)
{
    char own[64];
    snprintf(own, sizeof(own), "// header of entry %u\n", n);
    kcache_input inputs[] = {{KCACHE_INPUT_HEADER, "common.cuh", "#pragma once\n", 13},
                             {KCACHE_INPUT_HEADER, "own.cuh", own, strlen(own)}};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = key_of(n);
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = "sm_90";
    e.name = "k.cu";
    fill(data, size, n);
    e.data = data;
    e.size = size - n;
    e.inputs = inputs;
    e.n_inputs = 2;
    int rc = kcache_store_put(s, &e);
    kcache_key base = key_of(1000 + n);
    char closure[64];
    snprintf(closure, sizeof(closure), "closure %u", n % 2 ? n : 0);
    return rc ? rc : kc_store_manifest_put(s, &base, &e.key, 1, closure, strlen(closure));
}

/*
 * Every way entries go (delete, replace, prune, a namespace cleared or
 * trimmed, clear) keeps the totals and takes what only they used: the
 * statements say it themselves, no trigger does (lib/store/prune.c).
 */
static void test_books(void)
{
    const char *path = test_path("books.db");
    kcache_store *s = open_at(path, UINT64_MAX);
    static uint8_t data[20000];
    for (unsigned n = 0; n < 12; n++)
        CHECK_RC(put_booked(s, n, data, sizeof(data)), 0);
    st_check_books(path, "puts");
    kcache_key k = key_of(3);
    CHECK_RC(kcache_store_delete(s, &k), 0);
    st_check_books(path, "a delete");
    CHECK_RC(put_booked(s, 4, data, sizeof(data) - 100), 0); /* replaced, another size */
    CHECK_RC(put_booked(s, 4, data, sizeof(data)), 0);
    st_check_books(path, "replacing");
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    o.max_entries = 6;
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(r.evicted == 5);
    st_check_books(path, "a prune");
    CHECK(sql_int(path, "SELECT count(*) FROM input") == 7); /* common.cuh and 6 own */
    for (unsigned i = 0; i < 6; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%u", i);
        CHECK_RC(kcache_store_put_keyed(s, "ns", key, strlen(key), data, 1000 + i), 0);
    }
    uint64_t n = 0;
    CHECK_RC(kcache_store_trim_namespace(&n, s, "ns", 3100), 0);
    CHECK(n == 3);
    st_check_books(path, "trimming a namespace");
    CHECK_RC(kcache_store_clear_namespace(&n, s, "ns"), 0);
    CHECK(n == 3);
    st_check_books(path, "clearing a namespace");
    CHECK_RC(kcache_store_clear(s), 0);
    st_check_books(path, "clear");
    CHECK(sql_int(path, "SELECT entries + raw_bytes + stored_bytes FROM totals") == 0);
    /* The hit path's schema: no triggers for every open to parse. */
    CHECK(sql_int(path, "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'") == 0);
    kcache_store_close(s);
}

/* A closure of size bytes like CuPy's: mostly one tree's probes; near holds the times of one
 * directory, which differ from one closure to the next. */
static void closure_like(uint8_t *p, size_t size, uint64_t near)
{
    uint64_t x = 0x6b63616368650001u;
    for (size_t i = 0; i < size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)(i % 48 < 24 ? i % 7 : x); /* half compressible, as paths and digests */
    }
    memcpy(p + size / 3, &near, sizeof(near));
}

/*
 * Closures that differ in a few bytes share the chunks around the change
 * (schema/009_closure_chunks.sql): the file grows by a little per closure,
 * not by a whole one; each comes back byte for byte; a closure's own chunks
 * go with it, the shared ones stay while another holds them.
 */
static void test_closure_chunks(void)
{
    const char *path = test_path("chunks.db");
    kcache_store *s = open_at(path, UINT64_MAX);
    static uint8_t data[4000], closure[192 << 10], got[192 << 10];
    enum { N = 16 };
    for (unsigned n = 0; n < N; n++) {
        CHECK_RC(put_booked(s, n, data, sizeof(data)), 0);
        kcache_key base = key_of(2000 + n), key = key_of(n);
        closure_like(closure, sizeof(closure), 1000003u * n);
        CHECK_RC(kc_store_manifest_put(s, &base, &key, 1, closure, sizeof(closure)), 0);
    }
    kcache_store_close(s);
    /* LZ4 makes one closure about 110 KiB; whole, the sixteen were 1.7 MiB. */
    int64_t pages = sql_int(path, "SELECT count(*) FROM dbstat WHERE name IN"
                                  " ('closure', 'closure_chunk', 'closure_part')");
    printf("16 closures of 192 KiB, a few bytes apart: %lld KiB of pages\n",
           (long long)(pages * 4));
    CHECK(pages > 0 && pages * 4096 < 3 * (int64_t)sizeof(closure));
    s = open_at(path, UINT64_MAX);
    for (unsigned n = 0; n < N; n++) {
        kcache_key base = key_of(2000 + n);
        kc_manifest_row *rows = NULL;
        size_t k = 0;
        CHECK_RC(kc_store_manifest_get(&rows, &k, s, &base), 0);
        closure_like(got, sizeof(got), 1000003u * n);
        CHECK(k == 1 && rows[0].size == sizeof(got) && memcmp(rows[0].closure, got, sizeof(got)) == 0);
        kc_manifest_rows_free(rows, k);
    }
    /* One goes with its entry: the others are whole still. */
    kcache_key k3 = key_of(3);
    CHECK_RC(kcache_store_delete(s, &k3), 0);
    st_check_books(path, "a closure's entry deleted");
    kcache_key base0 = key_of(2000);
    kc_manifest_row *rows = NULL;
    size_t k = 0;
    CHECK_RC(kc_store_manifest_get(&rows, &k, s, &base0), 0);
    closure_like(got, sizeof(got), 0);
    CHECK(k == 1 && memcmp(rows[0].closure, got, sizeof(got)) == 0);
    kc_manifest_rows_free(rows, k);
    CHECK_RC(kcache_store_clear(s), 0);
    st_check_books(path, "clear");
    CHECK(sql_int(path, "SELECT count(*) FROM closure_chunk") == 0);
    kcache_store_close(s);
}

/*
 * Xors the byte at `at` (from the end when negative) of each closure chunk
 * of path that `where` selects (SQL on closure_chunk, ?1 bound to arg) with
 * mask; how many.
 */
static int damage_chunks(const char *path, const char *where, int arg, int at, int mask)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL, *u = NULL;
    char sql[200];
    snprintf(sql, sizeof(sql), "SELECT id, data FROM closure_chunk WHERE %s", where);
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK);
    sqlite3_bind_int(q, 1, arg);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE closure_chunk SET data = ?2 WHERE id = ?1", -1, &u,
                               NULL) == SQLITE_OK);
    int n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        static uint8_t buf[1 << 16];
        int size = sqlite3_column_bytes(q, 1), i = at < 0 ? size + at : at;
        REQUIRE(size > 0 && size <= (int)sizeof(buf) && i >= 0 && i < size);
        memcpy(buf, sqlite3_column_blob(q, 1), (size_t)size);
        buf[i] ^= (uint8_t)mask;
        sqlite3_bind_int64(u, 1, sqlite3_column_int64(q, 0));
        sqlite3_bind_blob(u, 2, buf, size, SQLITE_STATIC);
        REQUIRE(sqlite3_step(u) == SQLITE_DONE);
        sqlite3_reset(u);
        n++;
    }
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    sqlite3_close(db);
    return n;
}

/* A closure stored whole and raw, as before schema 9, under base for key; its row's id. */
static int64_t put_whole_closure(const char *path, const kcache_key *base, const kcache_key *key,
                                 const uint8_t *closure, size_t size)
{
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, closure, size);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, "INSERT INTO closure (digest, raw_size, codec, data)"
                                   " VALUES (?1, ?2, 0, ?3)", -1, &q, NULL) == SQLITE_OK);
    sqlite3_bind_blob(q, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)size);
    sqlite3_bind_blob(q, 3, closure, (int)size, SQLITE_STATIC);
    REQUIRE(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    int64_t id = sqlite3_last_insert_rowid(db);
    REQUIRE(sqlite3_prepare_v2(db, "INSERT INTO manifest (base, key, closure_id, recorded_at,"
                                   " created_at) VALUES (?1, ?2, ?3, 1, 1)", -1, &q, NULL) ==
            SQLITE_OK);
    sqlite3_bind_blob(q, 1, base->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, id);
    REQUIRE(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return id;
}

/* How many closures the store hands back under base. */
static size_t closures_under(kcache_store *s, const kcache_key *base)
{
    kc_manifest_row *rows = NULL;
    size_t k = 0;
    CHECK_RC(kc_store_manifest_get(&rows, &k, s, base), 0);
    kc_manifest_rows_free(rows, k);
    return k;
}

/* How many closures the store hands back under base with other bytes than want's. */
static size_t others_under(kcache_store *s, const kcache_key *base, const void *want, size_t n)
{
    kc_manifest_row *rows = NULL;
    size_t k = 0, other = 0;
    CHECK_RC(kc_store_manifest_get(&rows, &k, s, base), 0);
    for (size_t i = 0; i < k; i++)
        other += rows[i].size != n || memcmp(rows[i].closure, want, n) != 0;
    kc_manifest_rows_free(rows, k);
    return other;
}

/*
 * A closure chunk damaged on disk, of its own length, in a codec with no
 * checksum of its own (raw; LZ4 blocks, the default, neither): read back it
 * would name other paths than the compile looked at and could hold where
 * the one recorded would not (a stale kernel). A new handle finds no
 * closure; a handle that read it before hands back at most the bytes it
 * read then, kept by their digest (shared.c), never other bytes. Likewise
 * a closure stored whole, as before schema 9, damaged.
 */
static void test_damaged_chunk(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("damaged_chunk.db"));
    kcache_store *s = open_at(path, UINT64_MAX);
    static uint8_t data[4000], closure[1500];
    uint64_t x = 0x6b63616368650002u;
    for (size_t i = 0; i < sizeof(closure); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        closure[i] = (uint8_t)x; /* LZ4 does not pay: stored raw */
    }
    CHECK_RC(put_booked(s, 7, data, sizeof(data)), 0);
    kcache_key base = key_of(3007), key = key_of(7);
    CHECK_RC(kc_store_manifest_put(s, &base, &key, 1, closure, sizeof(closure)), 0);
    CHECK(closures_under(s, &base) == 1);
    /* The last byte, as "first" becomes "firsu": the same length, another path. */
    CHECK(damage_chunks(path, "codec = 0 AND length(data) = ?1", (int)sizeof(closure), -1,
                        0x20) == 1);
    if (others_under(s, &base, closure, sizeof(closure)) != 0)
        fprintf(stderr, "damaged chunk: the handle that read it handed back other bytes\n");
    CHECK(others_under(s, &base, closure, sizeof(closure)) == 0);
    kcache_store_close(s);
    s = open_at(path, UINT64_MAX);
    if (closures_under(s, &base) != 0)
        fprintf(stderr, "damaged chunk: a new handle handed back other bytes\n");
    CHECK(closures_under(s, &base) == 0);
    /* A closure stored whole (a file migrated from schema 8, an old bundle) likewise. */
    kcache_key whole = key_of(3008);
    closure[0] ^= 1; /* not the bytes of the first: a closure row of its own */
    int64_t id = put_whole_closure(path, &whole, &key, closure, sizeof(closure));
    CHECK(closures_under(s, &whole) == 1);
    char sql[160];
    snprintf(sql, sizeof(sql), "UPDATE closure SET data = zeroblob(%zu) WHERE id = %lld",
             sizeof(closure), (long long)id);
    st_sql(path, sql);
    if (others_under(s, &whole, closure, sizeof(closure)) != 0)
        fprintf(stderr, "damaged whole closure: handed back other bytes\n");
    CHECK(others_under(s, &whole, closure, sizeof(closure)) == 0);
    kcache_store_close(s);
    s = open_at(path, UINT64_MAX);
    if (closures_under(s, &whole) != 0)
        fprintf(stderr, "damaged whole closure: a new handle handed back other bytes\n");
    CHECK(closures_under(s, &whole) == 0);
    kcache_store_close(s);
}


/*
 * Rewrites every closure chunk of path in codec (kc_encode()), as a kcache
 * that wrote them so would have left them; how many.
 */
static int chunks_as(const char *path, int codec)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL, *u = NULL;
    kc_codec_ctx *ctx = NULL;
    REQUIRE(kc_codec_new(&ctx) == 0);
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, "SELECT id, codec, data, size FROM closure_chunk", -1, &q,
                               NULL) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE closure_chunk SET codec = ?2, data = ?3 WHERE id = ?1",
                               -1, &u, NULL) == SQLITE_OK);
    int n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        void *raw = NULL;
        size_t size = (size_t)sqlite3_column_int64(q, 3);
        REQUIRE(kc_decode(ctx, &raw, sqlite3_column_int(q, 1), sqlite3_column_blob(q, 2),
                          (size_t)sqlite3_column_bytes(q, 2), size) == 0);
        kc_buf enc = {0};
        int got = 0;
        REQUIRE(kc_encode(ctx, &enc, &got, codec, raw, size) == 0);
        sqlite3_bind_int64(u, 1, sqlite3_column_int64(q, 0));
        sqlite3_bind_int(u, 2, got);
        sqlite3_bind_blob(u, 3, enc.data, (int)enc.size, SQLITE_STATIC);
        REQUIRE(sqlite3_step(u) == SQLITE_DONE);
        sqlite3_reset(u);
        kc_buf_free(&enc);
        free(raw);
        n += got == codec;
    }
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    sqlite3_close(db);
    kc_codec_free(ctx);
    return n;
}

/*
 * Closure chunks are written as hashed LZ4 blocks (4, whatever
 * the store's compression), whose hash a read checks instead of the chunk's
 * digest: a byte changed in the block or in its hash is no closure. Chunks
 * an earlier kcache wrote as zstd frames are checked by their checksum: a
 * byte changed in one, or its checksum flag cleared, is no closure either.
 */
static void test_damaged_checked_chunk(void)
{
    static const int damage[][3] = {{KC_CODEC_LZ4C, 30, 0x10},
                                    {KC_CODEC_LZ4C, 4, 0x04},
                                    {KC_CODEC_ZSTD, 30, 0x10},
                                    {KC_CODEC_ZSTD, 4, 0x04}};
    for (size_t d = 0; d < sizeof(damage) / sizeof(damage[0]); d++) {
        char path[512], name[64];
        snprintf(name, sizeof(name), "checked_chunk_%zu.db", d);
        snprintf(path, sizeof(path), "%s", test_path(name));
        kcache_store *s = open_at(path, UINT64_MAX);
        static uint8_t data[4000];
        char closure[3000];
        size_t n = 0;
        while (n + 40 < sizeof(closure))
            n += (size_t)snprintf(closure + n, sizeof(closure) - n, "/usr/include/kc/dir%03zu/h.h;",
                                  n / 29);
        CHECK_RC(put_booked(s, 9, data, sizeof(data)), 0);
        kcache_key base = key_of(3009), key = key_of(9);
        CHECK_RC(kc_store_manifest_put(s, &base, &key, 1, closure, n), 0);
        CHECK(closures_under(s, &base) == 1);
        kcache_store_close(s);
        /* Compressed chunks are hashed LZ4 blocks; a tail too small to compress stays raw. */
        CHECK(st_path_int(path, "SELECT count(*) FROM closure_chunk WHERE codec NOT IN (0, 4)") ==
              0);
        if (damage[d][0] != KC_CODEC_LZ4C)
            CHECK(chunks_as(path, damage[d][0]) >= 1);
        s = open_at(path, UINT64_MAX);
        CHECK(closures_under(s, &base) == 1);
        kcache_store_close(s);
        CHECK(damage_chunks(path, "codec = ?1", damage[d][0], damage[d][1], damage[d][2]) >= 1);
        s = open_at(path, UINT64_MAX);
        if (closures_under(s, &base) != 0)
            fprintf(stderr, "damaged chunk (codec %d, byte %d): handed back other bytes\n",
                    damage[d][0], damage[d][1]);
        CHECK(closures_under(s, &base) == 0);
        kcache_store_close(s);
    }
}

int main(void)
{
    test_put_get();
    test_list_and_prune();
    test_find_ambiguous();
    test_books();
    test_closure_chunks();
    test_damaged_chunk();
    test_damaged_checked_chunk();
    return test_done();
}
