/* kcache path: where the cache lives, without opening (or creating) it. */

#include <kcache/config.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache path [--json]\n"
    "\n"
    "Prints the path of the cache database (from --path, KCACHE_PATH, KCACHE_DIR or\n"
    "the default) without creating it.\n"
    "\n"
    "      --json   also the directory and the config file, as JSON\n"
    "  -h, --help   this text\n";

int cmd_path(int argc, char **argv)
{
    int json, status = cli_parse_json_only(argc, argv, "path", usage_text, &json);
    if (status >= 0)
        return status;
    kcache_config *cfg = NULL;
    if (cli_config_load(&cfg))
        return CLI_FAIL;
    const char *path = kcache_config_find(cfg, "path")->value;
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "path", path);
        cli_json_string(&j, "dir", kcache_config_find(cfg, "dir")->value);
        cli_json_string(&j, "config_file", kcache_config_file(cfg));
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        printf("%s\n", path);
    }
    kcache_config_free(cfg);
    return CLI_OK;
}
