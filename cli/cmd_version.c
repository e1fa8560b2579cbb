/* kcache version: the CLI's and the library's versions. */
#include <getopt.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache version [--json]\n"
    "\n"
    "Prints the version of kcache and of the library it runs with.\n"
    "\n"
    "      --json   machine-readable output\n"
    "  -h, --help   this text\n";

int cmd_version(int argc, char **argv)
{
    static const struct option options[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        default: return cli_usage_error("version", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("version", "unexpected argument '%s'", argv[optind]);
    char cli_version[32];
    snprintf(cli_version, sizeof(cli_version), "%d.%d.%d", KCACHE_VERSION_MAJOR,
             KCACHE_VERSION_MINOR, KCACHE_VERSION_PATCH);
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "version", cli_version);
        cli_json_string(&j, "library_version", kcache_version());
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        printf("kcache %s (library %s)\n", cli_version, kcache_version());
    }
    return CLI_OK;
}
