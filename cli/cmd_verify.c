/* kcache verify: SQLite's integrity check and every entry's digests. */
#include <getopt.h>

#include <stdlib.h>
#include <string.h>

#include <kcache/compile.h>
#include <kcache/verify.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache verify [--fix] [--recompile [N]] [--json]\n"
    "\n"
    "Runs SQLite's integrity check on the cache and reads every entry with its\n"
    "inputs, checking their digests (hits are not counted). Reports each damaged\n"
    "entry and exits 1 when anything is wrong. The cache is only read: a damaged\n"
    "entry is deleted the next time it is looked up, or now with --fix.\n"
    "\n"
    "      --fix            delete the damaged entries (and nothing else); counted\n"
    "                       in stats' damaged entries. Exits 0 when that was all\n"
    "      --recompile [N]  also rebuild entries (the N most recently used; all\n"
    "                       without N) from their stored source, headers and options\n"
    "                       with this toolchain, and check the bytes are identical;\n"
    "                       entries that cannot be rebuilt here are skipped, each\n"
    "                       reason said (another toolchain; no source kept)\n"
    "      --json   machine-readable output (see kcache-json(7))\n"
    "  -h, --help   this text\n";

struct verify_ctx {
    int json;
    cli_json j;
};

static void progress(void *userdata, const char *phase, uint64_t done, uint64_t total)
{
    (void)userdata;
    cli_progress(NULL, phase, done, total);
}

static void damaged(void *userdata, const kcache_key *key, const char *message)
{
    struct verify_ctx *ctx = userdata;
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, key);
    if (ctx->json) {
        cli_json_object_begin(&ctx->j, NULL);
        cli_json_string(&ctx->j, "key", hex);
        cli_json_string(&ctx->j, "message", message);
        cli_json_object_end(&ctx->j);
    } else {
        fprintf(stderr, "kcache: damaged: %.16s: %s\n", hex, message);
    }
}


struct recompiled {
    uint64_t checked, identical, different, skipped, failed;
    struct {
        char why[160];
        uint64_t n;
    } skips[8];             /* skipped, by the library's reason */
    size_t n_skips;
};

/*
 * Why an entry was skipped, as the library says it without its details
 * ("made by another toolchain (...)"): counted by that reason, so that the
 * drop-in's entries, which keep no source to rebuild from, are not counted
 * as made by another toolchain.
 */
static void count_skip(struct recompiled *out, const char *message)
{
    char why[160];
    size_t n = strcspn(message, "(;");
    while (n && message[n - 1] == ' ')
        n--;
    snprintf(why, sizeof(why), "%.*s", (int)n, *message ? message : "not rebuildable");
    if (!strcmp(why, "its source was not kept"))
        snprintf(why, sizeof(why), "no source kept to rebuild from: made by the drop-in, or "
                 "from a source in memory");
    size_t i = 0;
    while (i < out->n_skips && strcmp(out->skips[i].why, why))
        i++;
    if (i == out->n_skips && i + 1 < sizeof(out->skips) / sizeof(out->skips[0]))
        snprintf(out->skips[out->n_skips++].why, sizeof(out->skips[0].why), "%s", why);
    else if (i == out->n_skips)
        i = out->n_skips - 1; /* more kinds than slots: counted with the last */
    out->skips[i].n++;
}

/*
 * An entry whose rebuild differs is not what its key says it is (a bundle
 * can carry one whose digests are all consistent), and a lookup
 * would serve it for ever: it is removed, through a writable handle opened
 * the first time one is needed (verify itself only reads).
 */
static void remove_different(kcache_store **writable, const kcache_key *key, char *message,
                             size_t size)
{
    if (!*writable && cli_open_store(writable, 0) != 0) {
        snprintf(message, size, "rebuilt bytes differ from the stored ones; could not open the "
                 "cache to remove it: run 'kcache clear'");
        return;
    }
    int rc = kcache_store_delete(*writable, key);
    if (rc == 0 || rc == KCACHE_ENOTFOUND)
        snprintf(message, size, "rebuilt bytes differ from the stored ones: removed it (it is "
                 "compiled again on its next use)");
    else
        snprintf(message, size, "rebuilt bytes differ from the stored ones; could not remove "
                 "it: %s", kcache_store_errmsg(*writable));
}

/*
 * Rebuilds up to limit entries (0: all), most recently used first. Entries
 * that differ or fail are reported like damaged ones; those made by another
 * toolchain are skipped.
 */
static int recompile_entries(kcache_store *store, uint64_t limit, struct verify_ctx *ctx,
                             struct recompiled *out)
{
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    kcache_compiler *compiler = NULL;
    char err[600];
    co.store = store;
    co.log = cli_log;
    if (kcache_compiler_new(&compiler, &co, err, sizeof(err)) != 0)
        return cli_error("--recompile: %s", err);
    kcache_store *writable = NULL;
    kcache_key *keys = NULL;
    size_t n_keys = 0;
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_ACCESSED;
    f.limit = limit;
    if (kcache_store_list_keys(&keys, &n_keys, store, &f) != 0) {
        kcache_compiler_free(compiler);
        return cli_error("%s", kcache_store_errmsg(store));
    }
    if (ctx->json)
        cli_json_array_begin(&ctx->j, "recompile_problems");
    for (size_t i = 0; i < n_keys; i++) {
        cli_progress(NULL, "recompiling", i, n_keys);
        int same = 0;
        kcache_result *r = NULL;
        int rc = kcache_compiler_recompile(&r, &same, compiler, &keys[i]);
        if (rc == KCACHE_ENOTFOUND) {
            kcache_result_free(r); /* deleted since it was listed (a prune elsewhere) */
            continue;
        }
        out->checked++;
        if (rc == KCACHE_ENOTSUP) {
            out->skipped++;
            count_skip(out, r ? r->message : "");
        } else if (rc == 0 && same) {
            out->identical++;
        } else {
            char message[700];
            if (rc == 0)
                remove_different(&writable, &keys[i], message, sizeof(message));
            else
                snprintf(message, sizeof(message), "rebuild failed: %s",
                         r && r->message[0] ? r->message : kcache_strerror(rc));
            if (rc == 0)
                out->different++;
            else
                out->failed++;
            damaged(ctx, &keys[i], message);
        }
        kcache_result_free(r);
    }
    cli_progress(NULL, "recompiling", n_keys, n_keys);
    if (ctx->json)
        cli_json_array_end(&ctx->j);
    kcache_keys_free(keys);
    kcache_compiler_free(compiler);
    kcache_store_close(writable);
    return 0;
}

/* What --recompile found, as kcache-json(7) describes it. */
static void json_recompiled(cli_json *j, const struct recompiled *rec)
{
    cli_json_object_begin(j, "recompile");
    cli_json_uint(j, "checked", rec->checked);
    cli_json_uint(j, "identical", rec->identical);
    cli_json_uint(j, "different", rec->different);
    cli_json_uint(j, "failed", rec->failed);
    cli_json_uint(j, "skipped", rec->skipped);
    cli_json_object_begin(j, "skipped_by_reason");
    for (size_t i = 0; i < rec->n_skips; i++)
        cli_json_uint(j, rec->skips[i].why, rec->skips[i].n);
    cli_json_object_end(j);
    cli_json_object_end(j);
}

static void print_recompiled(const struct recompiled *rec)
{
    /* "2 entries: 1 identical, 1 skipped (...)": only the parts that happened. */
    const struct {
        uint64_t n;
        const char *what;
    } parts[] = {
        {rec->identical, "identical"},
        {rec->different, "different"},
        {rec->failed, "failed"},
    };
    char n[48];
    printf("Recompiled:       %s", cli_plural(n, sizeof(n), rec->checked, "entry", "entries"));
    const char *sep = ": ";
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        if (parts[i].n) {
            printf("%s%llu %s", sep, (unsigned long long)parts[i].n, parts[i].what);
            sep = ", ";
        }
    for (size_t i = 0; i < rec->n_skips; i++) {
        printf("%s%llu skipped (%s)", sep, (unsigned long long)rec->skips[i].n,
               rec->skips[i].why);
        sep = ", ";
    }
    putchar('\n');
}

int cmd_verify(int argc, char **argv)
{
    static const struct option options[] = {
        {"fix", no_argument, NULL, 'f'},
        {"recompile", optional_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    struct verify_ctx ctx = {0};
    int c, recompile = 0, fix = 0;
    uint64_t limit = 0;
    cli_options opts = CLI_OPTIONS(argc, argv, "verify", usage_text, "h", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'j': ctx.json = 1; break;
        case 'f': fix = 1; break;
        case 'r': {
            /* N may follow as --recompile=N or as the next word. */
            const char *n = optarg;
            if (!n && optind < argc && argv[optind][0] >= '0' && argv[optind][0] <= '9')
                n = argv[optind++];
            recompile = 1;
            if (n && kcache_parse_count(&limit, n, 1, UINT64_MAX))
                return cli_usage_error("verify", "--recompile takes a positive count, not '%s'",
                                       n);
            break;
        }
        }
    }
    if (c < 0)
        return opts.status;
    if (cli_extra_arg(&opts, 0))
        return CLI_USAGE;
    kcache_store *store;
    /* Read-only unless asked to fix: a writable store deletes what it finds damaged. */
    if (cli_open_existing(&store, !fix))
        return CLI_FAIL;
    if (!store) {
        if (ctx.json)
            printf("{\"damaged\": [], \"ok\": true, \"integrity_ok\": true, "
                   "\"integrity\": \"ok\", \"entries\": 0, \"damaged_entries\": 0, \"deleted\": 0, "
                   "\"bytes\": 0}\n");
        return cli_no_cache("nothing to verify");
    }
    if (ctx.json) {
        cli_json_init(&ctx.j, stdout);
        cli_json_object_begin(&ctx.j, NULL);
        cli_json_array_begin(&ctx.j, "damaged");
    }
    kcache_verify_result r = KCACHE_VERIFY_RESULT_INIT;
    int rc = kcache_store_verify(&r, store, progress, damaged, &ctx);
    struct recompiled rec = {0};
    if (ctx.json)
        cli_json_array_end(&ctx.j);
    int rec_rc = !rc && recompile ? recompile_entries(store, limit, &ctx, &rec) : 0;
    /* With --fix, damaged entries found and deleted are what was asked for. */
    int ok = !rc && !rec_rc && r.integrity_ok && (fix || r.damaged == 0) && !rec.different &&
             !rec.failed;
    if (ctx.json) {
        if (recompile)
            json_recompiled(&ctx.j, &rec);
        cli_json_bool(&ctx.j, "ok", ok);
        cli_json_bool(&ctx.j, "integrity_ok", !rc && r.integrity_ok);
        cli_json_string(&ctx.j, "integrity", rc ? kcache_store_errmsg(store) : r.integrity);
        cli_json_uint(&ctx.j, "entries", r.entries);
        cli_json_uint(&ctx.j, "damaged_entries", r.damaged);
        cli_json_uint(&ctx.j, "deleted", fix ? r.damaged : 0);
        cli_json_uint(&ctx.j, "bytes", r.bytes);
        cli_json_object_end(&ctx.j);
        cli_json_finish(&ctx.j);
    }
    if (rc) {
        cli_error("%s", kcache_store_errmsg(store));
    } else if (!ctx.json) {
        char a[32];
        printf("Integrity check:  %s\n", r.integrity_ok ? "ok" : r.integrity);
        printf("Entries checked:  %llu (%s)\n", (unsigned long long)r.entries,
               kcache_format_size(a, sizeof(a), r.bytes));
        printf("Damaged entries:  %llu%s\n", (unsigned long long)r.damaged,
               fix && r.damaged ? " (deleted)" : "");
        if (recompile)
            print_recompiled(&rec);
        /* What each finding needs, and which command does it. */
        if (!r.integrity_ok)
            fprintf(stderr, "kcache: the database file is damaged: 'kcache clear' sets it aside "
                            "and starts an empty cache now (the next command that writes does "
                            "the same once no other process has the cache open)\n");
        else if (r.damaged && !fix)
            fprintf(stderr, "kcache: %llu damaged %s: 'kcache verify --fix' deletes %s now "
                            "(each is also deleted on its next lookup: a miss, then compiled "
                            "again)\n", (unsigned long long)r.damaged,
                    r.damaged == 1 ? "entry" : "entries", r.damaged == 1 ? "it" : "them");
    }
    kcache_store_close(store);
    return ok ? CLI_OK : CLI_FAIL;
}
