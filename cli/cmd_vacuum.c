/* kcache vacuum: hand the file's free pages back, in steps that let other writers in. */

#include "cli.h"

static const char usage_text[] =
    "usage: kcache vacuum [--json]\n"
    "\n"
    "Checks the database file, hands its free pages back to the file system and\n"
    "truncates its WAL, in steps of about 50 ms between which other processes\n"
    "write: it never makes them wait long. Pruning already hands free space\n"
    "back; this takes what is left. A damaged file is set aside and begun anew.\n"
    "\n"
    "      --json   report as JSON\n"
    "  -h, --help   this text\n";

int cmd_vacuum(int argc, char **argv)
{
    return cli_rework_file(argc, argv, "vacuum", usage_text, kcache_store_vacuum, 0);
}
