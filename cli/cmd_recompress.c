/* kcache recompress: stored entries re-encoded to the compression setting; -x's table. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache recompress [--dry-run] [--show] [--batch N] [--json]\n"
    "\n"
    "Re-encodes the entries stored in another codec than the compression setting\n"
    "(kcache config compression zstd|lz4|none) into it, a batch of entries per\n"
    "transaction: interrupted, every entry is whole in its old codec or its new\n"
    "one, and the next run goes on. Each artifact is checked against its digest\n"
    "first; a damaged one is left for 'kcache verify'. Entries too small to gain\n"
    "from compression stay uncompressed.\n"
    "\n"
    "  -n, --dry-run   count what would be re-encoded; change nothing\n"
    "      --show      only the table: entries, raw and stored sizes, ratio per codec\n"
    "                  (ccache's -x)\n"
    "      --batch N   entries per transaction (default 64)\n"
    "      --json      machine-readable output (see kcache-json(7))\n"
    "  -h, --help      this text\n";

static void print_table(const kcache_recompress_result *r)
{
    char a[32], b[32];
    printf("%-8s %10s %12s %12s %8s\n", "Codec", "Entries", "Raw", "Stored", "Ratio");
    for (int i = 0; i < 4; i++) {
        const kcache_codec_usage *u = &r->before[i];
        if (!u->entries && i == 3)
            continue;
        printf("%-8s %10llu %12s %12s %7.2fx\n", u->codec, (unsigned long long)u->entries,
               kcache_format_size(a, sizeof(a), u->raw_bytes),
               kcache_format_size(b, sizeof(b), u->stored_bytes),
               u->stored_bytes ? (double)u->raw_bytes / (double)u->stored_bytes : 1.0);
    }
    printf("\nSetting: compression = %s", r->codec);
    if (r->to_recompress)
        printf(" (%llu %s in another codec: 'kcache recompress' re-encodes %s)\n",
               (unsigned long long)r->to_recompress, r->to_recompress == 1 ? "entry" : "entries",
               r->to_recompress == 1 ? "it" : "them");
    else
        printf(" (every entry in it, or too small to compress)\n");
}

static void print_json(const kcache_recompress_result *r, int dry_run)
{
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_string(&j, "codec", r->codec);
    cli_json_bool(&j, "dry_run", dry_run);
    cli_json_array_begin(&j, "codecs");
    for (int i = 0; i < 4; i++) {
        const kcache_codec_usage *u = &r->before[i];
        if (!u->entries && i == 3)
            continue;
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "name", u->codec);
        cli_json_uint(&j, "entries", u->entries);
        cli_json_uint(&j, "raw_bytes", u->raw_bytes);
        cli_json_uint(&j, "stored_bytes", u->stored_bytes);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_uint(&j, "to_recompress", r->to_recompress);
    cli_json_uint(&j, "recompressed", r->recompressed);
    cli_json_uint(&j, "kept", r->kept);
    cli_json_uint(&j, "skipped", r->skipped);
    cli_json_uint(&j, "stored_before", r->stored_before);
    cli_json_uint(&j, "stored_after", r->stored_after);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

int cmd_recompress(int argc, char **argv)
{
    static const struct option options[] = {
        {"dry-run", no_argument, NULL, 'n'},
        {"show", no_argument, NULL, 's'},
        {"batch", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    kcache_recompress_options o = KCACHE_RECOMPRESS_OPTIONS_INIT;
    int json = 0, show = 0, c;
    uint64_t count;
    cli_options opts = CLI_OPTIONS(argc, argv, "recompress", usage_text, ":hn", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'n': o.dry_run = 1; break;
        case 's': show = o.dry_run = 1; break;
        case 'b':
            if (kcache_parse_count(&count, optarg, 1, 100000))
                return cli_usage_error("recompress", "--batch '%s' is not a number from 1 to "
                                       "100000", optarg);
            o.batch = (size_t)count;
            break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (cli_extra_arg(&opts, 0))
        return CLI_USAGE;
    kcache_store *store;
    if (cli_open_existing(&store, o.dry_run))
        return CLI_FAIL;
    if (!store) {
        if (json)
            printf("{\"codecs\": [], \"to_recompress\": 0, \"recompressed\": 0}\n");
        return cli_no_cache("nothing to recompress");
    }
    o.progress = cli_progress;
    kcache_recompress_result r = KCACHE_RECOMPRESS_RESULT_INIT;
    int ret = CLI_OK;
    if (kcache_store_recompress(&r, store, &o)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
    } else if (json) {
        print_json(&r, o.dry_run);
    } else if (show) {
        print_table(&r);
    } else if (o.dry_run) {
        printf("Would recompress %llu %s to %s\n", (unsigned long long)r.to_recompress,
               r.to_recompress == 1 ? "entry" : "entries", r.codec);
    } else if (!r.to_recompress) {
        printf("Nothing to recompress: every entry is stored as %s (or too small to compress)\n",
               r.codec);
    } else {
        char a[32], b[32], n[48];
        printf("Recompressed %s to %s: %s -> %s stored", cli_plural(n, sizeof(n), r.recompressed,
                                                                    "entry", "entries"),
               r.codec, kcache_format_size(a, sizeof(a), r.stored_before),
               kcache_format_size(b, sizeof(b), r.stored_after));
        if (r.kept)
            printf("; %llu left as they are (compressing them does not pay)",
                   (unsigned long long)r.kept);
        putchar('\n');
        if (r.skipped)
            cli_warn("%llu damaged or unreadable %s left as %s: run 'kcache verify'",
                     (unsigned long long)r.skipped, r.skipped == 1 ? "entry" : "entries",
                     r.skipped == 1 ? "it is" : "they are");
    }
    kcache_store_close(store);
    return ret;
}
