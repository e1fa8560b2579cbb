/*
 * Entries keyed by a caller (a namespace and a key of the caller's): put, get,
 * delete, namespaces apart, stats per namespace, the LRU and the cap, export
 * and import, the import gate's view of them, and a file of the schema before
 * them migrated.
 */
#include <pthread.h>
#include <sched.h>

#include <kcache/bundle.h>
#include <kcache/store.h>

#include "store/ingest.h"
#include "db/db.h"
#include "storetest.h"

static uint8_t scratch[1 << 20];

static kcache_entry *get_ok(kcache_store *s, const char *ns, const char *key)
{
    kcache_entry *e = NULL;
    int rc = kcache_store_get_keyed(&e, s, ns, key, strlen(key), 0);
    return rc ? NULL : e;
}

static void test_put_get_delete(void)
{
    kcache_store *s = st_open(test_path("keyed.db"), UINT64_MAX, NULL, NULL);
    const char key[] = "ptx:compute_90:abc";
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", key, strlen(key), "hello", 5), 0);
    kcache_entry *e = get_ok(s, "cuda.core", key);
    REQUIRE(e);
    CHECK(e->size == 5 && memcmp(e->data, "hello", 5) == 0);
    CHECK(((const char *)e->data)[5] == '\0');
    CHECK(e->kind == KCACHE_KIND_DATA && strcmp(e->arch, "cuda.core") == 0);
    kcache_key want;
    CHECK_RC(kcache_key_caller(&want, "cuda.core", key, strlen(key)), 0);
    CHECK(memcmp(e->key.bytes, want.bytes, KCACHE_KEY_SIZE) == 0);
    kcache_entry_free(e);

    /* The same caller key in another namespace is another entry. */
    CHECK(get_ok(s, "triton", key) == NULL);
    CHECK_RC(kcache_store_put_keyed(s, "triton", key, strlen(key), "other", 5), 0);
    e = get_ok(s, "cuda.core", key);
    CHECK(e && e->size == 5 && memcmp(e->data, "hello", 5) == 0);
    kcache_entry_free(e);

    /* A put replaces; an empty value and an empty key are values and keys. */
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", key, strlen(key), "bye", 3), 0);
    e = get_ok(s, "cuda.core", key);
    CHECK(e && e->size == 3 && memcmp(e->data, "bye", 3) == 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", "", 0, "", 0), 0);
    e = NULL;
    CHECK_RC(kcache_store_get_keyed(&e, s, "cuda.core", NULL, 0, 0), 0);
    CHECK(e && e->size == 0);
    kcache_entry_free(e);

    /* Binary keys: the bytes are the key, NULs included. */
    const uint8_t bin1[4] = {0, 1, 2, 3}, bin2[4] = {0, 1, 2, 4};
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", bin1, 4, "b1", 2), 0);
    CHECK_RC(kcache_store_get_keyed(&e, s, "cuda.core", bin2, 4, 0), KCACHE_ENOTFOUND);
    CHECK_RC(kcache_store_get_keyed(&e, s, "cuda.core", bin1, 4, 0), 0);
    kcache_entry_free(e);

    CHECK_RC(kcache_store_delete_keyed(s, "cuda.core", key, strlen(key)), 0);
    CHECK_RC(kcache_store_delete_keyed(s, "cuda.core", key, strlen(key)), KCACHE_ENOTFOUND);
    CHECK(get_ok(s, "cuda.core", key) == NULL);
    e = get_ok(s, "triton", key);
    CHECK(e && memcmp(e->data, "other", 5) == 0);
    kcache_entry_free(e);

    /* Bad namespaces and keys are refused with a message, and nothing is written. */
    static const char *const bad[] = {"", "has space", "slash/ns", "a-name-longer-than-31-bytes-wxyz"};
    for (size_t i = 0; i < KC_ARRAY_SIZE(bad); i++) {
        CHECK_RC(kcache_store_put_keyed(s, bad[i], "k", 1, "v", 1), KCACHE_EINVAL);
        CHECK(strstr(kcache_store_errmsg(s), "namespace") != NULL);
    }
    CHECK_RC(kcache_store_put_keyed(s, NULL, "k", 1, "v", 1), KCACHE_EINVAL);
    CHECK_RC(kcache_store_put_keyed(s, "ok", NULL, 3, "v", 1), KCACHE_EINVAL);
    CHECK_RC(kcache_store_put_keyed(s, "ok", scratch, KCACHE_CALLER_KEY_MAX + 1, "v", 1),
             KCACHE_EINVAL);
    CHECK(strstr(kcache_store_errmsg(s), "at most") != NULL);
    CHECK_RC(kcache_key_caller(&want, "bad ns", "k", 1), KCACHE_EINVAL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->entries == 3); /* triton's, the empty key, bin1 */
    kcache_stats_free(st);
    kcache_store_close(s);
}

static void test_namespace_stats_and_clear(void)
{
    kcache_store *s = st_open(test_path("ns.db"), UINT64_MAX, NULL, NULL);
    char key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_RC(kcache_store_put_keyed(s, i < 7 ? "alpha" : "beta", key, strlen(key), scratch,
                                        1000),
                 0);
    }
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get_keyed(&e, s, "alpha", "k1", 2, 0), 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get_keyed(&e, s, "alpha", "k2", 2, 0), 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get_keyed(&e, s, "alpha", "nope", 4, 0), KCACHE_ENOTFOUND);
    CHECK_RC(kcache_store_get_keyed(&e, s, "alpha", "nope", 4, KCACHE_GET_NO_TOUCH),
             KCACHE_ENOTFOUND);
    kcache_namespace_stats ns = KCACHE_NAMESPACE_STATS_INIT;
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "alpha"), 0);
    CHECK(ns.entries == 7 && ns.raw_bytes == 7000 && ns.stored_bytes > 0);
    CHECK(ns.hits == 2 && ns.misses == 1);
    CHECK_RC(kcache_store_flush(s), 0); /* the same counts once written */
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "alpha"), 0);
    CHECK(ns.hits == 2 && ns.misses == 1);
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "beta"), 0);
    CHECK(ns.entries == 3 && ns.hits == 0 && ns.misses == 0);
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "gamma"), 0);
    CHECK(ns.entries == 0);

    /* A namespace is an (arch, kind) to list and stats. */
    kcache_filter f = KCACHE_FILTER_INIT;
    f.kind = KCACHE_KIND_DATA;
    f.arch = "beta";
    size_t n = 0;
    kcache_key *keys = NULL;
    CHECK_RC(kcache_store_list_keys(&keys, &n, s, &f), 0);
    CHECK(n == 3);
    kcache_keys_free(keys);

    uint64_t deleted = 0;
    CHECK_RC(kcache_store_clear_namespace(&deleted, s, "alpha"), 0);
    CHECK(deleted == 7);
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "alpha"), 0);
    CHECK(ns.entries == 0);
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "beta"), 0);
    CHECK(ns.entries == 3);
    kcache_store_close(s);
}

/* Under a cap, a caller's entries are evicted least recently read first, as any entry. */
static void test_lru_under_cap(void)
{
    const char *path = test_path("cap.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    enum { N = 40, SIZE = 64 << 10 };
    char key[16];
    for (unsigned i = 0; i < N; i++) {
        st_fill(scratch, SIZE, i); /* poorly compressible: a cap counts stored bytes */
        for (size_t j = 0; j < SIZE; j += 8)
            scratch[j] = (uint8_t)(j * 2654435761u >> (i % 7));
        snprintf(key, sizeof(key), "k%u", i);
        CHECK_RC(kcache_store_put_keyed(s, "lru", key, strlen(key), scratch, SIZE), 0);
    }
    /* Read the first five, so that they are the most recent (times are in milliseconds). */
    usleep(5000);
    for (unsigned i = 0; i < 5; i++) {
        kcache_entry *e = NULL;
        snprintf(key, sizeof(key), "k%u", i);
        CHECK_RC(kcache_store_get_keyed(&e, s, "lru", key, strlen(key), 0), 0);
        kcache_entry_free(e);
    }
    kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
    po.max_entries = 10;
    kcache_prune_result pr = KCACHE_PRUNE_RESULT_INIT;
    CHECK_RC(kcache_store_prune(&pr, s, &po), 0);
    CHECK(pr.evicted == N - 10);
    for (unsigned i = 0; i < N; i++) {
        kcache_entry *e = NULL;
        snprintf(key, sizeof(key), "k%u", i);
        int rc = kcache_store_get_keyed(&e, s, "lru", key, strlen(key), KCACHE_GET_NO_TOUCH);
        /* Kept: the five read, and the five last written. */
        CHECK(rc == ((i < 5 || i >= N - 5) ? 0 : KCACHE_ENOTFOUND));
        kcache_entry_free(e);
    }
    /* A namespace's own cap: the least recently read of it go first, no other entry. */
    for (unsigned i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "t%u", i);
        CHECK_RC(kcache_store_put_keyed(s, "trim", key, strlen(key), scratch, 1000), 0);
    }
    kcache_entry *e = NULL;
    usleep(5000); /* times of use are in milliseconds: the read must come after the puts */
    CHECK_RC(kcache_store_get_keyed(&e, s, "trim", "t0", 2, 0), 0);
    kcache_entry_free(e);
    uint64_t evicted = 0;
    CHECK_RC(kcache_store_trim_namespace(&evicted, s, "trim", 3500), 0);
    CHECK(evicted == 3);
    for (unsigned i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "t%u", i);
        int rc = kcache_store_get_keyed(&e, s, "trim", key, strlen(key), KCACHE_GET_NO_TOUCH);
        CHECK(rc == ((i == 0 || i >= 4) ? 0 : KCACHE_ENOTFOUND)); /* t0 was read: kept */
        kcache_entry_free(e);
    }
    kcache_namespace_stats ns = KCACHE_NAMESPACE_STATS_INIT;
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "lru"), 0);
    CHECK(ns.entries == 10);
    CHECK_RC(kcache_store_trim_namespace(&evicted, s, "trim", 3500), 0);
    CHECK(evicted == 0);
    kcache_store_close(s);
}

/*
 * Uses in one millisecond keep their order: a read right after two writes is
 * the most recent use, so a trim evicts the write before it, not the entry
 * just read. Over many rounds, most fall within one millisecond.
 */
static void test_lru_within_a_millisecond(void)
{
    kcache_store *s = st_open(test_path("keyed-ms.db"), UINT64_MAX, NULL, NULL);
    for (unsigned round = 0; round < 50; round++) {
        char a[32], b[32], c[32];
        snprintf(a, sizeof(a), "a%u", round);
        snprintf(b, sizeof(b), "b%u", round);
        snprintf(c, sizeof(c), "c%u", round);
        CHECK_RC(kcache_store_put_keyed(s, "ms", a, strlen(a), scratch, 100), 0);
        CHECK_RC(kcache_store_put_keyed(s, "ms", b, strlen(b), scratch, 100), 0);
        kcache_entry *e = get_ok(s, "ms", a);
        CHECK(e != NULL);
        kcache_entry_free(e);
        CHECK_RC(kcache_store_put_keyed(s, "ms", c, strlen(c), scratch, 100), 0);
        uint64_t evicted = 0;
        CHECK_RC(kcache_store_trim_namespace(&evicted, s, "ms", 250), 0);
        CHECK(evicted == 1);
        e = get_ok(s, "ms", a);
        CHECK(e != NULL); /* a was read after b was written */
        kcache_entry_free(e);
        kcache_entry *gone = NULL;
        CHECK_RC(kcache_store_get_keyed(&gone, s, "ms", b, strlen(b), KCACHE_GET_NO_TOUCH),
                 KCACHE_ENOTFOUND);
        uint64_t n = 0;
        CHECK_RC(kcache_store_clear_namespace(&n, s, "ms"), 0);
    }
    kcache_store_close(s);
}

static int put_forged(kcache_store *s, kcache_entry *e)
{
    char what[256] = "";
    return kc_ingest_check_entry(s, e, kc_now_ms(), what, sizeof(what));
}

/* The import gate: a caller's entry is data of the namespace its key was made in. */
static void test_gate(void)
{
    kcache_store *s = st_open(test_path("gate.db"), UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", "k", 1, "bytes", 5), 0);
    kcache_entry *got = NULL;
    CHECK_RC(kcache_store_get_keyed(&got, s, "cuda.core", "k", 1, 0), 0);
    REQUIRE(got);
    kcache_entry e = *got;
    CHECK_RC(put_forged(s, &e), 0); /* as stored: passes */
    e.arch = "triton";              /* moved to another namespace */
    CHECK_RC(put_forged(s, &e), KCACHE_ECORRUPT);
    e.arch = "cuda.core";
    e.kind = KCACHE_KIND_CUBIN; /* handed out as a kernel */
    e.arch = "sm_90";
    CHECK_RC(put_forged(s, &e), KCACHE_ECORRUPT);
    /* A compile's material claiming to be data. */
    char material[32];
    kcache_entry c = KCACHE_ENTRY_INIT;
    st_material_entry(&c, material, 7);
    c.kind = KCACHE_KIND_DATA;
    c.arch = "cuda.core";
    c.name = "";
    c.data = "bytes";
    c.size = 5;
    blake2b(c.digest, c.data, NULL, 32, c.size, 0);
    CHECK_RC(put_forged(s, &c), KCACHE_ECORRUPT);
    c.kind = KCACHE_KIND_CUBIN;
    c.arch = "sm_90";
    CHECK_RC(put_forged(s, &c), 0);
    kcache_entry_free(got);
    kcache_store_close(s);
}

/* Export a namespace, import it elsewhere: the entries come back under the same keys. */
static void test_bundle(void)
{
    kcache_store *a = st_open(test_path("a.db"), UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_store_put_keyed(a, "cuda.core", "k1", 2, "one", 3), 0);
    CHECK_RC(kcache_store_put_keyed(a, "cuda.core", "k2", 2, "two", 3), 0);
    CHECK_RC(kcache_store_put_keyed(a, "triton", "k1", 2, "tri", 3), 0);
    kcache_bundle_options bo = KCACHE_BUNDLE_OPTIONS_INIT;
    bo.kind = KCACHE_KIND_DATA;
    bo.arch = "cuda.core";
    kcache_bundle_result br = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&br, a, test_path("ns.kcb"), &bo), 0);
    CHECK(br.entries == 2);
    kcache_store_close(a);

    kcache_store *b = st_open(test_path("b.db"), UINT64_MAX, NULL, NULL);
    kcache_bundle_result ir = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_import(&ir, b, test_path("ns.kcb"), NULL), 0);
    CHECK(ir.added == 2);
    kcache_entry *e = get_ok(b, "cuda.core", "k2");
    CHECK(e && e->size == 3 && memcmp(e->data, "two", 3) == 0);
    kcache_entry_free(e);
    CHECK(get_ok(b, "triton", "k1") == NULL);
    kcache_store_close(b);
}

/* A file of the schema before caller-keyed entries is migrated with its entries. */
static void test_migration(void)
{
    const char *path = test_path("v4.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_store_close(s);
    /* Rebuild it at version 4, then put a compile's entry with that build's rules. */
    test_sh("rm -f '%s' '%s-wal' '%s-shm'", path, path, path);
    struct kc_db *raw = kc_calloc(1, sizeof(*raw));
    REQUIRE(raw);
    raw->path = kc_strdup(path);
    raw->busy_timeout_ms = 5000;
    REQUIRE(sqlite3_open(path, &raw->conn) == SQLITE_OK);
    REQUIRE(kc_db_exec(raw, "PRAGMA journal_mode = WAL", "") == 0);
    CHECK_RC(kc_db_migrate_to(raw, 4), 0);
    CHECK(st_sql_int(raw->conn, "SELECT count(*) FROM sqlite_schema WHERE sql LIKE "
                              "'%BETWEEN 1 AND 3%'") == 1);
    /* One compile's entry, stored raw, as version 4 writes it. */
    char material[32];
    kcache_key old = st_material_key(material, 3);
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, "cubin", 5);
    sqlite3_stmt *q = NULL;
    REQUIRE(sqlite3_prepare_v2(raw->conn,
                               "INSERT INTO entry (id, key, kind, arch, name, raw_size, stored_size,"
                               " codec, digest, created_at, accessed_at) VALUES (1, ?1, 1, 'sm_90',"
                               " 'old.cu', 5, 5, 0, ?2, 1, 1)", -1, &q, NULL) == SQLITE_OK);
    sqlite3_bind_blob(q, 1, old.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    REQUIRE(sqlite3_prepare_v2(raw->conn, "INSERT INTO artifact VALUES (1, ?1, 'cubin')", -1, &q,
                               NULL) == SQLITE_OK);
    sqlite3_bind_blob(q, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    CHECK(kc_db_exec(raw, "INSERT INTO entry_info (id, log) VALUES (1, 'old log');"
                          "UPDATE totals SET entries = 1, raw_bytes = 5, stored_bytes = 5", "") == 0);
    sqlite3_close(raw->conn);
    free(raw->path);
    free(raw);
    /* Opened by this build: migrated; old entries kept, data accepted. */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &old, 0), 0);
    CHECK(e && e->size == 5 && memcmp(e->data, "cubin", 5) == 0 && strcmp(e->log, "old log") == 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_put_keyed(s, "cuda.core", "k", 1, "v", 1), 0);
    CHECK_RC(kcache_store_delete(s, &old), 0);
    CHECK_RC(kcache_store_get(&e, s, &old, 0), KCACHE_ENOTFOUND);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->entries == 1); /* the triggers were rebuilt with the table */
    kcache_stats_free(st);
    kcache_store_close(s);
    CHECK(st_integrity_ok(path));
}

/*
 * Two threads failing on one store, each for its own reason: each reads its
 * own message (the store's message is per thread), never the other's.
 */
struct errmsg_thread {
    kcache_store *s;
    int bad_namespace;
    int wrong;
};

static void *errmsg_worker(void *ud)
{
    struct errmsg_thread *t = ud;
    for (int i = 0; i < 2000; i++) {
        kcache_entry *e = NULL;
        int rc = t->bad_namespace ? kcache_store_put_keyed(t->s, "bad ns", "k", 1, "v", 1)
                                  : kcache_store_get_keyed(&e, t->s, "ok", "missing", 7, 0);
        sched_yield(); /* as a thread may be preempted between a call and reading its message */
        const char *msg = kcache_store_errmsg(t->s);
        int mine = t->bad_namespace ? rc == KCACHE_EINVAL && strstr(msg, "namespace") != NULL
                                    : rc == KCACHE_ENOTFOUND && strstr(msg, "no entry") != NULL;
        t->wrong += !mine;
    }
    return NULL;
}

static void test_errmsg_per_thread(void)
{
    kcache_store *s = st_open(test_path("threads.db"), UINT64_MAX, NULL, NULL);
    struct errmsg_thread t[2] = {{s, 1, 0}, {s, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&th[i], NULL, errmsg_worker, &t[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(t[0].wrong == 0 && t[1].wrong == 0);
    if (t[0].wrong || t[1].wrong)
        fprintf(stderr, "messages of the other thread: %d and %d of 2000\n", t[0].wrong,
                t[1].wrong);
    kcache_store_close(s);
}

/* A list callback calls the store: reads the entry, then deletes it. */
static int read_and_delete(void *ud, const kcache_entry *e)
{
    kcache_store *s = ud;
    kcache_entry *got = NULL;
    int rc = kcache_store_get(&got, s, &e->key, 0);
    if (!rc)
        rc = got->size == e->size ? kcache_store_delete(s, &e->key) : -100;
    kcache_entry_free(got);
    return rc;
}

static void test_list_callback_calls_store(void)
{
    kcache_store *s = st_open(test_path("list.db"), UINT64_MAX, NULL, NULL);
    char key[16];
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_RC(kcache_store_put_keyed(s, "walk", key, strlen(key), scratch, 100 + i), 0);
    }
    CHECK_RC(kcache_store_list(s, NULL, read_and_delete, s), 0);
    kcache_namespace_stats ns = KCACHE_NAMESPACE_STATS_INIT;
    CHECK_RC(kcache_store_namespace_stats(&ns, s, "walk"), 0);
    CHECK(ns.entries == 0);
    kcache_store_close(s);
}

/*
 * The stored-bytes check every hit runs: XXH3-128, marked in the row; a row
 * with a BLAKE2b stored digest (written before) is still checked as such, and
 * damage is found either way.
 */
static void test_stored_digest_kinds(void)
{
    const char *path = test_path("digest.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    st_fill(scratch, 70000, 3);
    CHECK_RC(kcache_store_put_keyed(s, "d", "fast", 4, scratch, 70000), 0);
    CHECK_RC(kcache_store_put_keyed(s, "d", "old", 3, scratch, 70000), 0);
    CHECK_RC(kcache_store_put_keyed(s, "d", "raw", 3, "tiny", 4), 0); /* stored as is */
    kcache_store_close(s);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    /* Every row written now carries the mark. */
    CHECK(st_sql_int(db, "SELECT count(*) FROM artifact WHERE substr(stored_digest, 17) ="
                         " x'6b63616368652d787868332d31323800'") == 3); /* "kcache-xxh3-128" */
    /* One row as an older kcache wrote it: BLAKE2b-256 of the stored bytes. */
    kcache_key old;
    REQUIRE(kcache_key_caller(&old, "d", "old", 3) == 0);
    sqlite3_stmt *q = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "SELECT a.data FROM artifact a JOIN entry e ON e.id = a.id"
                                   " WHERE e.key = ?1", -1, &q, NULL) == SQLITE_OK);
    sqlite3_bind_blob(q, 1, old.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(q) == SQLITE_ROW);
    uint8_t b2[KC_DIGEST_SIZE];
    kc_digest(b2, sqlite3_column_blob(q, 0), (size_t)sqlite3_column_bytes(q, 0));
    sqlite3_finalize(q);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE artifact SET stored_digest = ?2 WHERE id ="
                                   " (SELECT id FROM entry WHERE key = ?1)", -1, &q, NULL) ==
            SQLITE_OK);
    sqlite3_bind_blob(q, 1, old.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, b2, KC_DIGEST_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    /* Damage in the marked row's bytes. */
    kcache_key fast;
    REQUIRE(kcache_key_caller(&fast, "d", "fast", 4) == 0);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE artifact SET data = CAST(substr(data, 1, 100) ||"
                                   " x'5a' || substr(data, 102) AS BLOB) WHERE id ="
                                   " (SELECT id FROM entry WHERE key = ?1)", -1, &q, NULL) ==
            SQLITE_OK);
    sqlite3_bind_blob(q, 1, fast.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get_keyed(&e, s, "d", "old", 3, 0), 0);
    CHECK(e && e->size == 70000 && memcmp(e->data, scratch, 70000) == 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get_keyed(&e, s, "d", "raw", 3, 0), 0);
    CHECK(e && e->size == 4 && memcmp(e->data, "tiny", 4) == 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get_keyed(&e, s, "d", "fast", 4, 0), KCACHE_ENOTFOUND);
    CHECK(strstr(kcache_store_errmsg(s), "damaged") != NULL);
    kcache_store_close(s);
}

int main(void)
{
    test_put_get_delete();
    test_namespace_stats_and_clear();
    test_lru_under_cap();
    test_lru_within_a_millisecond();
    test_gate();
    test_bundle();
    test_migration();
    test_errmsg_per_thread();
    test_list_callback_calls_store();
    test_stored_digest_kinds();
    return test_done();
}
