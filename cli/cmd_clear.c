/* kcache clear: every entry goes; the file stays, with its counters. */

#include "cli.h"

static const char usage_text[] =
    "usage: kcache clear [--json]\n"
    "\n"
    "Deletes every entry and hands the space back to the file system. Counters\n"
    "(hits, misses) stay: 'kcache stats -z' zeroes them.\n"
    "\n"
    "      --json   report as JSON\n"
    "  -h, --help   this text\n";

int cmd_clear(int argc, char **argv)
{
    int json, status = cli_parse_json_only(argc, argv, "clear", usage_text, &json);
    if (status >= 0)
        return status;
    kcache_store *store;
    /* Nothing to clear is not a reason to create a cache. */
    if (cli_open_existing(&store, 0))
        return CLI_FAIL;
    if (!store) {
        if (json)
            printf("{\"removed\": 0, \"disk_before\": 0, \"disk_after\": 0}\n");
        return cli_no_cache("nothing to clear");
    }
    int ret = CLI_OK;
    kcache_stats *before = NULL, *after = NULL;
    if (kcache_store_stats(&before, store) || kcache_store_clear(store) ||
        kcache_store_stats(&after, store)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    uint64_t disk_before = before->file_bytes + before->wal_bytes;
    uint64_t disk_after = after->file_bytes + after->wal_bytes;
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_uint(&j, "removed", before->entries);
        cli_json_uint(&j, "disk_before", disk_before);
        cli_json_uint(&j, "disk_after", disk_after);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32], b[32], n[48];
        printf("Removed %s; on disk %s -> %s\n",
               cli_plural(n, sizeof(n), before->entries, "entry", "entries"),
               kcache_format_size(a, sizeof(a), disk_before),
               kcache_format_size(b, sizeof(b), disk_after));
    }
out:
    kcache_stats_free(before);
    kcache_stats_free(after);
    kcache_store_close(store);
    return ret;
}
