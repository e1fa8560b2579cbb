/*
 * Fuzz target: the bundle importer on arbitrary bytes. The input becomes a
 * file that kcache_bundle_import() checks (dry run) against an empty store;
 * a bundle it accepts is then imported for real and every entry read back
 * (so the merge path is fuzzed too), and the store emptied again.
 *
 * What the API promises, whatever the bytes: one of the documented codes
 * with a one-line message; a refused bundle changes nothing; every entry an
 * accepted one brings is served with its digest checked; the file given is
 * never changed, and nothing is left beside it.
 */
#include <kcache/bundle.h>
#include <kcache/store.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256], bundle[300], side[320], store_path[300];
static kcache_store *store;

static void cleanup(void)
{
    kcache_store_close(store);
    store = NULL;
    if (dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "fuzz_bundle: could not remove %s\n", dir);
    }
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/kcache-fuzz-bundle-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        abort();
    snprintf(bundle, sizeof(bundle), "%s/in.kcb", dir);
    snprintf(store_path, sizeof(store_path), "%s/cache.db", dir);
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = store_path;
    o.max_size = UINT64_MAX;
    char err[512];
    if (kcache_store_open(&store, &o, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_bundle: %s\n", err);
        abort();
    }
    atexit(cleanup);
}

static void remove_bundle(void)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        snprintf(side, sizeof(side), "%s%s", bundle, suffixes[i]);
        unlink(side);
    }
}

static int count_entry(void *ud, const kcache_entry *e)
{
    (void)e;
    ++*(uint64_t *)ud;
    return 0;
}

static uint64_t entries(void)
{
    uint64_t n = 0;
    kcache_filter f = KCACHE_FILTER_INIT;
    if (kcache_store_list(store, &f, count_entry, &n) != 0)
        abort();
    return n;
}

static int one_line(const char *msg)
{
    return msg && *msg && !strchr(msg, '\n');
}

struct keys {
    kcache_key k[64];
    size_t n;
};

static int collect(void *ud, const kcache_entry *e)
{
    struct keys *ks = ud;
    if (ks->n < sizeof(ks->k) / sizeof(ks->k[0]))
        ks->k[ks->n++] = e->key;
    return 0;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "fuzz_bundle: %s: %d (%s): [%s]\n", what, rc, kcache_strerror(rc),
            kcache_store_errmsg(store));
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!store)
        setup();
    remove_bundle();
    FILE *f = fopen(bundle, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();

    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    o.dry_run = 1;
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    int rc = kcache_bundle_import(&r, store, bundle, &o);
    if (rc != 0) {
        if (rc != KCACHE_ECORRUPT && rc != KCACHE_EFOREIGN && rc != KCACHE_EVERSION &&
            rc != KCACHE_EIO && rc != KCACHE_ENOMEM && rc != KCACHE_EINVAL &&
            rc != KCACHE_ENOTFOUND)
            die("unexpected status", rc);
        if (!one_line(kcache_store_errmsg(store)))
            die("not a one-line message", rc);
        if (entries() != 0)
            abort(); /* a refused bundle changes nothing */
        goto out;
    }
    if (r.added != r.entries || r.replaced || r.skipped || entries() != 0)
        abort(); /* a dry run into an empty store adds everything and writes nothing */

    /* Accepted: merge it for real; every entry must then be served intact. */
    o.dry_run = 0;
    rc = kcache_bundle_import(&r, store, bundle, &o);
    if (rc != 0) {
        if (!one_line(kcache_store_errmsg(store)))
            abort();
        if (entries() != 0)
            abort();
        goto out;
    }
    if (entries() > r.entries)
        abort();
    /* Read back through get, which checks every digest: whatever is listed is served. */
    struct keys ks = {.n = 0};
    kcache_filter lf = KCACHE_FILTER_INIT;
    if (kcache_store_list(store, &lf, collect, &ks) != 0)
        abort();
    for (size_t i = 0; i < ks.n; i++) {
        kcache_entry *e = NULL;
        rc = kcache_store_get(&e, store, &ks.k[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        if (rc != 0 || !e || (e->size && !e->data))
            abort();
        kcache_entry_free(e);
    }
    if (kcache_store_clear(store) != 0 || entries() != 0)
        abort();
out:
    remove_bundle();
    return 0;
}
