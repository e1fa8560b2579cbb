/*
 * The store calls no callback under its lock: a caller's progress, log or
 * damage callback may call the store it was given to, on the same handle,
 * without deadlocking, and may change the store meanwhile (delete entries)
 * without the operation losing or damaging anything. Each case runs in a
 * child given a few seconds (test_within()), so a deadlock fails instead of
 * hanging the suite.
 */
#include <kcache/bundle.h>
#include <kcache/verify.h>

#include "storetest.h"

#define ENTRIES 12
#define ART_SIZE 20000
#define DEADLINE_S 20

static uint8_t scratch[ART_SIZE + 1];

static kcache_store *open_with(const char *path, const char *compression, kcache_log_fn log,
                               void *log_userdata)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.compression = compression;
    o.log = log;
    o.log_userdata = log_userdata;
    return st_open_with(&o);
}

/* Entry n, keyed from its key material (it can go through a bundle). */
static int put_entry(kcache_store *s, unsigned n)
{
    kcache_entry e = KCACHE_ENTRY_INIT;
    char material[32];
    st_material_entry(&e, material, n);
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = "sm_90";
    e.name = "k.cu";
    e.size = ART_SIZE - n;
    st_fill(scratch, e.size, n);
    e.data = scratch;
    return kcache_store_put(s, &e);
}

static int entry_ok(kcache_store *s, unsigned n)
{
    char material[32];
    kcache_key key = st_material_key(material, n);
    kcache_entry *e = NULL;
    int rc = kcache_store_get(&e, s, &key, KCACHE_GET_NO_TOUCH);
    int ok = rc == 0 && e->size == ART_SIZE - n;
    if (ok) {
        st_fill(scratch, e->size, n);
        ok = memcmp(e->data, scratch, e->size) == 0;
    }
    kcache_entry_free(e);
    return ok;
}

/* A store of ENTRIES entries written with `compression`. */
static const char *filled(const char *name, const char *compression)
{
    const char *path = test_path(name);
    kcache_store *s = open_with(path, compression, NULL, NULL);
    for (unsigned n = 0; n < ENTRIES; n++)
        CHECK_RC(put_entry(s, n), 0);
    kcache_store_close(s);
    return path;
}

/* What a progress callback does to the store it was handed. */
struct on_progress {
    kcache_store *store;
    unsigned calls;
    int stats_rc, get_rc;
    int delete_last; /* on the first call, delete the last entry (not re-encoded yet) */
};

static void call_back(void *userdata, const char *phase, uint64_t done, uint64_t total)
{
    struct on_progress *p = userdata;
    (void)phase;
    CHECK(done <= total);
    kcache_stats *st = NULL;
    int rc = kcache_store_stats(&st, p->store);
    if (rc)
        p->stats_rc = rc;
    kcache_stats_free(st);
    char material[32];
    kcache_key key = st_material_key(material, 0);
    kcache_entry *e = NULL;
    rc = kcache_store_get(&e, p->store, &key, KCACHE_GET_NO_TOUCH);
    if (rc)
        p->get_rc = rc;
    kcache_entry_free(e);
    if (p->delete_last && p->calls == 0) {
        key = st_material_key(material, ENTRIES - 1);
        CHECK_RC(kcache_store_delete(p->store, &key), 0);
    }
    p->calls++;
}

/*
 * Recompress's progress comes between batches, with no lock held: the
 * callback reads the store and deletes an entry the run has not reached;
 * the run re-encodes the others and every one left reads back whole.
 */
static void recompress_calls_back(void *arg)
{
    (void)arg;
    const char *path = filled("recompress.db", "none");
    kcache_store *s = open_with(path, "zstd", NULL, NULL);
    struct on_progress p = {s, 0, 0, 0, 1};
    kcache_recompress_options o = KCACHE_RECOMPRESS_OPTIONS_INIT;
    o.batch = 3;
    o.progress = call_back;
    o.userdata = &p;
    kcache_recompress_result r = KCACHE_RECOMPRESS_RESULT_INIT;
    CHECK_RC(kcache_store_recompress(&r, s, &o), 0);
    CHECK(p.calls >= ENTRIES / 3 && p.stats_rc == 0 && p.get_rc == 0);
    CHECK(r.to_recompress == ENTRIES && r.recompressed == ENTRIES - 1);
    for (unsigned n = 0; n + 1 < ENTRIES; n++)
        CHECK(entry_ok(s, n));
    CHECK(!entry_ok(s, ENTRIES - 1));
    kcache_verify_result v = KCACHE_VERIFY_RESULT_INIT;
    CHECK_RC(kcache_store_verify(&v, s, NULL, NULL, NULL), 0);
    CHECK(v.integrity_ok && v.entries == ENTRIES - 1 && v.damaged == 0);
    /* A second run finds nothing left to do. */
    r = (kcache_recompress_result)KCACHE_RECOMPRESS_RESULT_INIT;
    CHECK_RC(kcache_store_recompress(&r, s, NULL), 0);
    CHECK(r.to_recompress == 0);
    kcache_store_close(s);
}

/* Import's progress, whether it merges or only checks. */
static void import_calls_back(void *arg)
{
    (void)arg;
    const char *bundle = test_path("callbacks.kcache");
    kcache_store *src = open_with(filled("export.db", "zstd"), "zstd", NULL, NULL);
    struct on_progress p = {src, 0, 0, 0, 0};
    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    o.progress = call_back;
    o.progress_userdata = &p;
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, src, bundle, &o), 0);
    CHECK(r.entries == ENTRIES && p.calls > 0 && p.stats_rc == 0 && p.get_rc == 0);
    kcache_store_close(src);

    kcache_store *dst = open_with(test_path("import.db"), "zstd", NULL, NULL);
    CHECK_RC(put_entry(dst, 0), 0); /* the callback's get finds it */
    for (int dry = 1; dry >= 0; dry--) {
        p = (struct on_progress){dst, 0, 0, 0, 0};
        o.dry_run = dry;
        r = (kcache_bundle_result)KCACHE_BUNDLE_RESULT_INIT;
        CHECK_RC(kcache_bundle_import(&r, dst, bundle, &o), 0);
        CHECK(r.entries == ENTRIES && p.calls > 0 && p.stats_rc == 0 && p.get_rc == 0);
    }
    for (unsigned n = 0; n < ENTRIES; n++)
        CHECK(entry_ok(dst, n));
    kcache_store_close(dst);
}

/* Verify's progress and its damage callback. */
static void verify_calls_back(void *arg)
{
    (void)arg;
    kcache_store *s = open_with(filled("verify.db", "zstd"), "zstd", NULL, NULL);
    struct on_progress p = {s, 0, 0, 0, 0};
    kcache_verify_result v = KCACHE_VERIFY_RESULT_INIT;
    CHECK_RC(kcache_store_verify(&v, s, call_back, NULL, &p), 0);
    CHECK(v.entries == ENTRIES && p.calls > 0 && p.stats_rc == 0 && p.get_rc == 0);
    kcache_store_close(s);
}

/* What the log callback does: the store, read while the message is said. */
struct on_log {
    kcache_store *store;
    unsigned messages;
    int stats_rc;
};

static void log_calls_back(void *userdata, int level, const char *message)
{
    struct on_log *l = userdata;
    (void)level;
    CHECK(test_one_line(message));
    l->messages++;
    if (!l->store)
        return; /* said while opening: there is no handle yet */
    kcache_stats *st = NULL;
    int rc = kcache_store_stats(&st, l->store);
    if (rc)
        l->stats_rc = rc;
    kcache_stats_free(st);
}

/* A get that finds a damaged entry says so through the log, with no lock held. */
static void log_from_get(void *arg)
{
    (void)arg;
    const char *path = filled("log.db", "zstd");
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "UPDATE artifact SET data = x'00' || substr(data, 2)"
                           " WHERE id = (SELECT min(id) FROM artifact)", NULL, NULL, NULL) ==
          SQLITE_OK);
    sqlite3_close(db);
    struct on_log l = {NULL, 0, 0};
    kcache_store *s = open_with(path, "zstd", log_calls_back, &l);
    l.store = s;
    unsigned before = l.messages;
    CHECK(!entry_ok(s, 0)); /* the damaged one: deleted, and said */
    CHECK(l.messages == before + 1 && l.stats_rc == 0);
    for (unsigned n = 1; n < ENTRIES; n++)
        CHECK(entry_ok(s, n));
    kcache_store_close(s);
}

int main(void)
{
    unsetenv("KCACHE_COMPRESSION");
    test_within("recompress's progress calls the store", DEADLINE_S, recompress_calls_back, NULL);
    test_within("a bundle's progress calls the store", DEADLINE_S, import_calls_back, NULL);
    test_within("verify's callbacks call the store", DEADLINE_S, verify_calls_back, NULL);
    test_within("the log callback calls the store", DEADLINE_S, log_from_get, NULL);
    return test_done();
}
