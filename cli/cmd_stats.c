/* kcache stats: the numbers a ccache user looks for, laid out as ccache -s does. */
#include <getopt.h>
#include <string.h>

#include <kcache/config.h>
#include <kcache/remote.h>
#include <kcache/config.h>

#include "cli.h"

/* The shared tier's counters (<kcache/remote.h>), in the order shown. */
static const char *const remote_counters[] = {
    "remote_hits",     "remote_misses",    "remote_pushes",  "remote_errors",
    "remote_rejected", "remote_skipped",   "remote_bytes_in", "remote_bytes_out",
    "remote_saved_ns",
};
enum { R_HITS, R_MISSES, R_PUSHES, R_ERRORS, R_REJECTED, R_SKIPPED, R_IN, R_OUT, R_SAVED,
       R_COUNT };

/* The shared file system tier's counters (lib/remote/sharedfs.h), and its directory. */
static const char *const shared_counters[] = {
    "shared_hits", "shared_misses", "shared_publishes", "shared_rejected", "shared_errors",
    "shared_compactions",
};
#define S_COUNT 6

struct shared_stats {
    char dir[1024]; /* "" when none is set */
    uint64_t v[S_COUNT];
    int any;
};

static void read_shared(struct shared_stats *ss, kcache_store *store)
{
    memset(ss, 0, sizeof(*ss));
    kcache_config *c = NULL;
    char err[512];
    if (kcache_config_load(&c, NULL, 0, err, sizeof(err)) == 0) {
        const kcache_setting *d = kcache_config_find(c, "shared");
        if (d && d->value[0] && strcmp(d->value, "none"))
            snprintf(ss->dir, sizeof(ss->dir), "%s", d->value);
    }
    kcache_config_free(c);
    for (int i = 0; i < S_COUNT; i++) {
        if (kcache_store_counter(&ss->v[i], store, shared_counters[i]) != 0)
            ss->v[i] = 0;
        ss->any |= ss->v[i] != 0;
    }
}

struct remote_stats {
    char url[512]; /* "" when no remote is set */
    uint64_t v[R_COUNT];
    int any;
    struct shared_stats shared; /* the tier between the store and the remote */
};

static void read_remote(struct remote_stats *rs, kcache_store *store)
{
    memset(rs, 0, sizeof(*rs));
    kcache_remote *remote = NULL;
    char err[512];
    if (kcache_remote_open(&remote, store, NULL, err, sizeof(err)) == 0 && remote)
        snprintf(rs->url, sizeof(rs->url), "%s", kcache_remote_url(remote));
    kcache_remote_close(remote);
    read_shared(&rs->shared, store);
    for (int i = 0; i < R_COUNT; i++) {
        if (kcache_store_counter(&rs->v[i], store, remote_counters[i]) != 0)
            rs->v[i] = 0;
        rs->any |= rs->v[i] != 0;
    }
}

static const char usage_text[] =
    "usage: kcache stats [-z|--zero] [--namespace NS] [--json]\n"
    "\n"
    "Shows entries, sizes (raw, stored, on disk) against the cap, hits and misses\n"
    "overall and per architecture and kind, compile time saved, evictions, damaged\n"
    "entries found and store failures; with a shared directory (or its counters), its\n"
    "hits, misses, segments published and compactions; with a remote (or its\n"
    "counters), its hits, misses, pushes, errors, bytes and time saved.\n"
    "\n"
    "  -z, --zero   zero the counters after showing them (entries stay); with\n"
    "               --namespace, that namespace's hits and misses only\n"
    "      --namespace NS  only what callers stored under their own keys in NS\n"
    "               (cuda.core, triton, ...): entries, sizes, hits and misses\n"
    "      --json   machine-readable output (see kcache-json(7))\n"
    "  -h, --help   this text\n";

static double percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void json_shared(cli_json *j, const struct shared_stats *ss)
{
    cli_json_object_begin(j, "shared");
    if (ss->dir[0])
        cli_json_string(j, "dir", ss->dir);
    else
        cli_json_null(j, "dir");
    for (int i = 0; i < S_COUNT; i++)
        cli_json_uint(j, shared_counters[i] + 7, ss->v[i]); /* without "shared_" */
    cli_json_object_end(j);
}

static void print_json(const kcache_stats *st, const char *path, const struct remote_stats *rs,
                       int exists, uint64_t errors, uint64_t conflicts,
                       uint64_t request_errors, const uint64_t by_kind[5])
{
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_string(&j, "path", path);
    cli_json_bool(&j, "exists", exists);
    cli_json_int(&j, "schema_version", st->schema_version);
    cli_json_int(&j, "since_ms", st->since);
    cli_json_uint(&j, "entries", st->entries);
    cli_json_object_begin(&j, "entries_by_kind");
    for (int k = KCACHE_KIND_CUBIN; k <= KCACHE_KIND_DATA; k++)
        cli_json_uint(&j, kcache_kind_name((kcache_kind)k), by_kind[k]);
    cli_json_object_end(&j);
    cli_json_uint(&j, "raw_bytes", st->raw_bytes);
    cli_json_uint(&j, "stored_bytes", st->stored_bytes);
    cli_json_uint(&j, "file_bytes", st->file_bytes);
    cli_json_uint(&j, "wal_bytes", st->wal_bytes);
    cli_json_uint(&j, "disk_bytes", st->file_bytes + st->wal_bytes);
    if (st->max_size == UINT64_MAX)
        cli_json_null(&j, "max_size");
    else
        cli_json_uint(&j, "max_size", st->max_size);
    cli_json_double(&j, "compression_ratio",
                    st->stored_bytes ? (double)st->raw_bytes / (double)st->stored_bytes : 0.0);
    cli_json_uint(&j, "hits", st->hits);
    cli_json_uint(&j, "misses", st->misses);
    cli_json_uint(&j, "errors", errors);
    cli_json_uint(&j, "request_errors", request_errors);
    cli_json_double(&j, "hit_rate", percent(st->hits, st->hits + st->misses) / 100.0);
    cli_json_uint(&j, "saved_ns", st->saved_ns);
    cli_json_uint(&j, "evictions", st->evictions);
    cli_json_uint(&j, "corrupt", st->corrupt);
    cli_json_uint(&j, "store_failures", st->store_failures);
    cli_json_uint(&j, "conflicts", conflicts);
    cli_json_uint(&j, "uncacheable", st->uncacheable);
    cli_json_object_begin(&j, "uncacheable_by_reason");
    for (size_t i = 0; i < st->n_uncacheable; i++)
        cli_json_uint(&j, st->uncacheable_reasons[i].reason, st->uncacheable_reasons[i].count);
    cli_json_object_end(&j);
    cli_json_array_begin(&j, "usage");
    for (size_t i = 0; i < st->n_usage; i++) {
        const kcache_usage *u = &st->usage[i];
        const char *kind = kcache_kind_name(u->kind);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "arch", u->arch);
        cli_json_string(&j, "kind", kind ? kind : "");
        cli_json_uint(&j, "hits", u->hits);
        cli_json_uint(&j, "misses", u->misses);
        cli_json_uint(&j, "saved_ns", u->saved_ns);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_object_begin(&j, "remote");
    if (rs->url[0])
        cli_json_string(&j, "url", rs->url);
    else
        cli_json_null(&j, "url");
    for (int i = 0; i < R_COUNT; i++)
        cli_json_uint(&j, remote_counters[i] + 7, rs->v[i]); /* without "remote_" */
    cli_json_object_end(&j);
    json_shared(&j, &rs->shared);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

static void print_shared(const struct shared_stats *ss)
{
    const uint64_t *v = ss->v;
    printf("\nShared directory:    %s\n", ss->dir[0] ? cli_safe(ss->dir) : "(none set now)");
    printf("Shared hits:         %10llu / %10llu (%6.2f %%)\n", (unsigned long long)v[0],
           (unsigned long long)(v[0] + v[1]), percent(v[0], v[0] + v[1]));
    printf("Published:           %10llu   (segments written; %llu compactions)\n",
           (unsigned long long)v[2], (unsigned long long)v[5]);
    printf("Refused, errors:     %10llu, %llu\n", (unsigned long long)v[3],
           (unsigned long long)v[4]);
}

static void print_remote(const struct remote_stats *rs)
{
    char a[64], b[64];
    const uint64_t *v = rs->v;
    printf("\nRemote:              %s\n", rs->url[0] ? rs->url : "(none set now)");
    printf("Remote hits:         %10llu / %10llu (%6.2f %%)\n", (unsigned long long)v[R_HITS],
           (unsigned long long)(v[R_HITS] + v[R_MISSES]), percent(v[R_HITS], v[R_HITS] + v[R_MISSES]));
    printf("Remote misses:       %10llu\n", (unsigned long long)v[R_MISSES]);
    printf("Remote pushes:       %10llu\n", (unsigned long long)v[R_PUSHES]);
    printf("Remote errors:       %10llu (%llu operations skipped while it was left alone)\n",
           (unsigned long long)v[R_ERRORS], (unsigned long long)v[R_SKIPPED]);
    printf("Remote rejected:     %10llu (entries that failed the checks)\n",
           (unsigned long long)v[R_REJECTED]);
    printf("Remote traffic:      %10s in, %s out\n", kcache_format_size(a, sizeof(a), v[R_IN]),
           kcache_format_size(b, sizeof(b), v[R_OUT]));
    printf("Remote time saved:   %10s\n", cli_format_duration(a, sizeof(a), v[R_SAVED]));
}

static void print_human(const kcache_stats *st, const char *path, const struct remote_stats *rs,
                        int exists, uint64_t errors, uint64_t conflicts,
                        uint64_t request_errors, const uint64_t by_kind[5])
{
    char a[64], b[64], c[64];
    uint64_t lookups = st->hits + st->misses;
    uint64_t disk = st->file_bytes + st->wal_bytes;
    if (!exists) {
        printf("No cache yet at %s: nothing has been compiled through it.\n", path);
        printf("Cap:                 %10s\n", cli_format_cap(a, sizeof(a), st->max_size));
        return;
    }
    printf("Database:            %s (schema %d)\n", path, st->schema_version);
    printf("Stats since:         %s\n", cli_format_time(a, sizeof(a), st->since));
    printf("Hits:                %10llu / %10llu (%6.2f %%)\n", (unsigned long long)st->hits,
           (unsigned long long)lookups, percent(st->hits, lookups));
    printf("Misses:              %10llu / %10llu (%6.2f %%)\n", (unsigned long long)st->misses,
           (unsigned long long)lookups, percent(st->misses, lookups));
    /* Errors and uncacheable compiles are not lookups: counted apart. */
    printf("Errors:              %10llu   (failed compiles: the source did not compile)\n",
           (unsigned long long)errors);
    printf("Bad requests:        %10llu   (a source not found, an unknown architecture or "
           "option)\n", (unsigned long long)request_errors);
    printf("Compile time saved:  %10s\n", cli_format_duration(a, sizeof(a), st->saved_ns));
    /* A drop-in compile to sm_XX keeps a CUBIN and its PTX: two entries, one lookup. */
    printf("Entries:             %10llu   (%llu cubin, %llu ptx, %llu ltoir",
           (unsigned long long)st->entries, (unsigned long long)by_kind[KCACHE_KIND_CUBIN],
           (unsigned long long)by_kind[KCACHE_KIND_PTX],
           (unsigned long long)by_kind[KCACHE_KIND_LTOIR]);
    if (by_kind[KCACHE_KIND_DATA])
        printf(", %llu data", (unsigned long long)by_kind[KCACHE_KIND_DATA]);
    printf(")\n");
    printf("Artifacts:           %10s raw, %s stored (%.1fx)\n",
           kcache_format_size(a, sizeof(a), st->raw_bytes),
           kcache_format_size(b, sizeof(b), st->stored_bytes),
           st->stored_bytes ? (double)st->raw_bytes / (double)st->stored_bytes : 0.0);
    printf("On disk:             %10s (database %s + WAL %s)\n",
           kcache_format_size(a, sizeof(a), disk),
           kcache_format_size(b, sizeof(b), st->file_bytes),
           kcache_format_size(c, sizeof(c), st->wal_bytes));
    if (st->max_size == UINT64_MAX)
        printf("Cap:                 %10s\n", "none");
    else
        printf("Cap:                 %10s (%.1f %% full)\n",
               cli_format_cap(a, sizeof(a), st->max_size), percent(disk, st->max_size));
    printf("Evictions:           %10llu\n", (unsigned long long)st->evictions);
    printf("Damaged entries:     %10llu\n", (unsigned long long)st->corrupt);
    printf("Store failures:      %10llu\n", (unsigned long long)st->store_failures);
    /* Arrivals (import, remote) under a key held here with other bytes: ours were kept. */
    printf("Conflicts:           %10llu   (arriving entries with other bytes; local kept)\n",
           (unsigned long long)conflicts);
    printf("Not cacheable:       %10llu\n", (unsigned long long)st->uncacheable);
    for (size_t i = 0; i < st->n_uncacheable; i++)
        printf("  %-18s %10llu\n", st->uncacheable_reasons[i].reason,
               (unsigned long long)st->uncacheable_reasons[i].count);
    if (rs->shared.dir[0] || rs->shared.any)
        print_shared(&rs->shared);
    if (rs->url[0] || rs->any)
        print_remote(rs);
    if (!st->n_usage)
        return;
    printf("\n%-14s %-6s %10s %10s %9s %12s\n", "Architecture", "Kind", "Hits", "Misses",
           "Hit rate", "Saved");
    for (size_t i = 0; i < st->n_usage; i++) {
        const kcache_usage *u = &st->usage[i];
        const char *kind = kcache_kind_name(u->kind);
        printf("%-14s %-6s %10llu %10llu %8.1f%% %12s\n", u->arch[0] ? cli_safe(u->arch) : "-",
               kind ? kind : "-", (unsigned long long)u->hits, (unsigned long long)u->misses,
               percent(u->hits, u->hits + u->misses),
               cli_format_duration(a, sizeof(a), u->saved_ns));
    }
}

/* Stats of a cache that does not exist: zeros, the path and the cap it would have. */
/* Entries of each kind (indexed by kcache_kind). */
static void count_kinds(kcache_store *store, uint64_t by_kind[5])
{
    /* Data: what callers (and the drop-in, of NVRTC) keep under their own keys. */
    for (int k = KCACHE_KIND_CUBIN; k <= KCACHE_KIND_DATA; k++) {
        kcache_filter f = KCACHE_FILTER_INIT;
        kcache_key *keys = NULL;
        size_t n = 0;
        f.kind = (kcache_kind)k;
        by_kind[k] = kcache_store_list_keys(&keys, &n, store, &f) == 0 ? n : 0;
        kcache_keys_free(keys);
    }
}

static int no_cache(int json)
{
    uint64_t by_kind[5] = {0, 0, 0, 0, 0};
    kcache_config *cfg = NULL;
    if (cli_config_load(&cfg))
        return CLI_FAIL;
    kcache_stats st;
    struct remote_stats none;
    memset(&st, 0, sizeof(st));
    memset(&none, 0, sizeof(none));
    st.max_size = cli_globals.max_size;
    if (!st.max_size && kcache_parse_max_size(&st.max_size,
                                              kcache_config_find(cfg, "max_size")->value))
        st.max_size = KCACHE_DEFAULT_MAX_SIZE;
    const char *path = kcache_config_find(cfg, "path")->value;
    if (json)
        print_json(&st, path, &none, 0, 0, 0, 0, by_kind);
    else
        print_human(&st, path, &none, 0, 0, 0, 0, by_kind);
    kcache_config_free(cfg);
    return CLI_OK;
}

/* One namespace: what callers stored under their own keys in it. */
/* One namespace's stats; zero: then zero its counters (after showing them). */
static int namespace_stats(const char *ns, int json, int zero)
{
    kcache_store *store;
    if (cli_open_existing(&store, !zero))
        return CLI_FAIL;
    kcache_namespace_stats st = KCACHE_NAMESPACE_STATS_INIT;
    if (store && kcache_store_namespace_stats(&st, store, ns)) {
        cli_error("%s", kcache_store_errmsg(store));
        kcache_store_close(store);
        return CLI_FAIL;
    }
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "namespace", ns);
        cli_json_uint(&j, "entries", st.entries);
        cli_json_uint(&j, "raw_bytes", st.raw_bytes);
        cli_json_uint(&j, "stored_bytes", st.stored_bytes);
        cli_json_uint(&j, "hits", st.hits);
        cli_json_uint(&j, "misses", st.misses);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32], b[32], n[48];
        printf("Namespace %s: %s, %s (%s stored); %llu hits, %llu misses (%.1f%% hit rate)\n", ns,
               cli_plural(n, sizeof(n), st.entries, "entry", "entries"),
               kcache_format_size(a, sizeof(a), st.raw_bytes),
               kcache_format_size(b, sizeof(b), st.stored_bytes), (unsigned long long)st.hits,
               (unsigned long long)st.misses, percent(st.hits, st.hits + st.misses));
    }
    int had_cache = store != NULL;
    if (zero && store && kcache_store_zero_namespace_stats(store, ns)) {
        cli_error("%s", kcache_store_errmsg(store));
        kcache_store_close(store);
        return CLI_FAIL;
    }
    if (zero && store && !json)
        printf("Counters of namespace %s zeroed.\n", ns);
    kcache_store_close(store);
    return had_cache ? CLI_OK : cli_no_cache(NULL);
}

int cmd_stats(int argc, char **argv)
{
    static const struct option options[] = {
        {"zero", no_argument, NULL, 'z'},
        /* ccache's -z: zero without showing (main.c) */
        {"zero-only", no_argument, NULL, 'Z'},
        {"namespace", required_argument, NULL, 'N'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    int zero = 0, json = 0, zero_only = 0, c;
    const char *ns = NULL;
    cli_options opts = CLI_OPTIONS(argc, argv, "stats", usage_text, ":zh", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'z': zero = 1; break;
        case 'Z': zero = zero_only = 1; break;
        case 'N': ns = optarg; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (cli_extra_arg(&opts, 0))
        return CLI_USAGE;
    if (ns) {
        const char *arch = NULL;
        kcache_kind kind = 0;
        if (cli_namespace_filter(&arch, &kind, "stats", ns))
            return CLI_USAGE;
        return namespace_stats(ns, json, zero);
    }
    kcache_store *store;
    /* Reading stats creates nothing; only -z writes. */
    if (cli_open_existing(&store, !zero))
        return CLI_FAIL;
    if (!store)
        return zero_only ? cli_no_cache("no counters to zero") : no_cache(json);
    if (zero_only) {
        int zrc = kcache_store_zero_stats(store);
        if (zrc)
            cli_error("%s", kcache_store_errmsg(store));
        else
            printf("Counters zeroed.\n");
        kcache_store_close(store);
        return zrc ? CLI_FAIL : CLI_OK;
    }
    kcache_stats *st = NULL;
    int rc = kcache_store_stats(&st, store);
    if (rc) {
        cli_error("%s", kcache_store_errmsg(store));
        kcache_store_close(store);
        return CLI_FAIL;
    }
    struct remote_stats rs;
    read_remote(&rs, store);
    uint64_t by_kind[5] = {0, 0, 0, 0, 0};
    count_kinds(store, by_kind);
    uint64_t errors = 0, request_errors = 0;
    if (kcache_store_counter(&errors, store, "errors") != 0)
        errors = 0;
    uint64_t conflicts = 0;
    if (kcache_store_counter(&conflicts, store, "conflicts") != 0)
        conflicts = 0;
    if (kcache_store_counter(&request_errors, store, "request_errors") != 0)
        request_errors = 0;
    if (json)
        print_json(st, kcache_store_path(store), &rs, 1, errors, conflicts, request_errors,
                   by_kind);
    else
        print_human(st, kcache_store_path(store), &rs, 1, errors, conflicts, request_errors,
                    by_kind);
    kcache_stats_free(st);
    if (zero && (rc = kcache_store_zero_stats(store)))
        cli_error("%s", kcache_store_errmsg(store));
    else if (zero && !json)
        printf("\nCounters zeroed.\n");
    kcache_store_close(store);
    return rc ? CLI_FAIL : CLI_OK;
}
