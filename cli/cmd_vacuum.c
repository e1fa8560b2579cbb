/* kcache vacuum: rebuild the file so that it takes no more space than its entries. */

#include "cli.h"

static const char usage_text[] =
    "usage: kcache vacuum [--json]\n"
    "\n"
    "Rebuilds the database file (SQLite VACUUM) and truncates its WAL. Pruning\n"
    "already hands most free space back; this compacts what is left. Other\n"
    "processes wait while it runs.\n"
    "\n"
    "      --json   report as JSON\n"
    "  -h, --help   this text\n";

static int disk(kcache_store *store, uint64_t *out)
{
    kcache_stats *st = NULL;
    int rc = kcache_store_stats(&st, store);
    if (!rc)
        *out = st->file_bytes + st->wal_bytes;
    kcache_stats_free(st);
    return rc;
}

int cmd_vacuum(int argc, char **argv)
{
    int json, status = cli_parse_json_only(argc, argv, "vacuum", usage_text, &json);
    if (status >= 0)
        return status;
    kcache_store *store;
    /* Nothing to compact is not a reason to create a cache. */
    if (cli_open_existing(&store, 0))
        return CLI_FAIL;
    if (!store) {
        if (json)
            printf("{\"disk_before\": 0, \"disk_after\": 0}\n");
        return cli_no_cache("nothing to compact");
    }
    uint64_t before = 0, after = 0;
    int ret = CLI_OK;
    if (disk(store, &before) || kcache_store_vacuum(store) || disk(store, &after)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
    } else if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_uint(&j, "disk_before", before);
        cli_json_uint(&j, "disk_after", after);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32], b[32];
        printf("On disk: %s -> %s\n", kcache_format_size(a, sizeof(a), before),
               kcache_format_size(b, sizeof(b), after));
    }
    kcache_store_close(store);
    return ret;
}
