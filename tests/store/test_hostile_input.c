/*
 * Hostile input: what a careless or malicious user, file or machine can hand
 * kcache, and what must hold whatever it is:
 *
 *   - sources that are binary garbage, 100 MB long, or include themselves;
 *     include directories that are loops of symlinks: the compile ends, in
 *     bounded time, with a one-line message; nothing is stored for a failure;
 *   - invalid architectures, sizes, ages and key prefixes on the command
 *     line (the real kcache, $KCACHE_EXE): exit 2, one line on stderr,
 *     the cache unchanged; text that would be SQL if pasted into SQL selects
 *     nothing and changes nothing;
 *   - bundles crafted to attack the importer (foreign triggers, an altered
 *     trigger of kcache's, a view in a table's place, an extra index, huge
 *     sizes, digests that do not match, missing inputs, another application,
 *     a newer schema, a WAL-mode file, a truncated file, a device): refused
 *     with nothing merged, the bundle file itself unchanged;
 *   - every SQLite connection kcache opens has SQLITE_DBCONFIG_DEFENSIVE on
 *     and trusted_schema off before its first statement (checked by an
 *     authorizer that an auto-extension installs on every connection).
 */
#include <fcntl.h>
#include <kcache/bundle.h>
#include <kcache/compile.h>
#include <kcache/verify.h>
#include <sys/wait.h>

#include "util/common.h"
#include "results.h"
#include "storetest.h"

#define ART_MAX 8000u

static uint8_t scratch[ART_MAX];
static unsigned inputs_tried, refused_ok, stored_wrongly, connections_seen, insecure;
static int cli_skipped;

/* ---- every connection: defensive, trusted_schema off --------------------------- */

/* Whether db was seen already; remembers it. Pointers are reused after a close, so
 * the list is cleared by each new connection that takes a known address. */
static sqlite3 *seen[4096];
static size_t n_seen;

static int checked_before(sqlite3 *db)
{
    for (size_t i = 0; i < n_seen; i++)
        if (seen[i] == db)
            return 1;
    if (n_seen < KC_ARRAY_SIZE(seen))
        seen[n_seen++] = db;
    return 0;
}

static void forget(sqlite3 *db)
{
    for (size_t i = 0; i < n_seen; i++)
        if (seen[i] == db)
            seen[i] = seen[--n_seen];
}

static int auth(void *ud, int action, const char *a, const char *b, const char *c, const char *d)
{
    (void)b, (void)c, (void)d;
    sqlite3 *db = ud;
    int defensive = -1, trusted = -1;
    /*
     * The settings must be in place before a connection's first statement;
     * that is what is checked. (VACUUM lifts defensive for the statements it
     * runs itself, later on the same connection.)
     */
    if (sqlite3_get_autocommit(db) == 0 || checked_before(db))
        return SQLITE_OK;
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, -1, &defensive);
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1, &trusted);
    if (defensive != 1 || trusted != 0) {
        const char *file = sqlite3_db_filename(db, "main");
        fprintf(stderr, "a connection to '%s' runs a statement (action %d on %s) with "
                "defensive=%d trusted_schema=%d\n", file ? file : "?", action, a ? a : "-",
                defensive, trusted);
        insecure++;
    }
    return SQLITE_OK;
}

static int on_connection(sqlite3 *db, char **err, const void *api)
{
    (void)err, (void)api;
    connections_seen++;
    forget(db); /* a new connection at the address of a closed one */
    sqlite3_set_authorizer(db, auth, db);
    return SQLITE_OK;
}

/* ---- helpers ------------------------------------------------------------------------ */

static int put_with_inputs(kcache_store *s, unsigned n)
{
    char src[128];
    snprintf(src, sizeof(src), "__global__ void k%u() {}\n", n);
    kcache_input in[1] = {{KCACHE_INPUT_SOURCE, "k.cu", src, strlen(src)}};
    kcache_entry e = KCACHE_ENTRY_INIT;
    char material[32];
    st_material_entry(&e, material, n);
    st_entry_of(&e, n, ART_MAX, scratch);
    e.name = "k.cu";
    e.n_inputs = 1;
    e.inputs = in;
    return kcache_store_put(s, &e);
}

/* ---- bundles ------------------------------------------------------------------------- */

struct bundle_case {
    const char *name;
    const char *sql; /* run on a copy of a good bundle; NULL: see make */
    int want;        /* the status import must return */
};

static const struct bundle_case bundle_cases[] = {
    {"trigger that empties the cache when a counter changes",
     "CREATE TRIGGER evil AFTER UPDATE ON counter BEGIN DELETE FROM entry; END",
     KCACHE_ECORRUPT},
    {"a trigger named as one kcache had before schema 6",
     "CREATE TRIGGER entry_removed AFTER DELETE ON entry BEGIN DELETE FROM counter; END",
     KCACHE_ECORRUPT},
    {"a view in the artifact table's place",
     "CREATE TABLE art2 AS SELECT * FROM artifact; DROP TABLE artifact;"
     " CREATE VIEW artifact AS SELECT id, stored_digest, data FROM art2",
     KCACHE_ECORRUPT},
    {"a view named like a table of a later schema",
     "CREATE VIEW lease2 AS SELECT load_extension('/tmp/evil.so') AS x",
     KCACHE_ECORRUPT},
    {"an extra index", "CREATE INDEX evil ON entry (arch)", KCACHE_ECORRUPT},
    {"an artifact claiming 1 TiB", "UPDATE entry SET raw_size = 1099511627776 WHERE id = "
     "(SELECT min(id) FROM entry)", KCACHE_ECORRUPT},
    {"an input claiming 1 TiB", "UPDATE input SET size = 1099511627776", KCACHE_ECORRUPT},
    {"a compressed artifact whose digest does not match",
     "UPDATE entry SET digest = zeroblob(32) WHERE codec != 0 AND id = (SELECT max(id) FROM entry"
     " WHERE codec != 0)",
     KCACHE_ECORRUPT},
    {"a raw artifact whose digest does not match",
     "UPDATE entry SET digest = zeroblob(32) WHERE codec = 0 AND id = (SELECT max(id) FROM entry"
     " WHERE codec = 0)",
     KCACHE_ECORRUPT},
    {"an artifact in a codec this build does not know",
     "UPDATE entry SET codec = 9 WHERE id = (SELECT min(id) FROM entry)", KCACHE_ECORRUPT},
    {"an input in a codec this build does not know",
     "UPDATE input SET codec = 77 WHERE id = (SELECT min(id) FROM input)", KCACHE_ECORRUPT},
    {"an artifact's stored bytes changed",
     "UPDATE artifact SET data = randomblob(length(data)) WHERE id = (SELECT min(id) FROM entry)",
     KCACHE_ECORRUPT},
    {"an input whose digest does not match",
     "UPDATE input SET data = randomblob(length(data)) WHERE id = (SELECT min(id) FROM input)",
     KCACHE_ECORRUPT},
    {"an input that is missing", "DELETE FROM input WHERE id = (SELECT min(id) FROM input)",
     KCACHE_ECORRUPT},
    {"another application's id", "PRAGMA application_id = 1234", KCACHE_EFOREIGN},
    {"a newer schema", "PRAGMA user_version = 99", KCACHE_EVERSION},
};

/* A good bundle of entries [100, 103) with inputs, made by kcache itself. */
static void make_good_bundle(const char *path)
{
    kcache_store *s = st_open(test_path("bundle-src.db"), UINT64_MAX, NULL, NULL);
    for (unsigned i = 100; i < 103; i++)
        REQUIRE(put_with_inputs(s, i) == 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    REQUIRE(kcache_bundle_export(&r, s, path, NULL) == 0 && r.entries == 3);
    kcache_store_close(s);
}

/*
 * Imports path into the live cache (dry run, then for real) and checks that
 * it was refused with `want` and changed nothing: not the cache, not the file.
 */
static void expect_refused(kcache_store *live, const char *path, int want, const char *what)
{
    size_t n0 = 0, n1 = 0;
    uint8_t *before = test_slurp(path, &n0);
    unsigned entries = st_count_entries(live);
    inputs_tried++;
    int ok = 1;
    for (int dry = 1; dry >= 0; dry--) {
        kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
        o.dry_run = dry;
        kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
        int rc = kcache_bundle_import(&r, live, path, &o);
        const char *msg = kcache_store_errmsg(live);
        if (rc != want || !test_one_line(msg) || !strstr(msg, "nothing imported")) {
            fprintf(stderr, "bundle with %s (dry run %d): import returned %d (%s), wanted %d\n",
                    what, dry, rc, msg, want);
            test_failures++;
            ok = 0;
        }
    }
    if (st_count_entries(live) != entries) {
        fprintf(stderr, "bundle with %s: the cache changed\n", what);
        stored_wrongly++;
        test_failures++;
        ok = 0;
    }
    uint8_t *after = test_slurp(path, &n1);
    if (!before || !after || n0 != n1 || memcmp(before, after, n0) != 0) {
        fprintf(stderr, "bundle with %s: the bundle file was changed\n", what);
        test_failures++;
        ok = 0;
    }
    /* Nothing left beside it either. */
    char side[700];
    struct stat st;
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    for (size_t i = 0; i < KC_ARRAY_SIZE(sides); i++) {
        snprintf(side, sizeof(side), "%s%s", path, sides[i]);
        if (stat(side, &st) == 0) {
            fprintf(stderr, "bundle with %s: import left %s behind\n", what, side);
            test_failures++;
            ok = 0;
        }
    }
    refused_ok += (unsigned)ok;
    free(before);
    free(after);
}

static void test_bundles(kcache_store *live, const char *good)
{
    size_t n;
    uint8_t *good_bytes = test_slurp(good, &n);
    REQUIRE(good_bytes);
    for (size_t i = 0; i < KC_ARRAY_SIZE(bundle_cases); i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/evil-%zu.kcache", test_dir(), i);
        test_spit(path, good_bytes, n);
        sqlite3 *db = NULL;
        REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
        char *err = NULL;
        if (sqlite3_exec(db, bundle_cases[i].sql, NULL, NULL, &err) != SQLITE_OK) {
            fprintf(stderr, "crafting a bundle with %s: %s\n", bundle_cases[i].name, err);
            test_failures++;
        }
        sqlite3_free(err);
        sqlite3_close(db);
        expect_refused(live, path, bundle_cases[i].want, bundle_cases[i].name);
    }

    /* Truncated: half a bundle. */
    char path[600];
    snprintf(path, sizeof(path), "%s/half.kcache", test_dir());
    test_spit(path, good_bytes, n / 2);
    expect_refused(live, path, KCACHE_ECORRUPT, "half its bytes");

    /* The live cache itself under another name: a symlink to it. */
    char alias[600];
    snprintf(alias, sizeof(alias), "%s/alias.kcache", test_dir());
    REQUIRE(symlink(kcache_store_path(live), alias) == 0);
    inputs_tried++;
    kcache_bundle_result ar = KCACHE_BUNDLE_RESULT_INIT;
    int arc = kcache_bundle_import(&ar, live, alias, NULL);
    CHECK(arc == KCACHE_EINVAL && strstr(kcache_store_errmsg(live), "the cache itself"));
    refused_ok += arc == KCACHE_EINVAL;

    /* A device and a directory, where a file is expected. */
    inputs_tried += 2;
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    int rc = kcache_bundle_import(&r, live, "/dev/zero", NULL);
    CHECK(rc == KCACHE_EINVAL && test_one_line(kcache_store_errmsg(live)));
    refused_ok += rc == KCACHE_EINVAL;
    rc = kcache_bundle_import(&r, live, test_dir(), NULL);
    CHECK(rc == KCACHE_EINVAL && test_one_line(kcache_store_errmsg(live)));
    refused_ok += rc == KCACHE_EINVAL;

    /*
     * A bundle in WAL mode (a copy of a live cache, say): reading it would make
     * a -shm beside the user's file, so import refuses it (bundle.c says why),
     * changing nothing, neither the cache nor the file, and saying what to do.
     */
    snprintf(path, sizeof(path), "%s/wal.kcache", test_dir());
    test_spit(path, good_bytes, n);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    expect_refused(live, path, KCACHE_EINVAL, "WAL mode");
    CHECK(strstr(kcache_store_errmsg(live), "WAL mode") &&
          strstr(kcache_store_errmsg(live), "kcache export"));

    /* And the good one goes in, every entry intact. */
    kcache_bundle_result gr = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_import(&gr, live, good, NULL), 0);
    CHECK(gr.added == 3);
    for (unsigned i = 100; i < 103; i++) {
        kcache_entry *e = NULL;
        char material[32];
        kcache_key k = st_material_key(material, i);
        CHECK_RC(kcache_store_get(&e, live, &k, KCACHE_GET_NO_TOUCH), 0);
        CHECK(st_entry_ok(e, i, ART_MAX, scratch));
        kcache_entry_free(e);
    }
    free(good_bytes);
}

/* ---- the command line ------------------------------------------------------------------ */

struct cli_case {
    const char *env;
    const char *args[10];
    int want; /* 2 usage, 1 failure, 0: accepted (selects nothing, changes nothing) */
};

#define SQLISH "x' OR 1=1; DELETE FROM entry; --"

static const struct cli_case cli_cases[] = {
    {NULL, {"compile", "@SRC", "--arch", "sm_abc", NULL}, 2},
    {NULL, {"compile", "@SRC", "--arch", "sm_", NULL}, 2},
    {NULL, {"compile", "@SRC", "--arch", "sm_99999999999999999999", NULL}, 2},
    {NULL, {"compile", "@SRC", "--arch", "", NULL}, 2},
    {NULL, {"compile", "@SRC", "--arch", "sm_90;rm -rf /", NULL}, 2},
    {NULL, {"compile", "@SRC", "--arch", "compute_", NULL}, 2},
    {NULL, {"compile", "@SRC", "--arch", SQLISH, NULL}, 2},
    {NULL, {"prune", "--max-size", "12Q", NULL}, 2},
    {NULL, {"prune", "--max-size", "-5", NULL}, 2},
    {NULL, {"prune", "--max-size", "99999999999999999999G", NULL}, 2},
    {NULL, {"prune", "--max-size", "", NULL}, 2},
    {NULL, {"prune", "--max-size", "1.5.5M", NULL}, 2},
    {NULL, {"prune", "--older-than", "3x", NULL}, 2},
    {NULL, {"prune", "--older-than", "-1d", NULL}, 2},
    {NULL, {"prune", "--older-than", "99999999999999999999d", NULL}, 2},
    {NULL, {"prune", "--older-than", "1d", "--kind", "elf", NULL}, 2},
    {NULL, {"prune", "--older-than", "0s", "--arch", SQLISH, NULL}, 0},
    {NULL, {"ls", "--sort", "bogus", NULL}, 2},
    {NULL, {"ls", "--kind", "x", NULL}, 2},
    {NULL, {"ls", "--arch", SQLISH, NULL}, 0},
    {NULL, {"inspect", "zz", NULL}, 2},
    {NULL, {"inspect", "12", NULL}, 2},
    {NULL, {"inspect", "gggg", NULL}, 2},
    {NULL, {"inspect", "%%%%", NULL}, 2},
    {NULL, {"inspect", "____", NULL}, 2},
    {NULL, {"inspect", SQLISH, NULL}, 2},
    {NULL, {"inspect", "00000000000000000000000000000000000000000000000000000000000000000", NULL},
     2},
    {NULL, {"get", "'; DROP TABLE entry; --", NULL}, 2},
    {NULL, {"export", "@OUT", "--since", "5 parsecs", NULL}, 2},
    {NULL, {"export", "@OUT", "--kind", "bogus", NULL}, 2},
    {NULL, {"export", "@OUT", "--arch", SQLISH, NULL}, 0},
    {"KCACHE_MAX_SIZE=12Q", {"stats", NULL}, 2},
    {"KCACHE_BUSY_TIMEOUT=-1", {"stats", NULL}, 2},
};

/* Every line on stderr is kcache's: "kcache: ..."; a failure says it in one line. */
static int well_formed(const char *err, int rc)
{
    if (rc == 0)
        return 1;
    size_t lines = 0;
    for (const char *p = err; *p;) {
        if (strncmp(p, "kcache: ", 8) != 0 && strncmp(p, "usage:", 6) != 0 &&
            strncmp(p, "Try ", 4) != 0)
            return 0;
        const char *nl = strchr(p, '\n');
        lines++;
        p = nl ? nl + 1 : p + strlen(p);
    }
    return lines >= 1 && lines <= 2;
}

static void test_cli(kcache_store *live, const char *db)
{
    if (!getenv("KCACHE_EXE")) {
        printf("command line: KCACHE_EXE not set: skipped (the test exits 77 unless another "
               "part failed)\n");
        cli_skipped = 1;
        return;
    }
    char src[600], out[600];
    snprintf(src, sizeof(src), "%s", test_path("tiny.cu"));
    snprintf(out, sizeof(out), "%s", test_path("out.kcache"));
    test_write_text(src, "__global__ void tiny() {}\n");
    unsigned entries = st_count_entries(live);
    kcache_store_flush(live);
    for (size_t i = 0; i < KC_ARRAY_SIZE(cli_cases); i++) {
        const struct cli_case *c = &cli_cases[i];
        const char *args[12];
        char shown[512] = "kcache";
        size_t n = 0;
        for (; c->args[n]; n++) {
            args[n] = !strcmp(c->args[n], "@SRC") ? src : !strcmp(c->args[n], "@OUT") ? out
                                                                                       : c->args[n];
            size_t len = strlen(shown);
            snprintf(shown + len, sizeof(shown) - len, " '%s'", c->args[n]);
        }
        args[n] = NULL;
        char err[4096];
        int rc = test_run_cli(db, -1, c->env, err, sizeof(err), args);
        inputs_tried++;
        /* A bad value is a usage error: exit 2, never 1 (a failure of the cache). */
        int ok = rc == c->want && well_formed(err, rc);
        if (!ok) {
            fprintf(stderr, "%s%s%s: exit %d (wanted %d), stderr: %s\n", c->env ? c->env : "",
                    c->env ? " " : "", shown, rc, c->want, err);
            test_failures++;
        }
        refused_ok += (unsigned)ok;
        if (getenv("KCACHE_TEST_VERBOSE"))
            printf("%s -> %d: %s", shown, rc, err);
    }
    unlink(out);
    /* Nothing stored, nothing evicted, by any of them. */
    if (st_count_entries(live) != entries) {
        fprintf(stderr, "command line: the cache went from %u to %u entries\n", entries,
                st_count_entries(live));
        stored_wrongly++;
        test_failures++;
    }
}

/* ---- sources and include paths ------------------------------------------------------------ */

static int have_toolkit(void)
{
    struct stat st;
    return stat("/usr/local/cuda/include/cuda.h", &st) == 0;
}

/*
 * Compiles one hostile source; it must end within `limit_s` with either an
 * artifact or a failure that says what, in one line, and store nothing when
 * it fails.
 */
static int compile_hostile(kcache_compiler *c, kcache_store *live, const char *path,
                           const char *const *opts, size_t n_opts, const char *what,
                           double limit_s, int want_ok)
{
    unsigned entries = st_count_entries(live);
    kcache_request rq = KCACHE_REQUEST_INIT;
    rq.source_path = path;
    rq.arch = "sm_90";
    rq.options = opts;
    rq.n_options = n_opts;
    kcache_result *r = NULL;
    double t0 = st_now();
    int rc = kcache_compiler_compile(&r, c, &rq);
    double took = st_now() - t0;
    inputs_tried++;
    int ok = 1;
    if (took > limit_s) {
        fprintf(stderr, "%s: took %.1f s\n", what, took);
        ok = 0;
    }
    if (rc == 0) {
        if (!want_ok || !r || !r->data || !r->size) {
            fprintf(stderr, "%s: compiled (want_ok %d)\n", what, want_ok);
            ok = 0;
        }
    } else {
        if (want_ok || !r || !test_one_line(r->message) ||
            (rc != KCACHE_ECOMPILE && rc != KCACHE_EINVAL && rc != KCACHE_ENOTFOUND)) {
            fprintf(stderr, "%s: failed with %d: %s\n", what, rc, r ? r->message : "(no result)");
            ok = 0;
        }
        if (st_count_entries(live) != entries) {
            fprintf(stderr, "%s: a failed compile stored something\n", what);
            stored_wrongly++;
            ok = 0;
        }
    }
    printf("%s: %s in %.2f s%s%s\n", what, rc ? kcache_strerror(rc) : "compiled", took,
           rc && r ? ": " : "", rc && r ? r->message : "");
    kcache_result_free(r);
    if (!ok)
        test_failures++;
    else
        refused_ok++;
    return rc;
}

static void test_sources(kcache_store *live)
{
    if (!have_toolkit()) {
        printf("sources: no CUDA toolkit: skipped\n");
        return;
    }
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = live;
    kcache_compiler *c = NULL;
    char err[512];
    REQUIRE(kcache_compiler_new(&c, &co, err, sizeof(err)) == 0);

    /* Binary garbage, NUL bytes included. */
    static uint8_t junk[64 << 10];
    uint64_t x = 88172645463325252u;
    for (size_t i = 0; i < sizeof(junk); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        junk[i] = (uint8_t)x;
    }
    const char *garbage = test_path("garbage.cu");
    test_spit(garbage, junk, sizeof(junk));
    compile_hostile(c, live, garbage, NULL, 0, "binary garbage source", 60, 0);

    /* 100 MB: a kernel and then 100 MB of comment. */
    const char *big = test_path("big.cu");
    FILE *f = fopen(big, "wb");
    REQUIRE(f);
    fputs("__global__ void big(float *x) { x[0] = 1.0f; }\n", f);
    static char line[1024];
    memset(line, 'x', sizeof(line) - 1);
    line[0] = '/', line[1] = '/', line[sizeof(line) - 2] = '\n';
    for (int i = 0; i < 100 * 1024; i++)
        REQUIRE(fputs(line, f) >= 0);
    REQUIRE(fclose(f) == 0);
    compile_hostile(c, live, big, NULL, 0, "100 MB source", 120, 1);
    unlink(big);

    /* Includes itself, without a guard; and two headers that include each other. */
    const char *self = test_path("self.cu");
    test_write_text(self, "#include \"self.cu\"\n__global__ void s() {}\n");
    compile_hostile(c, live, self, NULL, 0, "a source that includes itself", 60, 0);
    test_write_text(test_path("a.h"), "#include \"b.h\"\n");
    test_write_text(test_path("b.h"), "#include \"a.h\"\n");
    const char *cyc = test_path("cycle.cu");
    test_write_text(cyc, "#include \"a.h\"\n__global__ void c() {}\n");
    compile_hostile(c, live, cyc, NULL, 0, "headers that include each other", 60, 0);
    /* With guards the same cycle is fine. */
    test_write_text(test_path("ga.h"), "#pragma once\n#include \"gb.h\"\n");
    test_write_text(test_path("gb.h"), "#pragma once\n#include \"ga.h\"\n");
    const char *gcyc = test_path("guarded.cu");
    test_write_text(gcyc, "#include \"ga.h\"\n__global__ void g() {}\n");
    compile_hostile(c, live, gcyc, NULL, 0, "a guarded include cycle", 60, 1);

    /* An include directory full of symlink loops. */
    char dir[600], loop1[700], loop2[700], inc[700];
    snprintf(dir, sizeof(dir), "%s", test_path("loops"));
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(loop1, sizeof(loop1), "%s/one", dir);
    snprintf(loop2, sizeof(loop2), "%s/two", dir);
    REQUIRE(symlink(loop2, loop1) == 0 && symlink(loop1, loop2) == 0);
    char self_link[700];
    snprintf(self_link, sizeof(self_link), "%s/self", dir);
    REQUIRE(symlink(".", self_link) == 0);
    snprintf(inc, sizeof(inc), "-I%s", dir);
    const char *lp = test_path("loop.cu");
    test_write_text(lp, "#include <one/x.h>\n__global__ void l() {}\n");
    const char *o1[] = {inc};
    compile_hostile(c, live, lp, o1, 1, "an include through a symlink loop", 60, 0);
    const char *lp2 = test_path("loop2.cu");
    test_write_text(lp2, "#if __has_include(<self/self/self/self/nothere.h>)\n#error\n#endif\n"
                         "#include <two>\n__global__ void l2() {}\n");
    compile_hostile(c, live, lp2, o1, 1, "a symlink loop named as a header", 60, 0);
    char inc2[720];
    snprintf(inc2, sizeof(inc2), "-I%s", loop1);
    const char *o2[] = {inc2};
    const char *lp3 = test_path("loop3.cu");
    test_write_text(lp3, "#include \"nothere.h\"\n__global__ void l3() {}\n");
    compile_hostile(c, live, lp3, o2, 1, "an include directory that is a symlink loop", 60, 0);

    kcache_compiler_free(c);
}

int main(void)
{
    double t0 = st_now();
    /* Every connection opened from here on is checked; the test's own come after. */
    REQUIRE(sqlite3_auto_extension((void (*)(void))on_connection) == SQLITE_OK);

    char db[600], good[600];
    snprintf(db, sizeof(db), "%s", test_path("live.db"));
    snprintf(good, sizeof(good), "%s", test_path("good.kcache"));
    kcache_store *live = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 20; i++)
        REQUIRE(put_with_inputs(live, i) == 0);
    make_good_bundle(good);
    /* Recovery, verify, prune and vacuum open and run their own statements too. */
    test_spit(test_path("garbage.db"), "not a database at all, just text", 32);
    kcache_store *g = st_open(test_path("garbage.db"), UINT64_MAX, NULL, NULL);
    kcache_store_close(g);
    kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
    CHECK_RC(kcache_store_verify(&vr, live, NULL, NULL, NULL), 0);
    CHECK(vr.integrity_ok && vr.damaged == 0);
    kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
    po.max_entries = 1000;
    CHECK_RC(kcache_store_prune(NULL, live, &po), 0);
    CHECK_RC(kcache_store_vacuum(live), 0);

    test_sources(live);
    unsigned kcache_connections = connections_seen;
    /* The check itself: a connection opened without the settings is caught
     * (the line it prints for the in-memory connection below is expected). */
    fprintf(stderr, "expected next: one connection to '' without the settings\n");
    sqlite3 *plain = NULL;
    REQUIRE(sqlite3_open(":memory:", &plain) == SQLITE_OK);
    REQUIRE(sqlite3_exec(plain, "SELECT 1", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(plain);
    CHECK(insecure == 1);
    insecure--;
    sqlite3_reset_auto_extension();

    test_bundles(live, good);
    test_cli(live, db);
    kcache_store_close(live);
    CHECK(st_integrity_ok(db));
    CHECK(kcache_connections >= 5);
    CHECK(insecure == 0);
    /* Every input tried was refused or handled as promised: the count means something. */
    CHECK(refused_ok == inputs_tried);

    printf("hostile inputs: %u tried, %u refused or handled as promised, %u stored wrongly; "
           "%u SQLite connections checked, %u without defensive/trusted_schema settings "
           "(%.1f s)\n",
           inputs_tried, refused_ok, stored_wrongly, kcache_connections, insecure,
           st_now() - t0);
    test_record("hostile-input", "inputs=%u\thandled=%u\tstored_wrongly=%u\tconnections=%u\t"
                "insecure_connections=%u",
                inputs_tried, refused_ok, stored_wrongly, kcache_connections, insecure);
    if (cli_skipped && !test_failures)
        return TEST_SKIP;
    return test_done();
}
