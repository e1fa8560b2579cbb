/* kcache config: every setting, its value and where it came from; writes the config file. */
#include <getopt.h>
#include <string.h>

#include <kcache/config.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache config [--json]               list every setting\n"
    "       kcache config KEY [--json]           show one\n"
    "       kcache config KEY VALUE              set it in the config file\n"
    "       kcache config --unset KEY            remove it from the config file\n"
    "\n"
    "A setting comes from a flag, else the environment, else the config file\n"
    "(kcache.conf beside the database), else the default.\n"
    "Settings: dir, path, max_size, busy_timeout, disable, remote, remote_read_only,\n"
    "remote_connect_timeout, remote_timeout, remote_prefix, remote_secret.\n"
    "Listings hide remote_secret and the password in remote; name the setting to see it.\n"
    "\n"
    "      --unset KEY  remove KEY from the config file\n"
    "      --json       machine-readable output (fields documented in the README)\n"
    "  -h, --help       this text\n";

/* What a listing shows: secrets hidden, since listings end up in CI logs. */
static const char *shown(char *buf, size_t size, const kcache_setting *s)
{
    if (!strcmp(s->name, "remote_secret") && s->value[0])
        return "(set)";
    const char *at = strrchr(s->value, '@');
    const char *colon = at ? memchr(s->value + 8, ':', (size_t)(at - s->value - 8)) : NULL;
    if (!strcmp(s->name, "remote") && at && colon && !strncmp(s->value, "redis://", 8)) {
        snprintf(buf, size, "%.*s:***%s", (int)(colon - s->value), s->value, at);
        return buf;
    }
    return s->value;
}

static void json_setting(cli_json *j, const kcache_setting *s)
{
    char buf[1024];
    cli_json_object_begin(j, NULL);
    cli_json_string(j, "name", s->name);
    cli_json_string(j, "value", shown(buf, sizeof(buf), s));
    cli_json_string(j, "source", kcache_config_source_name(s->source));
    cli_json_string(j, "origin", s->origin);
    cli_json_string(j, "env", s->env);
    cli_json_string(j, "description", s->description);
    cli_json_object_end(j);
}

static int load(kcache_config **out)
{
    kcache_config_override o[2];
    size_t n = 0;
    char size[32], err[512];
    if (cli_globals.path)
        o[n++] = (kcache_config_override){"path", cli_globals.path};
    if (cli_globals.max_size) {
        snprintf(size, sizeof(size), "%llu", (unsigned long long)cli_globals.max_size);
        o[n++] = (kcache_config_override){"max_size", size};
    }
    if (kcache_config_load(out, o, n, err, sizeof(err)))
        return cli_error("%s", err);
    return CLI_OK;
}

int cmd_config(int argc, char **argv)
{
    static const struct option options[] = {
        {"unset", required_argument, NULL, 'u'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *unset = NULL;
    int json = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (c) {
        case 'u': unset = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        case ':': return cli_usage_error("config", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("config", "unknown option '%s'", argv[optind - 1]);
        }
    }
    int n_args = argc - optind;
    if (n_args > 2 || (unset && n_args > 0))
        return cli_usage_error("config", "unexpected argument '%s'", argv[argc - 1]);
    const char *key = n_args > 0 ? argv[optind] : unset;
    const char *value = n_args > 1 ? argv[optind + 1] : NULL;

    kcache_config *cfg = NULL;
    if (load(&cfg))
        return CLI_FAIL;
    int ret = CLI_OK;
    const kcache_setting *s = key ? kcache_config_find(cfg, key) : NULL;
    if (key && !s) {
        ret = cli_usage_error("config", "no setting '%s' (settings: dir, path, max_size, "
                                        "busy_timeout, disable)",
                              key);
        goto out;
    }
    if (value || unset) {
        if (kcache_config_set(cfg, key, value)) {
            ret = cli_error("%s", kcache_config_errmsg(cfg));
            goto out;
        }
        if (s->source > KCACHE_CONFIG_FILE)
            cli_warn("%s is set by %s, which wins over the config file", key, s->origin);
        if (!json)
            printf("%s %s in %s\n", value ? "Set" : "Removed", key, kcache_config_file(cfg));
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
            cli_json_object_end(&j);
        }
        cli_json_finish(&j);
    } else if (s) {
        printf("%s\n", s->value);
    } else {
        char buf[1024];
        printf("%-22s %-24s %-12s %s\n", "SETTING", "VALUE", "FROM", "WHERE");
        for (size_t i = 0; i < kcache_config_count(cfg); i++) {
            const kcache_setting *t = kcache_config_setting(cfg, i);
            printf("%-22s %-24s %-12s %s\n", t->name, shown(buf, sizeof(buf), t),
                   kcache_config_source_name(t->source), t->origin);
        }
        printf("\nConfig file: %s\n", kcache_config_file(cfg));
    }
out:
    kcache_config_free(cfg);
    return ret;
}
