/* kcache VERB [options]: the dispatch table and the options that come before the verb. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kcache/config.h>

#include "cli.h"

struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct verb verbs[] = {
    {"compile", cmd_compile, "compile kernels through the cache"},
    {"explain", cmd_explain, "say why a request would miss: what differs from stored entries"},
    {"stats", cmd_stats, "show hits, misses, sizes and the cap"},
    {"ls", cmd_ls, "list entries"},
    {"inspect", cmd_inspect, "show an entry: metadata, inputs, log, CUBIN resources"},
    {"get", cmd_get, "write an entry's artifact to a file or a pipe"},
    {"prune", cmd_prune, "evict entries by size, age, count, architecture or kind"},
    {"export", cmd_export, "write entries to a bundle (or plain files) for another machine"},
    {"import", cmd_import, "check a bundle and merge it into the cache"},
    {"verify", cmd_verify, "check the database and every entry's digest"},
    {"remote", cmd_remote, "check the shared tier (Redis), push entries up or pull them down"},
    {"config", cmd_config, "show or set settings and where they come from"},
    {"clear", cmd_clear, "delete every entry"},
    {"vacuum", cmd_vacuum, "compact the database file"},
    {"run", cmd_run, "run a program with the drop-in NVRTC: its compiles go through the cache"},
    {"path", cmd_path, "print where the cache database is"},
    {"version", cmd_version, "print the version"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kcache [--dir DIR] [--path FILE] [--max-size SIZE] <verb> [options]\n\n"
               "A cache of compiled CUDA kernels in one SQLite file.\n\nVerbs:\n");
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\nOptions before the verb:\n"
               "  --dir DIR         the cache directory: DIR/kcache.db and DIR/kcache.conf\n"
               "                    (default: $KCACHE_DIR, $XDG_CACHE_HOME/kcache or\n"
               "                    ~/.cache/kcache)\n"
               "  --path FILE       the cache database (default: $KCACHE_PATH, else\n"
               "                    kcache.db in the directory)\n"
               "  --max-size SIZE   the size cap, e.g. 2G; 0 or none: no cap (default:\n"
               "                    $KCACHE_MAX_SIZE, max_size in kcache.conf, or 4 GiB)\n"
               "  --version         print the version\n"
               "  --help            this text\n\n"
               "'kcache VERB --help' describes each verb.\n");
}

/*
 * A config file kcache does not understand (an unknown line, a value it
 * cannot read, a FIFO) stops every verb that uses the cache before it
 * starts, with the file and line: exit 2, as for a bad option. Going on
 * without the file would undo what it says ("disable = true" next to a typo).
 * --help and version need no cache. Returns -1 to go on.
 */
static int check_config(int argc, char **argv)
{
    if (!strcmp(argv[0], "version"))
        return -1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return -1;
    kcache_config_override o = {"path", cli_globals.path};
    kcache_config *cfg = NULL;
    char err[512];
    if (kcache_config_load(&cfg, &o, cli_globals.path ? 1 : 0, err, sizeof(err)) == 0) {
        kcache_config_free(cfg);
        return -1;
    }
    cli_error("%s", err);
    return CLI_USAGE;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        const char *value = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return CLI_OK;
        }
        if (!strcmp(a, "--version")) {
            printf("kcache %s\n", kcache_version());
            return CLI_OK;
        }
        static const char *const takes_value[] = {"--path", "--max-size", "--dir"};
        size_t which = 0, name_len = 0;
        const char *eq = strchr(a, '=');
        name_len = eq ? (size_t)(eq - a) : strlen(a);
        while (which < 3 && !(strlen(takes_value[which]) == name_len &&
                              !strncmp(a, takes_value[which], name_len)))
            which++;
        if (which < 3) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return cli_usage_error(NULL, "%s needs a value", a);
            if (which == 0) {
                cli_globals.path = value;
            } else if (which == 1) {
                if (kcache_parse_max_size(&cli_globals.max_size, value))
                    return cli_usage_error(NULL, "--max-size '%s' is not a size (use e.g. 2G, "
                                           "or 0 or none for no cap)", value);
            } else {
                if (!*value)
                    return cli_usage_error(NULL, "--dir needs a directory");
                cli_globals.dir = value;
            }
            continue;
        }
        return cli_usage_error(NULL, "unknown option '%s'", a);
    }
    /* --path names the file itself and wins over --dir, as KCACHE_PATH over KCACHE_DIR. */
    if (cli_globals.dir && !cli_globals.path) {
        size_t n = strlen(cli_globals.dir) + sizeof("/kcache.db");
        if (!(cli_globals.dir_path = malloc(n)))
            return cli_error("out of memory");
        snprintf(cli_globals.dir_path, n, "%s/kcache.db", cli_globals.dir);
        cli_globals.path = cli_globals.dir_path;
    }
    if (i >= argc) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[i];
    if (!strcmp(name, "help")) {
        if (i + 1 >= argc) {
            usage(stdout);
            return CLI_OK;
        }
        char *help_argv[] = {argv[i + 1], "--help", NULL};
        for (size_t v = 0; v < sizeof(verbs) / sizeof(verbs[0]); v++)
            if (!strcmp(verbs[v].name, argv[i + 1]))
                return verbs[v].fn(2, help_argv);
        return cli_usage_error(NULL, "no verb '%s'", argv[i + 1]);
    }
    for (size_t v = 0; v < sizeof(verbs) / sizeof(verbs[0]); v++)
        if (!strcmp(verbs[v].name, name)) {
            int status = check_config(argc - i, argv + i);
            return status >= 0 ? status : verbs[v].fn(argc - i, argv + i);
        }
    return cli_usage_error(NULL, "no verb '%s'", name);
}
