/* kcache version: the CLI's and the library's versions. */

#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache version [--json]\n"
    "\n"
    "Prints the version of kcache, and of the library it runs with when that differs.\n"
    "\n"
    "      --json   machine-readable output\n"
    "  -h, --help   this text\n";

int cmd_version(int argc, char **argv)
{
    int json, status = cli_parse_json_only(argc, argv, "version", usage_text, &json);
    if (status >= 0)
        return status;
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
        /* The library is named only when it is not the one this CLI was built with. */
        if (strcmp(cli_version, kcache_version()))
            printf("kcache %s (library %s)\n", cli_version, kcache_version());
        else
            printf("kcache %s\n", cli_version);
    }
    return CLI_OK;
}
