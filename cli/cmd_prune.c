/* kcache prune: evict by size, age, count, architecture or kind, least recently used first. */
#include <getopt.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache prune [--max-size SIZE] [--older-than AGE] [--arch A] [--kind K]\n"
    "                    [--namespace NS] [--max-entries N] [--dry-run] [--json]\n"
    "\n"
    "Evicts entries, least recently used first, and hands the space back to the file\n"
    "system. Without options, brings the cache under its cap.\n"
    "\n"
    "      --max-size SIZE   until database + WAL fit in SIZE (512M, 2G, 1.5GiB; 0 or\n"
    "                        none: no size limit, only the other options)\n"
    "      --older-than AGE  entries not used for AGE (30d, 12h, 90m)\n"
    "      --arch A          only this architecture: alone, all of it; with\n"
    "                        --older-than, what is that old\n"
    "      --kind K          only cubin, ptx, ltoir or data (as --arch)\n"
    "      --namespace NS    only what callers stored under their own keys in NS\n"
    "                        (cuda.core, triton, ...; as --arch)\n"
    "      --max-entries N   keep at most N entries\n"
    "  -n, --dry-run         say what would go and the size after: the prune is done\n"
    "                        in a transaction that is rolled back; nothing changes\n"
    "      --json            machine-readable output (see kcache-json(7))\n"
    "  -h, --help            this text\n";

/* The prune's accessed_before (ms since the epoch) for entries not used for age seconds. */
static int64_t accessed_before(uint64_t age)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* accessed_before 0 would mean "no age": an age past the epoch selects nothing. */
    if (age == 0)
        return now + 1;
    if (age >= (uint64_t)now / 1000)
        return 1;
    return now - (int64_t)age * 1000;
}

static void print_result(const kcache_prune_options *o, const kcache_prune_result *r, int json)
{
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_bool(&j, "dry_run", o->dry_run);
        cli_json_uint(&j, "evicted", r->evicted);
        cli_json_uint(&j, "evicted_bytes", r->evicted_bytes);
        cli_json_uint(&j, "disk_before", r->disk_before);
        cli_json_uint(&j, "disk_after", r->disk_after);
        cli_json_bool(&j, "disk_after_estimated", o->dry_run);
        cli_json_object_end(&j);
        cli_json_finish(&j);
        return;
    }
    char a[32], b[32], d[32], n[48];
    printf("%s %s (%s stored); on disk %s -> %s%s\n", o->dry_run ? "Would evict" : "Evicted",
           cli_plural(n, sizeof(n), r->evicted, "entry", "entries"),
           kcache_format_size(a, sizeof(a), r->evicted_bytes),
           kcache_format_size(b, sizeof(b), r->disk_before),
           o->dry_run ? "about " : "", kcache_format_size(d, sizeof(d), r->disk_after));
}

int cmd_prune(int argc, char **argv)
{
    static const struct option options[] = {
        {"max-size", required_argument, NULL, 's'},
        {"older-than", required_argument, NULL, 'o'},
        {"arch", required_argument, NULL, 'a'},
        {"kind", required_argument, NULL, 'k'},
        {"namespace", required_argument, NULL, 'N'},
        {"max-entries", required_argument, NULL, 'e'},
        {"dry-run", no_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    uint64_t age = 0;
    const char *ns = NULL;
    int json = 0, has_age = 0, c;
    cli_options opts = CLI_OPTIONS(argc, argv, "prune", usage_text, ":hn", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 's':
            /* 0/none: no size to fit, as for the cap (the other limits still apply). */
            if (kcache_parse_max_size(&o.max_size, optarg))
                return cli_usage_error("prune", "--max-size '%s' is not a size (use e.g. 2G, "
                                       "or 0 or none for no size limit)", optarg);
            break;
        case 'o':
            if (kcache_parse_age(&age, optarg))
                return cli_usage_error("prune", "--older-than '%s' is not an age (use e.g. 30d)",
                                       optarg);
            has_age = 1;
            break;
        case 'a': o.arch = optarg; break;
        case 'k':
            if (kcache_kind_parse(&o.kind, optarg))
                return cli_usage_error("prune", "--kind '%s': use cubin, ptx, ltoir or data",
                                       optarg);
            break;
        case 'N': ns = optarg; break;
        case 'e':
            if (kcache_parse_count(&o.max_entries, optarg, 0, UINT64_MAX))
                return cli_usage_error("prune", "--max-entries '%s' is not a number", optarg);
            break;
        case 'n': o.dry_run = 1; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (cli_extra_arg(&opts, 0))
        return CLI_USAGE;
    if (ns && cli_namespace_filter(&o.arch, &o.kind, "prune", ns))
        return CLI_USAGE;
    /* --arch, --kind or --namespace alone: every entry they name (ccache's
     * --evict-namespace), as with --older-than 0s. */
    if ((o.arch || o.kind) && !has_age)
        has_age = 1;
    if (has_age)
        o.accessed_before = accessed_before(age);
    kcache_store *store;
    /* Nothing to prune is not a reason to create a cache. */
    if (cli_open_existing(&store, 0))
        return CLI_FAIL;
    if (!store) {
        if (json)
            printf("{\"dry_run\": %s, \"evicted\": 0, \"evicted_bytes\": 0, \"disk_before\": 0, "
                   "\"disk_after\": 0, \"disk_after_estimated\": false}\n",
                   o.dry_run ? "true" : "false");
        return cli_no_cache("nothing to prune");
    }
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    int ret = CLI_OK;
    if (kcache_store_prune(&r, store, &o))
        ret = cli_error("%s", kcache_store_errmsg(store));
    else
        print_result(&o, &r, json);
    kcache_store_close(store);
    return ret;
}
