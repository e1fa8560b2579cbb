/* kcache import: check a bundle whole, then merge it, keeping the newer of two entries. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kcache/bundle.h>
#include <kcache/compile.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache import IN.kcache [--dry-run] [--require-signature] [--resolve-conflicts]\n"
    "                     [--json]\n"
    "\n"
    "Checks a bundle written by 'kcache export' (application id, schema, SQLite\n"
    "integrity, every digest, each entry's kind and architecture against its key)\n"
    "and only then merges it into the cache. For a key in both with the same bytes,\n"
    "the entry compiled later is kept. For a key in both with other bytes (a\n"
    "conflict), the cache's entry is kept, and the conflict is counted and said with\n"
    "both digests. A bundle signed with remote_secret is checked when the secret is\n"
    "set here; a bad signature refuses it. A damaged or refused bundle changes nothing.\n"
    "\n"
    "  -n, --dry-run            check and count, change nothing\n"
    "      --require-signature  refuse a bundle not signed with remote_secret\n"
    "                           (also: import_require_signature = true)\n"
    "      --resolve-conflicts  rebuild each conflicting entry with the toolkit here:\n"
    "                           the bundle's bytes replace the cache's when a rebuild\n"
    "                           gives them; when it gives neither, the cache's go\n"
    "      --json               report as JSON\n"
    "  -h, --help               this text\n";

/* The conflicts the import reported (kcache_conflict_fn). */
struct conflict {
    kcache_key key;
    uint8_t kept[32], refused[32];
    const char *outcome; /* --resolve-conflicts: what a rebuild settled (static text) */
};

struct conflicts {
    struct conflict *v;
    size_t n, cap;
    int lost; /* out of memory: fewer listed than counted */
};

static void on_conflict(void *userdata, const kcache_key *key, const uint8_t kept[32],
                        const uint8_t refused[32])
{
    struct conflicts *c = userdata;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct conflict *grown = realloc(c->v, cap * sizeof(*grown));
        if (!grown) {
            c->lost = 1;
            return;
        }
        c->v = grown;
        c->cap = cap;
    }
    struct conflict *x = &c->v[c->n++];
    x->key = *key;
    memcpy(x->kept, kept, 32);
    memcpy(x->refused, refused, 32);
    x->outcome = "kept";
}

static void hex32(char out[65], const uint8_t d[32])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/*
 * --resolve-conflicts. Which of two artifacts under one key is right is what
 * the key's inputs build: only a compiler can say, and the store (which does
 * not know the compiler) keeps its own until one does. The entry is rebuilt
 * (kcache_compiler_recompile(), as verify --recompile does) from the inputs kept
 * with the cache's copy, or, when those cannot be used (not kept, or not the
 * ones its key names), from the bundle's copy's: the key names its inputs
 * by content, so either set that passes rebuilds the same truth. Then the
 * copy that equals the rebuild stays or comes in; when neither does, the
 * cache's goes, as verify --recompile would remove it. Lives here, over the
 * two public APIs, so that neither layer learns the other.
 */
static int rebuild(kcache_result **out, kcache_store *from, const kcache_key *key, char *why,
                   size_t why_size)
{
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    kcache_compiler *compiler = NULL;
    co.store = from;
    co.log = cli_log;
    *out = NULL;
    int rc = kcache_compiler_new(&compiler, &co, why, why_size);
    if (rc)
        return rc;
    int same = 0;
    rc = kcache_compiler_recompile(out, &same, compiler, key);
    if (rc)
        snprintf(why, why_size, "%s",
                 *out && (*out)->message[0] ? (*out)->message : kcache_strerror(rc));
    kcache_compiler_free(compiler);
    return rc;
}

static int is_bytes(const kcache_entry *e, const kcache_result *r)
{
    return e && r && e->size == r->size && !memcmp(e->data, r->data, r->size);
}

static int resolve(kcache_store *store, const char *bundle, struct conflicts *c)
{
    kcache_store *b = NULL;
    char err[600];
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = bundle;
    so.read_only = 1;
    so.no_create = 1;
    so.max_size = UINT64_MAX;
    if (kcache_store_open(&b, &so, err, sizeof(err)) != 0)
        return cli_error("--resolve-conflicts: %s; the cache's entries stay", err);
    int ret = CLI_OK;
    for (size_t i = 0; i < c->n; i++) {
        struct conflict *x = &c->v[i];
        char hex[KCACHE_KEY_HEX_SIZE], why[600] = "", why_b[600] = "";
        kcache_key_hex(hex, &x->key);
        cli_progress(NULL, "rebuilding", i, c->n);
        kcache_result *r = NULL;
        kcache_entry *ours = NULL, *theirs = NULL;
        kcache_store_get(&ours, store, &x->key, KCACHE_GET_NO_TOUCH);
        kcache_store_get(&theirs, b, &x->key, KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        int rc = rebuild(&r, store, &x->key, why, sizeof(why));
        if (rc) {
            kcache_result_free(r);
            rc = rebuild(&r, b, &x->key, why_b, sizeof(why_b));
        }
        if (rc) {
            x->outcome = "kept: cannot be rebuilt here";
            cli_warn("conflict %.16s: cannot be rebuilt here (%s): the cache's entry stays", hex,
                     why_b[0] ? why_b : why);
        } else if (is_bytes(ours, r)) {
            x->outcome = "kept: a rebuild gives the cache's bytes";
        } else if (is_bytes(theirs, r)) {
            if (kcache_store_put(store, theirs) != 0) {
                ret = cli_error("%s", kcache_store_errmsg(store));
                x->outcome = "kept: the bundle's could not be written";
            } else {
                x->outcome = "replaced: a rebuild gives the bundle's bytes";
            }
        } else if (kcache_store_delete(store, &x->key) != 0) {
            ret = cli_error("%s", kcache_store_errmsg(store));
            x->outcome = "kept: could not be removed";
        } else {
            x->outcome = "removed: a rebuild gives neither";
        }
        kcache_entry_free(ours);
        kcache_entry_free(theirs);
        kcache_result_free(r);
    }
    cli_progress(NULL, "rebuilding", c->n, c->n);
    kcache_store_close(b);
    return ret;
}

/* The evictions counted so far (0 when stats cannot be read: then nothing is said). */
static uint64_t evictions_now(kcache_store *store)
{
    uint64_t n = 0;
    if (kcache_store_counter(&n, store, "evictions") != 0)
        n = 0;
    return n;
}

/* How many of the bundle's keys the store no longer has. */
static uint64_t imported_gone(kcache_store *store, const char *bundle)
{
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    kcache_filter all = KCACHE_FILTER_INIT;
    kcache_store *b = NULL;
    kcache_key *keys = NULL;
    size_t n = 0;
    uint64_t gone = 0;
    so.path = bundle;
    so.read_only = 1;
    so.no_create = 1;
    so.max_size = UINT64_MAX;
    if (kcache_store_open(&b, &so, NULL, 0) == 0 &&
        kcache_store_list_keys(&keys, &n, b, &all) == 0) {
        for (size_t i = 0; i < n; i++) {
            kcache_entry *e = NULL;
            if (kcache_store_get(&e, store, &keys[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA))
                gone++;
            kcache_entry_free(e);
        }
    }
    kcache_keys_free(keys);
    kcache_store_close(b);
    return gone;
}

static int scratch_store(kcache_store **out, char *dir, size_t size)
{
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    char path[128], err[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/kcache-check-XXXXXX", tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        return cli_error("cannot make a directory to check the bundle in: %s", strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/kcache.db", dir);
    so.path = path;
    so.max_size = UINT64_MAX;
    if (kcache_store_open(out, &so, err, sizeof(err)))
        return cli_error("%s", err);
    return 0;
}

static void remove_scratch(const char *dir)
{
    static const char *const names[] = {"kcache.db", "kcache.db-wal", "kcache.db-shm",
                                        "kcache.conf"};
    char path[160];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* Says that the cap evicted entries during the import, gone of the imported just merged. */
static void warn_evicted(kcache_store *store, uint64_t evicted, uint64_t gone, uint64_t imported)
{
    char cap[32], n[48];
    cli_warn("the cap (%s) evicted %s during the import, %llu of the %llu just imported: "
             "the bundle does not fit; raise the cap (e.g. 'kcache config max_size 8G', "
             "or 0 for none)",
             cli_format_cap(cap, sizeof(cap), kcache_store_max_size(store)),
             cli_plural(n, sizeof(n), evicted, "entry", "entries"), (unsigned long long)gone,
             (unsigned long long)imported);
}

/* The import's result as kcache-json(7) describes it. */
static void print_json(const char *in, int dry_run, const kcache_bundle_result *r,
                       uint64_t evicted, uint64_t gone, const struct conflicts *conflicts)
{
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_string(&j, "path", in);
    cli_json_bool(&j, "dry_run", dry_run);
    cli_json_uint(&j, "entries", r->entries);
    cli_json_uint(&j, "bytes", r->bytes);
    cli_json_uint(&j, "added", r->added);
    cli_json_uint(&j, "replaced", r->replaced);
    cli_json_uint(&j, "skipped", r->skipped);
    cli_json_uint(&j, "evicted", evicted);
    cli_json_uint(&j, "evicted_imported", gone);
    cli_json_bool(&j, "signed", r->signed_by_secret);
    cli_json_uint(&j, "conflicts", r->conflicts);
    cli_json_array_begin(&j, "conflict_list");
    for (size_t i = 0; i < conflicts->n; i++) {
        char hex[KCACHE_KEY_HEX_SIZE], kept[65], refused[65];
        kcache_key_hex(hex, &conflicts->v[i].key);
        hex32(kept, conflicts->v[i].kept);
        hex32(refused, conflicts->v[i].refused);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "key", hex);
        cli_json_string(&j, "kept", kept);
        cli_json_string(&j, "refused", refused);
        cli_json_string(&j, "outcome", conflicts->v[i].outcome);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

int cmd_import(int argc, char **argv)
{
    static const struct option options[] = {
        {"dry-run", no_argument, NULL, 'n'},
        {"require-signature", no_argument, NULL, 's'},
        {"resolve-conflicts", no_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    struct conflicts conflicts = {0};
    int json = 0, resolve_them = 0, c;
    cli_options opts = CLI_OPTIONS(argc, argv, "import", usage_text, "hn", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'n': o.dry_run = 1; break;
        case 's': o.require_signature = 1; break;
        case 'r': resolve_them = 1; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (optind >= argc)
        return cli_usage_error("import", "which bundle? give the file 'kcache export' wrote");
    if (cli_extra_arg(&opts, 1))
        return CLI_USAGE;
    if (resolve_them && o.dry_run)
        return cli_usage_error("import", "--resolve-conflicts changes the cache: not with "
                                         "--dry-run");
    const char *in = argv[optind];
    kcache_store *store = NULL;
    char scratch[64] = "";
    if (o.dry_run) {
        /* Checking needs a store to compare with; with no cache yet, an empty
         * one made for the purpose (and removed), so that looking creates
         * nothing where the cache would be. */
        if (cli_open_store_to_read(&store))
            return CLI_FAIL;
        if (!store && scratch_store(&store, scratch, sizeof(scratch)))
            return CLI_FAIL;
    } else if (cli_open_store(&store, 0)) {
        return CLI_FAIL;
    }
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    o.progress = cli_progress;
    o.conflict = on_conflict;
    o.conflict_userdata = &conflicts;
    int ret = CLI_OK;
    uint64_t evictions = evictions_now(store);
    if (kcache_bundle_import(&r, store, in, &o)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    if (resolve_them && conflicts.n)
        ret = resolve(store, in, &conflicts);
    /* The cap may have evicted what was just merged: say so, never leave a
     * user believing that 20000 entries are in a cache that kept 3714. */
    uint64_t evicted = o.dry_run ? 0 : evictions_now(store) - evictions;
    uint64_t gone = evicted ? imported_gone(store, in) : 0;
    if (evicted)
        warn_evicted(store, evicted, gone, r.added + r.replaced);
    if (json) {
        print_json(in, o.dry_run, &r, evicted, gone, &conflicts);
    } else if (r.entries && r.skipped == r.entries) {
        char n[48];
        printf("Nothing to import: all %s %s already here\n",
               cli_plural(n, sizeof(n), r.entries, "entry", "entries"),
               r.entries == 1 ? "is" : "are");
    } else {
        char a[32], n[48];
        printf("%s %s (%s%s): %llu added, %llu replaced by a newer one, %llu already in the "
               "cache",
               o.dry_run ? "Checked; would import" : "Imported",
               cli_plural(n, sizeof(n), r.entries, "entry", "entries"),
               kcache_format_size(a, sizeof(a), r.bytes),
               r.signed_by_secret ? ", signature checked" : "", (unsigned long long)r.added,
               (unsigned long long)r.replaced, (unsigned long long)r.skipped);
        if (r.conflicts)
            printf(", %s (the cache's entries kept: see the warnings%s)",
                   cli_plural(n, sizeof(n), r.conflicts, "conflict", "conflicts"),
                   resolve_them ? " and what a rebuild settled below" : "");
        printf("\n");
        for (size_t i = 0; resolve_them && i < conflicts.n; i++) {
            char hex[KCACHE_KEY_HEX_SIZE];
            kcache_key_hex(hex, &conflicts.v[i].key);
            printf("  %s: %s\n", hex, conflicts.v[i].outcome);
        }
    }
out:
    free(conflicts.v);
    kcache_store_close(store);
    if (scratch[0])
        remove_scratch(scratch);
    return ret;
}
