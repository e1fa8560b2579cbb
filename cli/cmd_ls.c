/* kcache ls: the entries, one a line, most recently used first. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache ls [--arch A] [--kind K] [--namespace NS]\n"
    "                 [--sort accessed|size|created|hits] [--limit N] [--json]\n"
    "\n"
    "Lists entries: key (first 16 digits), kind, architecture, size, hits, last use\n"
    "and source name.\n"
    "\n"
    "      --arch A     only this architecture (sm_90, compute_90a, ...)\n"
    "      --kind K     only this kind: cubin, ptx, ltoir or data (what callers\n"
    "                   store under their own keys)\n"
    "      --namespace NS  only the entries a caller stored under its own keys in\n"
    "                   NS (cuda.core, triton, ...): kind data, NS in the ARCH column\n"
    "      --sort S     accessed (default: most recent first), size, created, hits\n"
    "      --limit N    at most N entries\n"
    "      --json       machine-readable output (see kcache-json(7))\n"
    "  -h, --help       this text\n";

struct ls_ctx {
    int json;
    cli_json j;
};

static int print_entry(void *userdata, const kcache_entry *e)
{
    struct ls_ctx *ctx = userdata;
    char hex[KCACHE_KEY_HEX_SIZE], a[32], b[32], t[32];
    const char *kind = kcache_kind_name(e->kind);
    kcache_key_hex(hex, &e->key);
    if (ctx->json) {
        cli_json *j = &ctx->j;
        cli_json_object_begin(j, NULL);
        cli_json_string(j, "key", hex);
        cli_json_string(j, "kind", kind ? kind : "");
        cli_json_string(j, "arch", e->arch);
        cli_json_string(j, "name", e->name);
        cli_json_uint(j, "size", e->size);
        cli_json_uint(j, "stored_size", e->stored_size);
        cli_json_uint(j, "hits", e->hits);
        cli_json_int(j, "created_ms", e->created_at);
        cli_json_int(j, "accessed_ms", e->accessed_at);
        cli_json_uint(j, "compile_ns", e->compile_ns);
        cli_json_string(j, "toolchain", e->toolchain);
        cli_json_object_end(j);
    } else {
        printf("%.16s  %-5s  %-12s %10s %10s %6llu  %-19s  %s\n", hex, kind ? kind : "?",
               cli_safe(e->arch), kcache_format_size(a, sizeof(a), e->size),
               kcache_format_size(b, sizeof(b), e->stored_size), (unsigned long long)e->hits,
               cli_format_time(t, sizeof(t), e->accessed_at), cli_safe(e->name));
    }
    return 0;
}

int cmd_ls(int argc, char **argv)
{
    static const struct option options[] = {
        {"arch", required_argument, NULL, 'a'},
        {"kind", required_argument, NULL, 'k'},
        {"namespace", required_argument, NULL, 'N'},
        {"sort", required_argument, NULL, 's'},
        {"limit", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    static const struct {
        const char *name;
        kcache_sort sort;
    } sorts[] = {
        {"accessed", KCACHE_SORT_ACCESSED},
        {"size", KCACHE_SORT_SIZE},
        {"created", KCACHE_SORT_CREATED},
        {"hits", KCACHE_SORT_HITS},
    };
    kcache_filter f = KCACHE_FILTER_INIT;
    struct ls_ctx ctx = {0};
    const char *ns = NULL;
    int c;
    cli_options opts = CLI_OPTIONS(argc, argv, "ls", usage_text, ":h", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'a': f.arch = optarg; break;
        case 'k':
            if (kcache_kind_parse(&f.kind, optarg))
                return cli_usage_error("ls", "--kind '%s': use cubin, ptx, ltoir or data", optarg);
            break;
        case 'N': ns = optarg; break;
        case 's': {
            size_t i = 0;
            while (i < sizeof(sorts) / sizeof(sorts[0]) && strcmp(sorts[i].name, optarg))
                i++;
            if (i == sizeof(sorts) / sizeof(sorts[0]))
                return cli_usage_error("ls", "--sort '%s': use accessed, size, created or hits",
                                       optarg);
            f.sort = sorts[i].sort;
            break;
        }
        case 'n':
            if (kcache_parse_count(&f.limit, optarg, 1, UINT64_MAX))
                return cli_usage_error("ls", "--limit '%s' is not a positive number", optarg);
            break;
        case 'j': ctx.json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (cli_extra_arg(&opts, 0))
        return CLI_USAGE;
    if (ns && cli_namespace_filter(&f.arch, &f.kind, "ls", ns))
        return CLI_USAGE;
    kcache_store *store;
    if (cli_open_store_to_read(&store))
        return CLI_FAIL;
    if (!store) {
        /* Nothing to list is an empty list, not a failure. */
        if (ctx.json)
            printf("{\"entries\": []}\n");
        return cli_no_cache(NULL);
    }
    if (ctx.json) {
        cli_json_init(&ctx.j, stdout);
        cli_json_object_begin(&ctx.j, NULL);
        cli_json_array_begin(&ctx.j, "entries");
    } else {
        printf("%-16s  %-5s  %-12s %10s %10s %6s  %-19s  %s\n", "KEY", "KIND", "ARCH", "SIZE",
               "STORED", "HITS", "LAST USED", "NAME");
    }
    int rc = kcache_store_list(store, &f, print_entry, &ctx);
    if (ctx.json) {
        cli_json_array_end(&ctx.j);
        cli_json_object_end(&ctx.j);
        cli_json_finish(&ctx.j);
    }
    int ret = rc ? cli_error("%s", kcache_store_errmsg(store)) : CLI_OK;
    kcache_store_close(store);
    return ret;
}
