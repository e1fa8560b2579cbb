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
    return cli_rework_file(argc, argv, "clear", usage_text, kcache_store_clear, 1);
}
