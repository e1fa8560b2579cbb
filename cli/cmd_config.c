/* kcache config: every setting, its value and where it came from; writes the config file. */
#include <ctype.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <kcache/config.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache config [--json]               list every setting\n"
    "       kcache config KEY [--json]           show one\n"
    "       kcache config KEY VALUE              set it in the config file\n"
    "       kcache config --unset KEY            remove it from the config file\n"
    "\n"
    "A setting comes from a flag, else the environment, else the settings files,\n"
    "else the default. The files, each later one winning: /etc/kcache.conf, the\n"
    "user's ($KCACHE_CONFIG, else $XDG_CONFIG_HOME/kcache/kcache.conf, default\n"
    "~/.config/kcache/kcache.conf), and the config file (kcache.conf beside the\n"
    "database), which KEY VALUE writes. A file another user could have written\n"
    "is ignored, with a warning. WHERE names each value's FILE:LINE.\n"
    "Settings: dir, path, max_size, busy_timeout, disable, compression, remote,\n"
    "remote_read_only, remote_connect_timeout, remote_timeout, remote_prefix,\n"
    "remote_secret, import_require_signature.\n"
    "compression (zstd, lz4 or none) applies to what is written from then on;\n"
    "entries already stored keep theirs and are read whatever it is.\n"
    "Listings hide remote_secret and the password in remote; name the setting to see it.\n"
    "dir and path are not kept in the file: use 'kcache --dir DIR' or KCACHE_DIR.\n"
    "A max_size of 0 or none means no cap. Sizes print in binary units whatever\n"
    "set them.\n"
    "\n"
    "      --unset KEY  remove KEY from the config file\n"
    "      --json       machine-readable output (see kcache-json(7))\n"
    "  -h, --help       this text\n";

/* What a listing shows: secrets hidden, since listings end up in CI logs. */
static const char *shown(char *buf, size_t size, const kcache_setting *s)
{
    /* Sizes in the one form every verb prints ("2.00 GiB", "none"), whichever
     * route set them ("2G", "2147483648", "2048M"). */
    uint64_t cap;
    if (!strcmp(s->name, "max_size") && kcache_parse_max_size(&cap, s->value) == 0)
        return cli_format_cap(buf, size, cap);
    if ((!strcmp(s->name, "remote_secret") || !strcmp(s->name, "remote_token")) && s->value[0])
        return "(set)";
    /* scheme://user:password@host/...: the password is in the part before the path. */
    const char *start = strstr(s->value, "://");
    start = start ? start + 3 : s->value;
    const char *at = NULL;
    for (const char *p = start; *p && *p != '/'; p++)
        if (*p == '@')
            at = p;
    const char *colon = at ? memchr(start, ':', (size_t)(at - start)) : NULL;
    if (!strcmp(s->name, "remote") && at && colon) {
        snprintf(buf, size, "%.*s:***%s", (int)(colon - s->value), s->value, at);
        return buf;
    }
    return s->value;
}

static void json_setting(cli_json *j, const kcache_setting *s)
{
    char buf[1024];
    uint64_t cap;
    cli_json_object_begin(j, NULL);
    cli_json_string(j, "name", s->name);
    cli_json_string(j, "value", shown(buf, sizeof(buf), s));
    if (!strcmp(s->name, "max_size") && kcache_parse_max_size(&cap, s->value) == 0) {
        if (cap == UINT64_MAX)
            cli_json_null(j, "bytes");
        else
            cli_json_uint(j, "bytes", cap);
    }
    /* As written, but for a secret: hidden there too (a size is shown as read above). */
    cli_json_string(j, "as_written",
                    strcmp(s->name, "max_size") ? shown(buf, sizeof(buf), s) : s->value);
    cli_json_string(j, "source", kcache_config_source_name(s->source));
    cli_json_string(j, "origin", s->origin);
    cli_json_string(j, "env", s->env);
    cli_json_string(j, "description", s->description);
    cli_json_object_end(j);
}

/* The table's width: a line of a terminal or a mail, whatever the paths. */
enum { TABLE_WIDTH = 100, FROM_W = 12, VALUE_MAX = 44 };

/* Prints text in exactly width columns (padded), its middle elided when longer. */
static int fit(const char *text, int width, int pad)
{
    int n = (int)strlen(text);
    if (n <= width) {
        printf("%-*s", pad ? width : 0, text);
        return 0;
    }
    int head = (width - 3) / 2, tail = width - 3 - head;
    printf("%.*s...%s", head, text, text + n - tail);
    return 1;
}

static void print_table(const kcache_config *cfg)
{
    char buf[1024];
    int value_w = 5, name_w = 7;
    for (size_t i = 0; i < kcache_config_count(cfg); i++) {
        const kcache_setting *t = kcache_config_setting(cfg, i);
        int n = (int)strlen(shown(buf, sizeof(buf), t)), m = (int)strlen(t->name);
        value_w = n > value_w ? n : value_w;
        name_w = m > name_w ? m : name_w;
    }
    value_w = value_w < VALUE_MAX ? value_w : VALUE_MAX;
    int where_w = TABLE_WIDTH - name_w - value_w - FROM_W - 3;
    int shortened = 0;
    printf("%-*s %-*s %-*s %s\n", name_w, "SETTING", value_w, "VALUE", FROM_W, "FROM", "WHERE");
    for (size_t i = 0; i < kcache_config_count(cfg); i++) {
        const kcache_setting *t = kcache_config_setting(cfg, i);
        printf("%-*s ", name_w, t->name);
        shortened |= fit(shown(buf, sizeof(buf), t), value_w, 1);
        printf(" %-*s ", FROM_W, kcache_config_source_name(t->source));
        shortened |= fit(t->origin, where_w, 0);
        putchar('\n');
    }
    printf("\nConfig file: %s\n", kcache_config_file(cfg));
    if (shortened)
        printf("(long values shortened with ...: 'kcache config NAME' prints one whole)\n");
}

/* Whether the config file has a line for key ("key = value"). */
static int in_file(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    char line[4096];
    size_t n = strlen(key);
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        const char *p = line + strspn(line, " \t");
        found = !strncmp(p, key, n) && (p[n] == ' ' || p[n] == '\t' || p[n] == '=');
    }
    if (f)
        fclose(f);
    return found;
}

static int config_verb(int argc, char **argv);

/*
 * A word such as "-5G" is a value, not options: it goes after a "--", behind
 * the other words, so that "config max_size -5G" says -5G is not a size.
 * Returns argv itself when there is nothing to move or a "--" already, else
 * an array to free.
 */
static char **values_last(int argc, char **argv)
{
    int moved = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            return argv;
        moved += argv[i][0] == '-' && (isdigit((unsigned char)argv[i][1]) || argv[i][1] == '.');
    }
    char **v = moved ? calloc((size_t)argc + 2, sizeof(*v)) : NULL;
    if (!v)
        return argv;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = pass ? 1 : 0; i < argc; i++) {
            int value = i && argv[i][0] == '-' &&
                        (isdigit((unsigned char)argv[i][1]) || argv[i][1] == '.');
            if (value == pass)
                v[n++] = argv[i];
        }
        if (!pass)
            v[n++] = "--";
    }
    return v;
}

int cmd_config(int argc, char **argv)
{
    char **given = argv;
    argv = values_last(argc, argv);
    argc += argv != given;
    int ret = config_verb(argc, argv);
    if (argv != given)
        free(argv);
    return ret;
}

static int config_verb(int argc, char **argv)
{
    static const struct option options[] = {
        {"unset", required_argument, NULL, 'u'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    const char *unset = NULL;
    int json = 0, c;
    cli_options opts = CLI_OPTIONS(argc, argv, "config", usage_text, ":h", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'u': unset = optarg; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    int n_args = argc - optind;
    if (n_args > 2 || (unset && n_args > 0))
        return cli_usage_error("config", "unexpected argument '%s'", argv[argc - 1]);
    const char *key = n_args > 0 ? argv[optind] : unset;
    const char *value = n_args > 1 ? argv[optind + 1] : NULL;

    kcache_config *cfg = NULL;
    if (cli_config_load(&cfg))
        return CLI_FAIL;
    int ret = CLI_OK;
    const kcache_setting *s = key ? kcache_config_find(cfg, key) : NULL;
    if (key && !s && strchr(key, '=') && !value && !unset) {
        ret = cli_usage_error("config", "no setting '%s': to set one, give KEY VALUE: 'kcache "
                              "config %.*s %s'", key, (int)(strchr(key, '=') - key), key,
                              strchr(key, '=') + 1);
        goto out;
    }
    if (key && !s) {
        ret = cli_usage_error("config", "no setting '%s' (settings: dir, path, max_size, "
                                        "busy_timeout, disable, compression, remote, "
                                        "remote_read_only, remote_connect_timeout, "
                                        "remote_timeout, remote_prefix, remote_secret, "
                                        "import_require_signature)",
                              key);
        goto out;
    }
    if (unset && !in_file(kcache_config_file(cfg), key)) {
        if (!json)
            printf("%s was not set in %s: nothing to remove\n", key, kcache_config_file(cfg));
        goto out;
    }
    if (value || unset) {
        int rc = kcache_config_set(cfg, key, value);
        if (rc) {
            /* A value kcache cannot take is a mistake on the command line. */
            ret = rc == KCACHE_EINVAL ? cli_usage_error("config", "%s", kcache_config_errmsg(cfg))
                                      : cli_error("%s", kcache_config_errmsg(cfg));
            goto out;
        }
        if (s->source > KCACHE_CONFIG_FILE)
            cli_warn("%s is set by %s, which wins over the config file", key, s->origin);
        char buf[64];
        kcache_setting shown_as = *s;
        shown_as.value = value ? value : "";
        if (!json && value)
            printf("Set %s = %s in %s\n", key, shown(buf, sizeof(buf), &shown_as),
                   kcache_config_file(cfg));
        else if (!json)
            printf("Removed %s from %s\n", key, kcache_config_file(cfg));
        goto out;
    }
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        if (s) {
            json_setting(&j, s);
        } else {
            cli_json_object_begin(&j, NULL);
            cli_json_string(&j, "config_file", kcache_config_file(cfg));
            cli_json_array_begin(&j, "settings");
            for (size_t i = 0; i < kcache_config_count(cfg); i++)
                json_setting(&j, kcache_config_setting(cfg, i));
            cli_json_array_end(&j);
            cli_json_array_begin(&j, "ignored");
            for (size_t i = 0; kcache_config_ignored(cfg, i); i++)
                cli_json_string(&j, NULL, kcache_config_ignored(cfg, i));
            cli_json_array_end(&j);
            cli_json_object_end(&j);
        }
        cli_json_finish(&j);
    } else if (s) {
        /* Named, a setting is shown whole (secrets too); sizes in the one form. */
        char buf[64];
        printf("%s\n", strcmp(s->name, "max_size") ? s->value : shown(buf, sizeof(buf), s));
    } else {
        print_table(cfg);
    }
out:
    kcache_config_free(cfg);
    return ret;
}
