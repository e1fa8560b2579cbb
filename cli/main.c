/* kcache VERB [options]: the dispatch table and the options that come before the verb. */
#include <assert.h>
#include <ctype.h>
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
    {"recompress", cmd_recompress, "re-encode stored entries to the compression setting"},
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
               "  -d, --dir DIR     the cache directory: DIR/kcache.db and DIR/kcache.conf\n"
               "                    (default: $KCACHE_DIR, $XDG_CACHE_HOME/kcache or\n"
               "                    ~/.cache/kcache)\n"
               "  --path FILE       the cache database (default: $KCACHE_PATH, else\n"
               "                    kcache.db in the directory)\n"
               "  --max-size SIZE   the size cap, e.g. 2G; 0 or none: no cap (default:\n"
               "                    $KCACHE_MAX_SIZE, max_size in kcache.conf, or 4 GiB)\n"
               "  --config-path FILE  read settings from FILE, not the user's settings file\n"
               "  --version         print the version\n"
               "  --help            this text\n\n"
               "ccache's options, each a whole command (see 'For ccache users' in kcache(1)):\n"
               "  -s, --show-stats            kcache stats (-sv, -s --json; -sz: then zero)\n"
               "      --print-stats           kcache stats --json\n"
               "  -z, --zero-stats            zero the counters\n"
               "  -C, --clear                 kcache clear\n"
               "  -c, --cleanup               kcache prune (bring the cache under its cap)\n"
               "  -p, --show-config           kcache config\n"
               "  -M SIZE                     save the cap (max_size); a bare number is GiB;\n"
               "                              --max-size SIZE alone saves it too\n"
               "  -o, --set-config KEY=VALUE  kcache config KEY VALUE\n"
               "  -k, --get-config KEY        kcache config KEY\n"
               "  -V, --version               kcache version\n"
               "      --evict-older-than AGE  kcache prune --older-than AGE\n"
               "      --evict-namespace NS    kcache prune --namespace NS\n"
               "  -x, --show-compression      entries, sizes and ratios per codec\n"
               "  -X, --recompress CODEC      save compression (zstd, lz4 or none), then\n"
               "                              kcache recompress\n"
               "      --checksum-file FILE    print FILE's BLAKE2b-256 (kcache's digest), in hex\n"
               "  -F, --max-files N           refused: kcache caps by size (-M)\n\n"
               "'kcache VERB --help' describes each verb.\n");
}

/*
 * A config file kcache does not understand (an unknown line, a value it
 * cannot read, a FIFO) stops every verb that uses the cache but compile
 * before it starts, with the file and line: exit 2, as for a bad option. Going on
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
    /* compile goes on: the library compiles without the cache when it cannot
     * use a settings file (each row's warning says why), so nothing the file
     * says is undone by a store, and the kernel is still made. */
    if (!strcmp(argv[0], "compile"))
        return -1;
    cli_error("%s", err);
    return CLI_USAGE;
}

/*
 * ccache's options, each a whole command standing for a verb, so that a
 * ccache user's habits work: -s is stats, -M saves the cap.
 */
struct alias {
    char short_name;
    const char *long_name;
    int takes_value;
    char code;      /* which command (run_alias) */
};

static const struct alias aliases[] = {
    {'s', "--show-stats", 0, 's'},       {'z', "--zero-stats", 0, 'z'},
    {'C', "--clear", 0, 'C'},            {'c', "--cleanup", 0, 'c'},
    {'p', "--show-config", 0, 'p'},      {'M', NULL, 1, 'M'},
    {'o', "--set-config", 1, 'o'},       {'V', NULL, 0, 'V'},
    {0, "--evict-older-than", 1, 'e'},   {'x', "--show-compression", 0, 'x'},
    {'X', "--recompress", 1, 'X'},       {0, "--checksum-file", 1, 'k'},
    {'k', "--get-config", 1, 'g'},       {0, "--print-stats", 0, 'P'},
    {0, "--evict-namespace", 1, 'n'},    {'F', "--max-files", 1, 'F'},
};

static const struct alias *find_alias(const char *a)
{
    for (size_t k = 0; k < sizeof(aliases) / sizeof(aliases[0]); k++) {
        const struct alias *al = &aliases[k];
        if ((al->short_name && a[0] == '-' && a[1] == al->short_name && !a[2]) ||
            (al->long_name && !strcmp(a, al->long_name)))
            return al;
        size_t n = al->long_name ? strlen(al->long_name) : 0;
        if (al->takes_value && n && !strncmp(a, al->long_name, n) && a[n] == '=')
            return al;
    }
    return NULL;
}

/* Edits (insert, delete, change, swap two neighbours) from a to b; both under 32 bytes. */
static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    int prev2[32], prev[32], cur[32];
    assert(la < 32 && lb < 32);
    for (int j = 0; j <= lb; j++)
        prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        memcpy(prev2, prev, sizeof(prev));
        memcpy(prev, cur, sizeof(cur));
    }
    return prev[lb];
}

/*
 * What a user meant by a word that is no verb: a common synonym ("list" for
 * ls), the same word in other case, or a verb one or two edits away
 * (Damerau-Levenshtein; one for names of four letters or fewer). NULL: nothing
 * close enough to name.
 */
static const char *nearest_verb(const char *word)
{
    static const char *const synonyms[][2] = {
        {"list", "ls"},        {"status", "stats"},  {"stat", "stats"},
        {"rm", "clear"},       {"delete", "clear"},  {"purge", "clear"},
        {"show", "inspect"},   {"info", "inspect"},  {"cat", "get"},
        {"evict", "prune"},    {"clean", "prune"},   {"cleanup", "prune"},
        {"check", "verify"},   {"fsck", "verify"},   {"build", "compile"},
        {"exec", "run"},       {"where", "path"},    {"why", "explain"},
    };
    char low[32];
    size_t n = strlen(word);
    if (n == 0 || n >= sizeof(low))
        return NULL;
    for (size_t i = 0; i <= n; i++)
        low[i] = (char)tolower((unsigned char)word[i]);
    for (size_t k = 0; k < sizeof(synonyms) / sizeof(synonyms[0]); k++)
        if (!strcmp(low, synonyms[k][0]))
            return synonyms[k][1];
    const char *best = NULL;
    int best_d = n <= 4 ? 2 : 3;
    for (size_t v = 0; v < sizeof(verbs) / sizeof(verbs[0]); v++) {
        int d = edit_distance(low, verbs[v].name);
        if (d < best_d) {
            best_d = d;
            best = verbs[v].name;
        }
    }
    return best;
}

static int no_verb(const char *name)
{
    const char *meant = nearest_verb(name);
    if (meant)
        return cli_usage_error(NULL, "no verb '%s': did you mean '%s'?", name, meant);
    return cli_usage_error(NULL, "no verb '%s'", name);
}

static int run_verb(const char *name, int argc, char **argv)
{
    for (size_t v = 0; v < sizeof(verbs) / sizeof(verbs[0]); v++)
        if (!strcmp(verbs[v].name, name)) {
            int status = check_config(argc, argv);
            return status >= 0 ? status : verbs[v].fn(argc, argv);
        }
    return no_verb(name);
}

/*
 * Runs a ccache option as the verb it stands for. json: --json was given
 * (-s, -p, -k, -x and --print-stats take it); -sz (ccache shows, then
 * zeroes) comes as code 'S'.
 */
static int run_alias(const struct alias *al, const char *shown, const char *value, int json)
{
    char key[64];
    char *js = json ? "--json" : NULL;
    if (json && !strchr("sSpgxP", al->code))
        return cli_usage_error(NULL, "%s has no --json: give it alone", shown);
    switch (al->code) {
    case 's': return run_verb("stats", 1 + !!js, (char *[]){"stats", js, NULL});
    case 'S': return run_verb("stats", 2 + !!js, (char *[]){"stats", "--zero", js, NULL});
    case 'P': return run_verb("stats", 2, (char *[]){"stats", "--json", NULL});
    case 'g': return run_verb("config", 2 + !!js, (char *[]){"config", (char *)value, js, NULL});
    case 'n':
        return run_verb("prune", 3, (char *[]){"prune", "--namespace", (char *)value, NULL});
    case 'F':
        return cli_usage_error(NULL, "%s %s: kcache caps the cache by size, not by a count of "
                               "entries (-M SIZE); 'kcache prune --max-entries N' keeps N now",
                               shown, value);
    case 'z': return run_verb("stats", 2, (char *[]){"stats", "--zero-only", NULL});
    case 'C': return run_verb("clear", 1, (char *[]){"clear", NULL});
    case 'c': return run_verb("prune", 1, (char *[]){"prune", NULL});
    case 'p': return run_verb("config", 1 + !!js, (char *[]){"config", js, NULL});
    case 'V': return run_verb("version", 1, (char *[]){"version", NULL});
    case 'x':
        return run_verb("recompress", 2 + !!js, (char *[]){"recompress", "--show", js, NULL});
    case 'M':
        return run_verb("config", 3, (char *[]){"config", "max_size", (char *)value, NULL});
    case 'o': {
        const char *eq = strchr(value, '=');
        if (!eq || eq == value || (size_t)(eq - value) >= sizeof(key))
            return cli_usage_error(NULL, "%s '%s': give KEY=VALUE, e.g. %s max_size=8G", shown,
                                   value, shown);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - value), value);
        return run_verb("config", 3, (char *[]){"config", key, (char *)eq + 1, NULL});
    }
    case 'e':
        return run_verb("prune", 3, (char *[]){"prune", "--older-than", (char *)value, NULL});
    case 'X': {
        /* ccache's levels are zstd's; kcache keeps one zstd level and lz4 (kcache(1)). */
        const char *codec = !strcmp(value, "uncompressed") ? "none" : value;
        if (strcmp(codec, "zstd") && strcmp(codec, "lz4") && strcmp(codec, "none"))
            return cli_usage_error(NULL, "%s '%s': give zstd, lz4 or none (kcache has no "
                                   "levels: zstd is level 3)", shown, value);
        int status = run_verb("config", 3, (char *[]){"config", "compression", (char *)codec,
                                                      NULL});
        return status ? status : run_verb("recompress", 1, (char *[]){"recompress", NULL});
    }
    case 'k': return cli_checksum_file(value);
    }
    return CLI_USAGE;
}

/* What the options before the verb said. */
struct before_verb {
    const struct alias *alias;
    const char *alias_value, *alias_shown;
    int max_size_at, json, verbose;
};

/* ccache's -sz: show the counters, then zero them. */
static const struct alias stats_then_zero = {0, NULL, 0, 'S'};

static int take_alias(struct before_verb *b, const struct alias *al, const char *shown)
{
    if (b->alias) {
        char x = b->alias->code, y = al->code;
        if ((x == 's' && y == 'z') || (x == 'z' && y == 's')) {
            b->alias = &stats_then_zero;
            return 0;
        }
        return cli_usage_error(NULL, "%s and %s are two commands: give one", b->alias_shown,
                               shown);
    }
    b->alias = al;
    b->alias_shown = shown;
    return 0;
}

/*
 * An option before the verb that takes a value: --path, --max-size, --dir
 * (ccache's -d) and --config-path. i is where the value is; name is the option
 * as shown.
 */
static int take_global(struct before_verb *b, char which, const char *name, const char *value,
                       int i)
{
    switch (which) {
    case 'p': cli_globals.path = value; break;
    case 'm':
        b->max_size_at = i;
        if (kcache_parse_max_size(&cli_globals.max_size, value))
            return cli_usage_error(NULL, "--max-size: '%s' is not a size (use e.g. 2G; "
                                   "a bare number is GiB; 0 or none: no cap)", value);
        break;
    case 'd':
        if (!*value)
            return cli_usage_error(NULL, "%s needs a directory", name);
        cli_globals.dir = value;
        break;
    case 'c':
        /* ccache's --config-path: the settings file read instead of the user's. */
        if (!*value)
            return cli_usage_error(NULL, "%s needs a file", name);
        if (setenv("KCACHE_CONFIG", value, 1))
            return cli_error("out of memory");
        break;
    }
    return 0;
}

/*
 * Short options as getopt reads them, since ccache users type them so:
 * "-sv" is -s -v, "-M5G" is -M 5G, "-d DIR" or "-dDIR". Returns 0, or the
 * exit status (-1 for --help).
 */
static int short_options(struct before_verb *b, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    for (size_t k = 1; a[k]; k++) {
        char ch = a[k];
        const char *rest = a + k + 1;
        if (ch == 'h')
            return -1;
        if (ch == 'v') {
            b->verbose = 1;
            continue;
        }
        const struct alias *al = NULL;
        for (size_t n = 0; n < sizeof(aliases) / sizeof(aliases[0]) && !al; n++)
            if (aliases[n].short_name == ch)
                al = &aliases[n];
        if (!al && ch != 'd') {
            if (k == 1)
                return cli_usage_error(NULL, "unknown option '%s'", a);
            return cli_usage_error(NULL, "unknown option '-%c' in '%s'", ch, a);
        }
        if (al && !al->takes_value) {
            if (take_alias(b, al, a))
                return CLI_USAGE;
            continue;
        }
        const char *value = *rest ? rest : *i + 1 < argc ? argv[++*i] : NULL;
        char shown[3] = {'-', ch, 0};
        if (!value)
            return cli_usage_error(NULL, "%s needs a value", shown);
        if (!al)
            return take_global(b, 'd', "-d", value, *i) ? CLI_USAGE : 0;
        if (take_alias(b, al, a))
            return CLI_USAGE;
        b->alias_value = value;
        return 0;
    }
    return 0;
}

/* A long global option that takes a value (--dir DIR, --path=FILE): 0, or the exit status. */
static int long_global(struct before_verb *b, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    static const char *const takes_value[] = {"--path", "--max-size", "--dir",
                                              "--config-path"};
    static const char codes[] = "pmdc";
    size_t which = 0;
    const char *eq = strchr(a, '=');
    size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
    while (which < 4 && !(strlen(takes_value[which]) == name_len &&
                          !strncmp(a, takes_value[which], name_len)))
        which++;
    if (which == 4)
        return cli_usage_error(NULL, "unknown option '%s'", a);
    const char *value = eq ? eq + 1 : *i + 1 < argc ? argv[++*i] : NULL;
    if (!value)
        return cli_usage_error(NULL, "%s needs a value", a);
    return take_global(b, codes[which], takes_value[which], value, *i) ? CLI_USAGE : 0;
}

int main(int argc, char **argv)
{
    int i = 1;
    struct before_verb b = {0};
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return CLI_OK;
        }
        if (!strcmp(a, "--version"))
            return cmd_version(1, (char *[]){"version", NULL});
        if (a[1] && a[1] != '-') {
            int status = short_options(&b, argc, argv, &i);
            if (status == -1) {
                usage(stdout);
                return CLI_OK;
            }
            if (status)
                return status;
            continue;
        }
        if (!strcmp(a, "--json") || !strcmp(a, "--verbose")) {
            *(a[2] == 'j' ? &b.json : &b.verbose) = 1;
            continue;
        }
        const struct alias *al = find_alias(a);
        if (al) {
            if (take_alias(&b, al, a))
                return CLI_USAGE;
            if (al->takes_value) {
                const char *eq = strchr(a, '=');
                if (eq)
                    b.alias_value = eq + 1;
                else if (i + 1 < argc)
                    b.alias_value = argv[++i];
                else
                    return cli_usage_error(NULL, "%s needs a value", a);
            }
            continue;
        }
        int status = long_global(&b, argc, argv, &i);
        if (status)
            return status;
    }
    /* --path names the file itself and wins over --dir, as KCACHE_PATH over KCACHE_DIR. */
    if (cli_globals.dir && !cli_globals.path) {
        size_t n = strlen(cli_globals.dir) + sizeof("/kcache.db");
        if (!(cli_globals.dir_path = malloc(n)))
            return cli_error("out of memory");
        snprintf(cli_globals.dir_path, n, "%s/kcache.db", cli_globals.dir);
        cli_globals.path = cli_globals.dir_path;
    }
    if (b.verbose && !(b.alias && strchr("sSP", b.alias->code)))
        return cli_usage_error(NULL, "-v goes with -s (kcache stats shows every counter)");
    if (b.alias) {
        if (i < argc)
            return cli_usage_error(NULL, "%s is a whole command: '%s' after it is not expected",
                                   b.alias_shown, argv[i]);
        return run_alias(b.alias, b.alias_shown, b.alias_value, b.json);
    }
    if (b.json)
        return cli_usage_error(NULL, "--json goes after the verb: 'kcache stats --json'");
    if (i >= argc && b.max_size_at) {
        /* ccache's --max-size SIZE alone saves the cap; before a verb it is this run's. */
        cli_globals.max_size = 0;
        char *size = argv[b.max_size_at];
        if (!strncmp(size, "--max-size=", 11))
            size += 11;
        return run_verb("config", 3, (char *[]){"config", "max_size", size, NULL});
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
        return no_verb(argv[i + 1]);
    }
    return run_verb(name, argc - i, argv + i);
}
