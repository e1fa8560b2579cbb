/* kcache remote: check the shared tier, push the local cache up, pull entries down. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <kcache/config.h>
#include <kcache/remote.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache remote [check] [--remote URL] [--json]\n"
    "       kcache remote push [--arch A] [--since AGE] [--remote URL] [--json]\n"
    "       kcache remote pull [--arch A] [--since AGE] [--remote URL] [--json]\n"
    "\n"
    "The shared tier: a Redis server several caches share (see the README).\n"
    "  check  connect now and show the latency, the server, whether it authenticated\n"
    "         us, and its eviction policy (a warning when it would refuse writes)\n"
    "  push   send local entries to the remote\n"
    "  pull   fetch the remote's entries into the local cache, each checked\n"
    "\n"
    "      --remote URL  redis://[user:password@]host:port[/db], s3://bucket/prefix or\n"
    "                    http(s)://[user:password@]host/path\n"
    "                    (else KCACHE_REMOTE or remote in kcache.conf)\n"
    "      --arch A      only entries of this architecture (sm_90, ...)\n"
    "      --since AGE   only entries created in the last AGE (7d, 12h)\n"
    "      --json        machine-readable output\n"
    "  -h, --help        this text\n"
    "\n"
    "Exit status: 0 done, 1 the remote failed (the message says what), 2 usage.\n";

static void progress(void *userdata, const char *phase, uint64_t done, uint64_t total)
{
    (void)phase; /* the verb's own word ("pulling from HOST") says more */
    cli_progress(NULL, (const char *)userdata, done, total);
}

/* The tiers a miss goes through, in order (doc/shared-tier.md). */
static void print_chain(const kcache_remote *remote)
{
    kcache_config *c = NULL;
    char err[512], shared[1100] = "";
    if (kcache_config_load(&c, NULL, 0, err, sizeof(err)) == 0) {
        const kcache_setting *d = kcache_config_find(c, "shared");
        const kcache_setting *ro = kcache_config_find(c, "shared_read_only");
        if (d && d->value[0] && strcmp(d->value, "none"))
            snprintf(shared, sizeof(shared), "shared %s%s -> ", cli_safe(d->value),
                     ro && !strcmp(ro->value, "true") ? " (read-only)" : "");
    }
    kcache_config_free(c);
    printf("Chain:      local -> %sremote%s\n", shared,
           kcache_remote_read_only(remote) ? " (read-only)" : "");
}

static int check(kcache_remote *remote, int json)
{
    kcache_remote_info info = KCACHE_REMOTE_INFO_INIT;
    if (kcache_remote_check(&info, remote) != 0)
        return cli_error("%s", kcache_remote_errmsg(remote));
    char a[64], b[64];
    int noeviction = !strcmp(info.policy, "noeviction");
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "url", kcache_remote_url(remote));
        cli_json_uint(&j, "latency_ns", info.latency_ns);
        cli_json_string(&j, "server_version", info.server_version);
        cli_json_bool(&j, "authenticated", info.authenticated);
        cli_json_string(&j, "maxmemory_policy", info.policy);
        cli_json_uint(&j, "maxmemory", info.maxmemory);
        cli_json_uint(&j, "used_memory", info.used_memory);
        cli_json_uint(&j, "entries", info.entries);
        cli_json_bool(&j, "refuses_writes", info.refuses_writes);
        cli_json_bool(&j, "read_only", kcache_remote_read_only(remote));
        cli_json_uint(&j, "backoff_s", (uint64_t)info.down_for_s);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        print_chain(remote);
        printf("Remote:     %s%s\n", kcache_remote_url(remote),
               kcache_remote_read_only(remote) ? " (read-only)" : "");
        int redis = !strncmp(kcache_remote_url(remote), "redis://", 8);
        printf("Server:     %s%s, round trip %s\n", redis ? "Redis " : "", info.server_version,
               cli_format_duration(a, sizeof(a), info.latency_ns));
        printf("Auth:       %s\n", !info.authenticated ? "none"
                                   : redis            ? "user/password accepted"
                                                      : "credentials accepted");
        if (redis) {
            printf("Memory:     %s used of %s, policy %s\n",
                   kcache_format_size(a, sizeof(a), info.used_memory),
                   info.maxmemory ? kcache_format_size(b, sizeof(b), info.maxmemory)
                                  : "no limit",
                   info.policy);
            printf("Entries:    %llu indexed\n", (unsigned long long)info.entries);
        } else {
            printf("Eviction:   %s (kcache never lists the bucket on a hit)\n", info.policy);
        }
        if (info.down_for_s)
            printf("Back-off:   lifted (compiles had left it alone after a failure, %d s to "
                   "go)\n",
                   info.down_for_s);
    }
    if (info.refuses_writes)
        cli_warn("the server is full and will refuse writes (noeviction): set "
                 "maxmemory-policy allkeys-lru");
    else if (noeviction)
        cli_warn("maxmemory-policy is noeviction: once full, the server refuses writes "
                 "instead of evicting; set allkeys-lru");
    return CLI_OK;
}

static int transfer(kcache_remote *remote, int pull, const kcache_filter *f, int json)
{
    kcache_transfer t = KCACHE_TRANSFER_INIT;
    const char *phase = pull ? "pull" : "push";
    int rc = pull ? kcache_remote_pull(&t, remote, f, progress, (void *)phase)
                  : kcache_remote_push(&t, remote, f, progress, (void *)phase);
    char a[64];
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "url", kcache_remote_url(remote));
        cli_json_bool(&j, "ok", rc == 0);
        cli_json_uint(&j, pull ? "pulled" : "pushed", t.entries);
        cli_json_uint(&j, "present", t.present);
        cli_json_uint(&j, "rejected", t.rejected);
        cli_json_uint(&j, "conflicts", t.conflicts);
        cli_json_uint(&j, "bytes", t.bytes);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char n[64];
        printf("%s %s (%s)", pull ? "Pulled" : "Pushed",
               cli_plural(n, sizeof(n), t.entries, "entry", "entries"),
               kcache_format_size(a, sizeof(a), t.bytes));
        if (pull)
            printf(", %llu already here, %llu rejected by the checks",
                   (unsigned long long)t.present, (unsigned long long)t.rejected);
        if (t.conflicts) /* each said with both digests in a warning above */
            printf(", %llu in conflict with this cache (its entries kept)",
                   (unsigned long long)t.conflicts);
        printf("\n");
    }
    if (rc)
        return cli_error("%s", kcache_remote_errmsg(remote));
    return CLI_OK;
}

int cmd_remote(int argc, char **argv)
{
    static const struct option options[] = {
        {"remote", required_argument, NULL, 'r'},
        {"arch", required_argument, NULL, 'a'},
        {"since", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    kcache_filter f = KCACHE_FILTER_INIT;
    const char *url = NULL;
    int json = 0, status, c;
    cli_options opts = CLI_OPTIONS(argc, argv, "remote", usage_text, ":h", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'r':
            if (!cli_remote_url_ok(optarg))
                return cli_usage_error("remote", "--remote '%s': expected " CLI_REMOTE_URLS,
                                       optarg);
            url = optarg;
            break;
        case 'a': f.arch = optarg; break;
        case 's':
            if ((status = cli_parse_since(&f, "remote", optarg)) >= 0)
                return status;
            break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    const char *action = optind < argc ? argv[optind++] : "check";
    if (cli_extra_arg(&opts, 0))
        return CLI_USAGE;
    int pull = !strcmp(action, "pull");
    if (strcmp(action, "check") && strcmp(action, "push") && !pull)
        return cli_usage_error("remote", "unknown action '%s': use check, push or pull", action);
    if (!strcmp(action, "check") && (f.arch || f.created_since))
        return cli_usage_error("remote", "--arch and --since go with push or pull");
    kcache_store *store;
    if (cli_open_store(&store, 0))
        return CLI_FAIL;
    kcache_remote *remote = NULL;
    char err[600];
    int ret;
    if (kcache_remote_open(&remote, store, url, err, sizeof(err)) != 0)
        ret = cli_error("%s", err);
    else if (!strcmp(action, "check"))
        ret = check(remote, json);
    else
        ret = transfer(remote, pull, &f, json);
    kcache_remote_close(remote);
    kcache_store_close(store);
    return ret;
}
