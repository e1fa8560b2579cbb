/*
 * The trust boundaries of the store's ingest paths (bundles and the shared
 * tier's entries, through kc_store_admit()): an arriving entry whose key is
 * held here with other bytes is a conflict that keeps the local entry, and
 * an entry whose kind or architecture is not what its key material says is
 * refused, and one altered so in the file after its put is never served.
 * Each case was seen failing before its fix: the newer entry replaced the
 * local one, both mismatches were merged, and the altered ones were hits.
 *
 * The remote tier's deadline and reply bound: tests/remote/test_hostile_server.py;
 * signed bundles and --resolve-conflicts, through kcache: tests/cli/test_bundle_trust.py.
 */
#include <kcache/bundle.h>

#include "store/storelib.h"
#include "util/codec.h"
#include "util/common.h"
#include "results.h"
#include "storetest.h"

/* One field of key material as compile/key.c writes it: tag, u32 length (LE), bytes. */
static void field(uint8_t *m, size_t *n, int tag, const char *text)
{
    uint32_t len = (uint32_t)strlen(text);
    m[(*n)++] = (uint8_t)tag;
    for (int i = 0; i < 4; i++)
        m[(*n)++] = (uint8_t)(len >> (8 * i));
    memcpy(m + *n, text, len);
    *n += len;
}

/* kcache's key material for a compile to `kind` for `arch`; n makes it unique. */
static size_t compile_material(uint8_t *m, const char *kind, const char *arch, unsigned n)
{
    char source[32];
    size_t size = 0;
    snprintf(source, sizeof(source), "source %u", n);
    field(m, &size, 1, "kcache-key-2");
    field(m, &size, 2, "cuda");
    field(m, &size, 3, kind);
    field(m, &size, 4, arch);
    field(m, &size, 10, source);
    return size;
}

/* An entry under material's key with the given kind, arch and bytes. */
static void entry_for(kcache_entry *e, const uint8_t *material, size_t material_size,
                      kcache_kind kind, const char *arch, const void *data, size_t size)
{
    *e = (kcache_entry)KCACHE_ENTRY_INIT;
    kc_digest(e->key.bytes, material, material_size);
    e->key_material = material;
    e->key_material_size = material_size;
    e->kind = kind;
    e->arch = arch;
    e->name = "k.cu";
    e->toolchain = "test";
    e->data = data;
    e->size = size;
    kc_digest(e->digest, data, size);
}

static int count_one(void *ud, const kcache_entry *e)
{
    (void)e;
    ++*(unsigned *)ud;
    return 0;
}

static unsigned entries_in(kcache_store *s)
{
    unsigned n = 0;
    kcache_filter f = KCACHE_FILTER_INIT;
    CHECK_RC(kcache_store_list(s, &f, count_one, &n), 0);
    return n;
}

struct log_lines {
    char text[8][1024];
    int n;
};

static void keep_log(void *ud, int level, const char *msg)
{
    struct log_lines *l = ud;
    if (level == KCACHE_LOG_WARNING && l->n < 8)
        snprintf(l->text[l->n++], sizeof(l->text[0]), "%s", msg);
}

static void hex_of(char out[65], const uint8_t d[32])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int bytes_are(kcache_store *s, const kcache_key *key, const char *want)
{
    kcache_entry *e = NULL;
    int ok = kcache_store_get(&e, s, key, KCACHE_GET_NO_TOUCH) == 0 &&
             e->size == strlen(want) && !memcmp(e->data, want, e->size);
    kcache_entry_free(e);
    return ok;
}

/* A bundle holding e alone. */
static void bundle_of(const char *path, const char *scratch_db, const kcache_entry *e)
{
    kcache_store *s = st_open(scratch_db, UINT64_MAX, NULL, NULL);
    REQUIRE(kcache_store_put(s, e) == 0);
    REQUIRE(kcache_bundle_export(NULL, s, path, NULL) == 0);
    kcache_store_close(s);
}

/*
 * A bundle holding e with the kind and arch of bad in its row, as a poisoner
 * writes it: made right (a store never hands out an entry whose row differs
 * from its key, so export would not carry it), then its row altered.
 */
static void bundle_altered(const char *path, const char *scratch_db, const kcache_entry *e,
                           const kcache_entry *bad)
{
    bundle_of(path, scratch_db, e);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE entry SET kind = ?1, arch = ?2", -1, &st, NULL) ==
            SQLITE_OK);
    sqlite3_bind_int(st, 1, (int)bad->kind);
    sqlite3_bind_text(st, 2, bad->arch, -1, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(db) == 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static unsigned cases;

/* Kind and architecture must be what the key material says, on both paths. */
static void kind_and_arch(void)
{
    static const struct {
        const char *key_kind, *key_arch;
        kcache_kind kind;
        const char *arch;
        const char *says;
    } bad[] = {
        {"cubin", "sm_90", KCACHE_KIND_CUBIN, "sm_80", "sm_80 under a key for sm_90"},
        {"cubin", "sm_90", KCACHE_KIND_PTX, "sm_90", "ptx under a key for a cubin"},
        {"ptx", "compute_90", KCACHE_KIND_CUBIN, "compute_90", "cubin under a key for a ptx"},
    };
    for (unsigned i = 0; i < KC_ARRAY_SIZE(bad); i++) {
        uint8_t m[256];
        size_t n = compile_material(m, bad[i].key_kind, bad[i].key_arch, 100 + i);
        kcache_entry e, right;
        kcache_kind key_kind;
        REQUIRE(kcache_kind_parse(&key_kind, bad[i].key_kind) == 0);
        entry_for(&e, m, n, bad[i].kind, bad[i].arch, "artifact", 8);
        entry_for(&right, m, n, key_kind, bad[i].key_arch, "artifact", 8);
        char name[64];
        snprintf(name, sizeof(name), "mismatch%u.kcache", i);
        const char *bundle = test_path(name);
        snprintf(name, sizeof(name), "mismatch%u-src.db", i);
        bundle_altered(bundle, test_path(name), &right, &e);
        snprintf(name, sizeof(name), "mismatch%u-live.db", i);
        kcache_store *s = st_open(test_path(name), UINT64_MAX, NULL, NULL);
        int rc = kcache_bundle_import(NULL, s, bundle, NULL);
        CHECK(rc != 0);
        CHECK(entries_in(s) == 0);
        const char *msg = kcache_store_errmsg(s);
        /* Refused as damage when read (store.c), before the gate would say what it is. */
        if (rc == 0 || !strstr(msg, "is damaged") || !strstr(msg, "nothing imported")) {
            fprintf(stderr, "import of %s: %d: %s\n", bad[i].says, rc, msg);
            test_failures++;
        }
        /* The shared tier's path: the same gate. */
        char what[512] = "";
        rc = kc_store_admit(s, &e, what, sizeof(what));
        if (rc != KCACHE_ECORRUPT || !strstr(what, bad[i].says)) {
            fprintf(stderr, "admit of %s: %d: %s\n", bad[i].says, rc, what);
            test_failures++;
        }
        CHECK(entries_in(s) == 0);
        kcache_store_close(s);
        cases += 2;
    }
    /* What the key says, it gets: the same entries with kind and arch right pass. */
    uint8_t m[256];
    size_t n = compile_material(m, "ptx", "compute_90", 200);
    kcache_entry e;
    entry_for(&e, m, n, KCACHE_KIND_PTX, "compute_90", "artifact", 8);
    kcache_store *s = st_open(test_path("match.db"), UINT64_MAX, NULL, NULL);
    char what[512] = "";
    CHECK_RC(kc_store_admit(s, &e, what, sizeof(what)), 0);
    CHECK(entries_in(s) == 1);
    kcache_store_close(s);
    cases++;
}

/*
 * The same held to on every read: an entry whose kind or arch column was
 * altered in the file after the put (a bit of `kind` flipped: its PTX handed
 * out as a CUBIN) is a miss, never served.
 */
static void altered_in_place(void)
{
    static const char *const sql[] = {"UPDATE entry SET kind = 1", /* cubin */
                                      "UPDATE entry SET arch = 'compute_80'"};
    for (unsigned i = 0; i < KC_ARRAY_SIZE(sql); i++) {
        uint8_t m[256];
        size_t n = compile_material(m, "ptx", "compute_90", 400 + i);
        kcache_entry e;
        entry_for(&e, m, n, KCACHE_KIND_PTX, "compute_90", "artifact", 8);
        char name[64];
        snprintf(name, sizeof(name), "altered%u.db", i);
        const char *path = test_path(name);
        kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
        REQUIRE(kcache_store_put(s, &e) == 0);
        kcache_store_close(s);
        sqlite3 *db = NULL;
        REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
        REQUIRE(sqlite3_exec(db, sql[i], NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);
        s = st_open(path, UINT64_MAX, NULL, NULL);
        kcache_entry *got = NULL;
        int rc = kcache_store_get(&got, s, &e.key, KCACHE_GET_DEFAULT);
        if (rc != KCACHE_ENOTFOUND) {
            fprintf(stderr, "%s after the put: get returned %d (%s for %s)\n", sql[i], rc,
                    got ? kcache_kind_name(got->kind) : "-", got ? got->arch : "-");
            test_failures++;
        }
        kcache_entry_free(got);
        kcache_store_close(s);
        cases++;
    }
}

/* A key here with other bytes: kept, counted, said with both digests; by bundle and by admit. */
static void conflicts(void)
{
    uint8_t m[256];
    size_t n = compile_material(m, "cubin", "sm_90", 300);
    kcache_entry good, other;
    entry_for(&good, m, n, KCACHE_KIND_CUBIN, "sm_90", "the good artifact", 17);
    entry_for(&other, m, n, KCACHE_KIND_CUBIN, "sm_90", "another kernel's", 16);
    char good_hex[65], other_hex[65];
    hex_of(good_hex, good.digest);
    hex_of(other_hex, other.digest);

    /* By bundle: the arriving entry is newer (made after), and still does not win. */
    struct log_lines log = {0};
    kcache_store *s = st_open(test_path("conflict-live.db"), UINT64_MAX, keep_log, &log);
    REQUIRE(kcache_store_put(s, &good) == 0);
    usleep(5000);
    bundle_of(test_path("other.kcache"), test_path("other-src.db"), &other);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_import(&r, s, test_path("other.kcache"), NULL), 0);
    CHECK(bytes_are(s, &good.key, "the good artifact"));
    CHECK(r.replaced == 0);
    uint64_t counted = 0;
    CHECK_RC(kcache_store_counter(&counted, s, "conflicts"), 0);
    CHECK(counted == 1);
    CHECK(log.n == 1 && strstr(log.text[0], good_hex) && strstr(log.text[0], other_hex));
    cases++;

    /* By the shared tier: the same, and the caller is told (1). */
    log.n = 0;
    char what[512] = "";
    int rc = kc_store_admit(s, &other, what, sizeof(what));
    CHECK(rc == 1);
    CHECK(bytes_are(s, &good.key, "the good artifact"));
    CHECK(strstr(what, good_hex) && strstr(what, other_hex));
    CHECK(log.n == 1 && strstr(log.text[0], "conflict"));
    CHECK_RC(kcache_store_counter(&counted, s, "conflicts"), 0);
    CHECK(counted == 2);
    cases++;

    /* The same bytes again are no conflict. */
    CHECK_RC(kc_store_admit(s, &good, what, sizeof(what)), 0);
    CHECK_RC(kcache_store_counter(&counted, s, "conflicts"), 0);
    CHECK(counted == 2);
    kcache_store_close(s);
    cases++;
}

int main(void)
{
    double t0 = st_now();
    kind_and_arch();
    altered_in_place();
    conflicts();
    printf("trust: %u cases, %d failed checks (%.1f s)\n", cases, test_failures, st_now() - t0);
    test_record("trust", "cases=%u\tfailed=%d", cases, test_failures);
    return test_done();
}
