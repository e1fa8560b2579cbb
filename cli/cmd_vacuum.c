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

int cmd_vacuum(int argc, char **argv)
{
    return cli_rework_file(argc, argv, "vacuum", usage_text, kcache_store_vacuum, 0);
}
