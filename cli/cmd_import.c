/* kcache import: check a bundle whole, then merge it, keeping the newer of two entries. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kcache/bundle.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache import IN.kcache [--dry-run] [--json]\n"
    "\n"
    "Checks a bundle written by 'kcache export' (application id, schema, SQLite\n"
    "integrity, every digest) and only then merges it into the cache. For a key\n"
    "in both, the entry compiled later is kept. A damaged bundle changes nothing.\n"
    "\n"
    "  -n, --dry-run   check and count, change nothing\n"
    "      --json      report as JSON\n"
    "  -h, --help      this text\n";

/* The evictions counted so far (0 when stats cannot be read: then nothing is said). */
static uint64_t evictions_now(kcache_store *store)
{
    kcache_stats *st = NULL;
    uint64_t n = kcache_store_stats(&st, store) == 0 ? st->evictions : 0;
    kcache_stats_free(st);
    return n;
}

/* How many of the bundle's keys the store no longer has. */
static uint64_t imported_gone(kcache_store *store, const char *bundle)
{
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    kcache_filter all = KCACHE_FILTER_INIT;
    kcache_store *b = NULL;
    kcache_key *keys = NULL;
    size_t n = 0;
    uint64_t gone = 0;
    so.path = bundle;
    so.read_only = 1;
    so.no_create = 1;
    so.max_size = UINT64_MAX;
    if (kcache_store_open(&b, &so, NULL, 0) == 0 &&
        kcache_store_list_keys(&keys, &n, b, &all) == 0) {
        for (size_t i = 0; i < n; i++) {
            kcache_entry *e = NULL;
            if (kcache_store_get(&e, store, &keys[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA))
                gone++;
            kcache_entry_free(e);
        }
    }
    kcache_keys_free(keys);
    kcache_store_close(b);
    return gone;
}

static int scratch_store(kcache_store **out, char *dir, size_t size)
{
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    char path[128], err[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/kcache-check-XXXXXX", tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        return cli_error("cannot make a directory to check the bundle in: %s", strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/kcache.db", dir);
    so.path = path;
    so.max_size = UINT64_MAX;
    if (kcache_store_open(out, &so, err, sizeof(err)))
        return cli_error("%s", err);
    return 0;
}

static void remove_scratch(const char *dir)
{
    static const char *const names[] = {"kcache.db", "kcache.db-wal", "kcache.db-shm",
                                        "kcache.conf"};
    char path[160];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int cmd_import(int argc, char **argv)
{
    static const struct option options[] = {
        {"dry-run", no_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    int json = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "hn", options, NULL)) != -1) {
        switch (c) {
        case 'n': o.dry_run = 1; break;
        case 'j': json = 1; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        default: return cli_usage_error("import", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error("import", "which bundle? give the file 'kcache export' wrote");
    if (optind + 1 < argc)
        return cli_usage_error("import", "unexpected argument '%s'", argv[optind + 1]);
    const char *in = argv[optind];
    kcache_store *store = NULL;
    char scratch[64] = "";
    if (o.dry_run) {
        /* Checking needs a store to compare with; with no cache yet, an empty
         * one made for the purpose (and removed), so that looking creates
         * nothing where the cache would be. */
        if (cli_open_store_to_read(&store))
            return CLI_FAIL;
        if (!store && scratch_store(&store, scratch, sizeof(scratch)))
            return CLI_FAIL;
    } else if (cli_open_store(&store, 0)) {
        return CLI_FAIL;
    }
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    o.progress = cli_progress;
    int ret = CLI_OK;
    uint64_t evictions = evictions_now(store);
    if (kcache_bundle_import(&r, store, in, &o)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    /* The cap may have evicted what was just merged: say so, never leave a
     * user believing that 20000 entries are in a cache that kept 3714. */
    uint64_t evicted = o.dry_run ? 0 : evictions_now(store) - evictions;
    uint64_t gone = evicted ? imported_gone(store, in) : 0;
    if (evicted) {
        char cap[32], n[48];
        cli_warn("the cap (%s) evicted %s during the import, %llu of the %llu just imported: "
                 "the bundle does not fit; raise the cap (e.g. 'kcache config max_size 8G', "
                 "or 0 for none)",
                 cli_format_cap(cap, sizeof(cap), kcache_store_max_size(store)),
                 cli_plural(n, sizeof(n), evicted, "entry", "entries"), (unsigned long long)gone,
                 (unsigned long long)(r.added + r.replaced));
    }
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "path", in);
        cli_json_bool(&j, "dry_run", o.dry_run);
        cli_json_uint(&j, "entries", r.entries);
        cli_json_uint(&j, "bytes", r.bytes);
        cli_json_uint(&j, "added", r.added);
        cli_json_uint(&j, "replaced", r.replaced);
        cli_json_uint(&j, "skipped", r.skipped);
        cli_json_uint(&j, "evicted", evicted);
        cli_json_uint(&j, "evicted_imported", gone);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else if (r.entries && r.skipped == r.entries) {
        char n[48];
        printf("Nothing to import: all %s %s already here\n",
               cli_plural(n, sizeof(n), r.entries, "entry", "entries"),
               r.entries == 1 ? "is" : "are");
    } else {
        char a[32], n[48];
        printf("%s %s (%s): %llu added, %llu replaced by a newer one, %llu already in the "
               "cache\n",
               o.dry_run ? "Checked; would import" : "Imported",
               cli_plural(n, sizeof(n), r.entries, "entry", "entries"),
               kcache_format_size(a, sizeof(a), r.bytes), (unsigned long long)r.added,
               (unsigned long long)r.replaced, (unsigned long long)r.skipped);
    }
out:
    kcache_store_close(store);
    if (scratch[0])
        remove_scratch(scratch);
    return ret;
}
