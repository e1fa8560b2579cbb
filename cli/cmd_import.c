/* kcache import: check a bundle whole, then merge it, keeping the newer of two entries. */
#include <getopt.h>

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
    kcache_store *store;
    if (o.dry_run ? cli_open_store_to_read(&store) : cli_open_store(&store, 0))
        return CLI_FAIL;
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    o.progress = cli_progress;
    int ret = CLI_OK;
    if (kcache_bundle_import(&r, store, in, &o)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
    } else if (json) {
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
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32];
        printf("%s %llu entries (%s): %llu added, %llu replaced, %llu already as new\n",
               o.dry_run ? "Checked; would import" : "Imported",
               (unsigned long long)r.entries, kcache_format_size(a, sizeof(a), r.bytes),
               (unsigned long long)r.added, (unsigned long long)r.replaced,
               (unsigned long long)r.skipped);
    }
    kcache_store_close(store);
    return ret;
}
