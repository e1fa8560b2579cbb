/*
 * Helpers shared by the store's tests: entries whose bytes follow from
 * their key (so that any entry read back can be checked without remembering
 * what was put), opening, the file's books, and SQLite's own checks.
 */
#ifndef KC_STORETEST_H
#define KC_STORETEST_H

#include <blake2.h>
#include <kcache/bundle.h>
#include <kcache/store.h>
#include <sqlite3.h>
#include <stdint.h>
#include <time.h>

#include "testutil.h"

static inline kcache_key st_key(unsigned n)
{
    kcache_key k;
    uint64_t x = n * 0x9e3779b97f4a7c15u + 0x632be59bd9b4e019u;
    for (int i = 0; i < KCACHE_KEY_SIZE; i++) {
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9u;
        k.bytes[i] = (uint8_t)(x >> 56);
    }
    /* The number itself, readable back from any key. */
    k.bytes[0] = (uint8_t)(n >> 24);
    k.bytes[1] = (uint8_t)(n >> 16);
    k.bytes[2] = (uint8_t)(n >> 8);
    k.bytes[3] = (uint8_t)n;
    return k;
}

/*
 * Key material for entry n, and the key it gives: BLAKE2b-256 of it, as
 * kcache's own keys are. What goes through a bundle needs it (an import
 * recomputes every key).
 */
static inline kcache_key st_material_key(char material[32], unsigned n)
{
    kcache_key k;
    snprintf(material, 32, "kcache-test entry %u", n);
    blake2b(k.bytes, material, NULL, KCACHE_KEY_SIZE, strlen(material), 0);
    return k;
}

/* Entry n keyed by its key material, which it carries (so that a bundle or a
 * remote can check it): material must outlive the entry. */
static inline void st_material_entry(kcache_entry *e, char material[32], unsigned n)
{
    e->key = st_material_key(material, n);
    e->key_material = material;
    e->key_material_size = strlen(material);
}

static inline unsigned st_key_number(const kcache_key *k)
{
    return (unsigned)k->bytes[0] << 24 | (unsigned)k->bytes[1] << 16 |
           (unsigned)k->bytes[2] << 8 | k->bytes[3];
}

/* Size of entry n's artifact: from tiny (stored raw) to size_max. */
static inline size_t st_size(unsigned n, size_t size_max)
{
    if (n % 17 == 0)
        return n % 40;
    return 1000 + (size_t)((n * 2654435761u) % (size_max - 1000));
}

/*
 * Entry n's bytes: partly compressible like a CUBIN, partly noise so that
 * the store holds a real number of pages. Every byte depends on the key.
 */
static inline void st_fill(uint8_t *p, size_t size, unsigned n)
{
    uint64_t x = n * 0xd1b54a32d192ed03u + 1;
    for (size_t i = 0; i < size; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        p[i] = (i % 64 < 40) ? (uint8_t)((i * 7 + n) % 13) : (uint8_t)(x >> 56);
    }
}

/* Runs sql on the SQLite file at path, as another program would; exits on an error. */
static inline void st_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, err);
        exit(1);
    }
    sqlite3_close(db);
}

/* Entry n's kind, arch and bytes, as st_entry_ok() checks them; the rest is the caller's. */
static inline void st_entry_of(kcache_entry *e, unsigned n, size_t size_max, uint8_t *scratch)
{
    e->kind = (kcache_kind)(1 + n % 3);
    e->arch = n % 2 ? "sm_90" : "sm_80";
    e->size = st_size(n, size_max);
    st_fill(scratch, e->size, n);
    e->data = scratch;
}

/* Returns 1 if e holds exactly what entry n was put with. */
static inline int st_entry_ok(const kcache_entry *e, unsigned n, size_t size_max,
                              uint8_t *scratch)
{
    size_t size = st_size(n, size_max);
    if (!e || e->size != size || (size && !e->data))
        return 0;
    st_fill(scratch, size, n);
    if (size && memcmp(e->data, scratch, size) != 0)
        return 0;
    return e->kind == (kcache_kind)(1 + n % 3) && e->arch &&
           strcmp(e->arch, n % 2 ? "sm_90" : "sm_80") == 0;
}

static inline int st_put(kcache_store *s, unsigned n, size_t size_max, uint8_t *scratch)
{
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = st_key(n);
    st_entry_of(&e, n, size_max, scratch);
    e.name = "stress.cu";
    e.toolchain = "test";
    e.compile_ns = 1000000;
    return kcache_store_put(s, &e);
}

static inline int st_count_one(void *ud, const kcache_entry *e)
{
    (void)e;
    ++*(unsigned *)ud;
    return 0;
}

/* How many entries the store lists. */
static inline unsigned st_count_entries(kcache_store *s)
{
    unsigned n = 0;
    kcache_filter f = KCACHE_FILTER_INIT;
    CHECK_RC(kcache_store_list(s, &f, st_count_one, &n), 0);
    return n;
}

/* What a store logged: warnings, files set aside (NAME.corrupt-*), the last message. */
struct st_log {
    int warnings;
    int set_aside;
    char last[512];
};

static inline void st_log_fn(void *ud, int level, const char *msg)
{
    struct st_log *l = ud;
    if (level <= KCACHE_LOG_WARNING)
        l->warnings++;
    if (strstr(msg, ".corrupt-"))
        l->set_aside++;
    snprintf(l->last, sizeof(l->last), "%s", msg);
}

/* Opens path without a cap, its log kept in l; returns kcache_store_open()'s code. */
static inline int st_open_logged(kcache_store **s, const char *path, struct st_log *l, char *err,
                                 size_t err_size)
{
    memset(l, 0, sizeof(*l));
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.log = st_log_fn;
    o.log_userdata = l;
    return kcache_store_open(s, &o, err, err_size);
}

/*
 * st_open_logged(), a failure counted and said on stderr with what (the
 * case) and the store's message: the store, or NULL.
 */
static inline kcache_store *st_open_counted(const char *path, struct st_log *l, const char *what)
{
    kcache_store *s = NULL;
    char err[512];
    int rc = st_open_logged(&s, path, l, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "%s: open %s: %d %s\n", what, path, rc, err);
        test_failures++;
    }
    return s;
}

/* Opens with the options given, or fails the test saying why. */
static inline kcache_store *st_open_with(const kcache_store_options *o)
{
    kcache_store *s = NULL;
    char err[512];
    int rc = kcache_store_open(&s, o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "open %s (compression %s): %d %s\n", o->path,
                o->compression ? o->compression : "(unset)", rc, err);
    REQUIRE(rc == 0 && s);
    return s;
}

static inline kcache_store *st_open(const char *path, uint64_t max_size, kcache_log_fn log,
                                    void *ud)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = max_size;
    o.log = log;
    o.log_userdata = ud;
    return st_open_with(&o);
}

/* Runs one query returning one integer on a plain SQLite connection. */
static inline int64_t st_sql_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

/*
 * The books of the file at path, read through a connection of its own: the
 * totals agree with the rows, every entry's stored size is its artifact's,
 * and no row is left that nothing refers to. Each query that should give 0
 * and does not is a failed check, said with what the test had just done
 * (after: "a prune").
 */
static inline void st_check_books(const char *path, const char *after)
{
    static const char *const zero[] = {
        "SELECT (SELECT entries FROM totals) - (SELECT count(*) FROM entry)",
        "SELECT (SELECT raw_bytes FROM totals) - (SELECT coalesce(sum(raw_size), 0) FROM entry)",
        "SELECT (SELECT stored_bytes FROM totals) -"
        " (SELECT coalesce(sum(stored_size), 0) FROM entry)",
        "SELECT (SELECT coalesce(sum(stored_size), 0) FROM entry) -"
        " (SELECT coalesce(sum(length(data)), 0) FROM artifact)",
        "SELECT count(*) FROM artifact WHERE id NOT IN (SELECT id FROM entry)",
        "SELECT count(*) FROM entry_info WHERE id NOT IN (SELECT id FROM entry)",
        "SELECT count(*) FROM entry_input WHERE entry_id NOT IN (SELECT id FROM entry)",
        "SELECT count(*) FROM input WHERE id NOT IN (SELECT input_id FROM entry_input)"
        " AND id NOT IN (SELECT input_id FROM input_list_item)",
        "SELECT count(*) FROM header_list WHERE id NOT IN"
        " (SELECT headers_id FROM entry_info WHERE headers_id NOT NULL)",
        "SELECT count(*) FROM input_list WHERE id NOT IN"
        " (SELECT inputs_id FROM entry_info WHERE inputs_id NOT NULL)",
        "SELECT count(*) FROM input_list_item WHERE list_id NOT IN (SELECT id FROM input_list)",
        "SELECT count(*) FROM input_list_item WHERE input_id NOT IN (SELECT id FROM input)",
        "SELECT count(*) FROM entry_info WHERE headers_id NOT NULL AND headers_id NOT IN"
        " (SELECT id FROM header_list)",
        "SELECT count(*) FROM entry_info WHERE inputs_id NOT NULL AND inputs_id NOT IN"
        " (SELECT id FROM input_list)",
        "SELECT count(*) FROM manifest WHERE key NOT IN (SELECT key FROM entry)",
        "SELECT count(*) FROM closure WHERE id NOT IN (SELECT closure_id FROM manifest)",
        "SELECT count(*) FROM entry_input WHERE input_id NOT IN (SELECT id FROM input)",
        "SELECT count(*) FROM manifest WHERE closure_id NOT IN (SELECT id FROM closure)",
        "SELECT count(*) FROM closure_part WHERE closure_id NOT IN (SELECT id FROM closure)",
        "SELECT count(*) FROM closure_part WHERE chunk_id NOT IN (SELECT id FROM closure_chunk)",
        "SELECT count(*) FROM closure_chunk WHERE id NOT IN (SELECT chunk_id FROM closure_part)",
    };
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
        int64_t v = st_sql_int(db, zero[i]);
        if (v != 0)
            fprintf(stderr, "after %s: %s gives %lld\n", after, zero[i], (long long)v);
        CHECK(v == 0);
    }
    sqlite3_close(db);
}

/* st_sql_int() on the file at path, through a read-only connection of its own. */
static inline int64_t st_path_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t n = st_sql_int(db, sql);
    sqlite3_close(db);
    return n;
}

/* SQLite's integrity_check on the file, through a connection of its own. */
static inline int st_integrity_ok(const char *path)
{
    sqlite3 *db = NULL;
    int ok = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW) {
            const char *r = (const char *)sqlite3_column_text(st, 0);
            ok = r && strcmp(r, "ok") == 0;
            if (!ok)
                fprintf(stderr, "integrity_check %s: %s\n", path, r ? r : "(null)");
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return ok;
}

/*
 * Imports the bundle at path into s with the default options: the entries it
 * added. A failure fails the test, said on stderr with the store's message.
 */
static inline uint64_t st_import(kcache_store *s, const char *path)
{
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    int rc = kcache_bundle_import(&r, s, path, NULL);
    CHECK_RC(rc, 0);
    if (rc)
        fprintf(stderr, "  import: %s\n", kcache_store_errmsg(s));
    return r.added;
}

static inline uint64_t st_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Database plus WAL on disk. */
static inline uint64_t st_disk(const char *path)
{
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    return st_file_size(path) + st_file_size(wal);
}

static inline double st_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * A kernel of a header tree as kcache stores it: key material in kcache's
 * format with ST_HEADERS header records (spelling, "file", the digest in
 * hex), and the inputs `kcache compile` keeps (the source, then every
 * header). Kernel n has its own source; tree picks the headers, so kernels
 * of one tree share their header list whole.
 */
#define ST_HEADERS 300
struct st_kernel {
    kcache_entry e;
    uint8_t *material;
    size_t material_size;
    kcache_input in[ST_HEADERS + 1];
    char names[ST_HEADERS][40];
    char bodies[ST_HEADERS][48];
    char source[64], artifact[64];
};

static inline void st_tlv(struct st_kernel *k, int tag, const void *data, size_t n)
{
    uint8_t *grown = realloc(k->material, k->material_size + 5 + n);
    REQUIRE(grown);
    k->material = grown;
    uint8_t *p = grown + k->material_size;
    p[0] = (uint8_t)tag;
    for (int i = 0; i < 4; i++)
        p[1 + i] = (uint8_t)(n >> (8 * i));
    memcpy(p + 5, data, n);
    k->material_size += 5 + n;
}

static inline void st_kernel_make(struct st_kernel *k, unsigned n, unsigned tree)
{
    memset(k, 0, sizeof(*k));
    snprintf(k->source, sizeof(k->source), "__global__ void k%u() {}\n", n);
    snprintf(k->artifact, sizeof(k->artifact), "the cubin of kernel %u", n);
    uint8_t d[32];
    st_tlv(k, 1, "kcache-key-5", 12);
    st_tlv(k, 2, "cuda", 4);
    st_tlv(k, 3, "cubin", 5);
    st_tlv(k, 4, "sm_90", 5);
    st_tlv(k, 5, "nvrtc-test", 10);
    st_tlv(k, 9, "kern.cu", 7);
    blake2b(d, k->source, NULL, 32, strlen(k->source), 0);
    st_tlv(k, 10, d, 32);
    k->in[0] = (kcache_input){KCACHE_INPUT_SOURCE, "kern.cu", k->source, strlen(k->source)};
    for (unsigned i = 0; i < ST_HEADERS; i++) {
        snprintf(k->names[i], sizeof(k->names[i]), "tree%u/include/header_%u.cuh", tree, i);
        snprintf(k->bodies[i], sizeof(k->bodies[i]), "// tree %u, header %u\n", tree, i);
        char field[128];
        size_t len = (size_t)snprintf(field, sizeof(field), "%s%cfile%c", k->names[i], 0, 0);
        blake2b(d, k->bodies[i], NULL, 32, strlen(k->bodies[i]), 0);
        for (int j = 0; j < 32; j++)
            len += (size_t)snprintf(field + len, sizeof(field) - len, "%02x", d[j]);
        st_tlv(k, 11, field, len);
        k->in[1 + i] =
            (kcache_input){KCACHE_INPUT_HEADER, k->names[i], k->bodies[i], strlen(k->bodies[i])};
    }
    st_tlv(k, 12, "extra", 5);
    kcache_entry e = KCACHE_ENTRY_INIT;
    blake2b(e.key.bytes, k->material, NULL, 32, k->material_size, 0);
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = "sm_90";
    e.name = "kern.cu";
    e.toolchain = "test";
    e.data = k->artifact;
    e.size = strlen(k->artifact);
    e.key_material = k->material;
    e.key_material_size = k->material_size;
    e.inputs = k->in;
    e.n_inputs = ST_HEADERS + 1;
    k->e = e;
}

static inline void st_kernel_free(struct st_kernel *k)
{
    free(k->material);
    k->material = NULL;
}

/* Whether e, read back with its inputs, is kernel k whole: material, inputs in order, bytes. */
static inline int st_kernel_ok(const kcache_entry *e, const struct st_kernel *k)
{
    if (!e || e->size != k->e.size || memcmp(e->data, k->e.data, e->size) != 0 ||
        e->key_material_size != k->material_size ||
        memcmp(e->key_material, k->material, k->material_size) != 0 || e->n_inputs != k->e.n_inputs)
        return 0;
    for (size_t i = 0; i < e->n_inputs; i++)
        if (e->inputs[i].role != k->in[i].role || strcmp(e->inputs[i].name, k->in[i].name) ||
            e->inputs[i].size != k->in[i].size ||
            memcmp(e->inputs[i].data, k->in[i].data, e->inputs[i].size) != 0)
            return 0;
    return 1;
}

#endif
