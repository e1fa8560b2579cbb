/*
 * Include closures carried by bundles (lib/store/carried.c): a cache
 * exported and imported into a fresh cache at another path serves the first
 * compile there as a hit found by the closure, without resolving the
 * includes again (issue 38, row 7: 136-155 ms of resolution before), also
 * from a checkout at another path for a program named by its file's name
 * and keyed with it (kcache compile's; 460-546 ms for CUB's before). The
 * closure stays a shortcut checked against the files: a header edited after
 * the import is never served the old kernel; a signed bundle whose closures'
 * signature does not match gives its entries and no closure. Each compile is
 * a process of its own. Skips (77) where the toolkit is missing.
 */
#include <kcache/bundle.h>
#include <kcache/compile.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "compiletest.h"

static char src[600], inc[600];
static const char *const opts[] = {"-I", inc};

/* Compiles src on the cache at db in a new process, key first; the PTX goes to db + ".ptx". */
static int compile_in_child(const char *db, const char *what)
{
    char out[700];
    snprintf(out, sizeof(out), "%s.ptx", db);
    return ct_compile_in_child(db, src, opts, 2, 1, out, what);
}

static int ptx_says(const char *db, const char *what)
{
    char out[700];
    snprintf(out, sizeof(out), "%s.ptx", db);
    return ct_file_says(out, what);
}

/* 1 if the caches at a and b handed out the same PTX (compile_in_child()'s files). */
static int same_ptx(const char *a, const char *b)
{
    char pa[720], pb[720];
    snprintf(pa, sizeof(pa), "%s.ptx", a);
    snprintf(pb, sizeof(pb), "%s.ptx", b);
    size_t na = 0, nb = 0;
    uint8_t *da = test_slurp(pa, &na), *db = test_slurp(pb, &nb);
    int same = da && db && na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

static void export_to(const char *db, const char *bundle)
{
    kcache_store *s = ct_store_open(db);
    REQUIRE(s);
    if (kcache_bundle_export(NULL, s, bundle, NULL) != 0)
        fprintf(stderr, "export: %s\n", kcache_store_errmsg(s));
    kcache_store_close(s);
}

/* Imports bundle into the cache at db, which must take exactly one entry from it. */
static void import_one(const char *db, const char *bundle)
{
    kcache_store *s = ct_store_open(db);
    REQUIRE(s);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    if (kcache_bundle_import(&r, s, bundle, NULL) != 0)
        fprintf(stderr, "import: %s\n", kcache_store_errmsg(s));
    CHECK(r.added == 1);
    kcache_store_close(s);
}

/* A fresh cache at dir/cache.db (dir made) with bundle imported; its path into db. */
static void import_into(char *db, size_t size, const char *dir, const char *bundle)
{
    test_in_new_dir(db, size, dir, "cache.db");
    import_one(db, bundle);
}

/* Runs sql on the bundle's file, as someone changing it after it was made. */
static void alter(const char *bundle, const char *sql)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(bundle, &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_changes(db) == 1);
    sqlite3_close(db);
}

int main(void)
{
    if (ct_no_nvrtc())
        return TEST_SKIP;
    unsetenv("KCACHE_REMOTE_SECRET");
    char a[700], b[700], c[700], d[700], e[700], val[700];
    snprintf(a, sizeof(a), "%s/cache.db", test_dir());
    snprintf(inc, sizeof(inc), "%s/include", test_dir());
    REQUIRE(mkdir(inc, 0700) == 0);
    snprintf(val, sizeof(val), "%s/val.h", inc);
    test_write_text(val, "#include \"more.h\"\n#define KC_VAL (1234000 + KC_MORE)\n");
    test_write_text(test_path("include/more.h"), "#define KC_MORE 567\n");
    snprintf(src, sizeof(src), "%s", test_path("kern.cu"));
    test_write_text(src, "#include <val.h>\n"
                         "extern \"C\" __global__ void k(int *v) { v[threadIdx.x] = KC_VAL; }\n");
    CHECK(compile_in_child(a, "miss in the exporting cache") == 0);
    CHECK(compile_in_child(a, "hit in the exporting cache") == (CT_HIT | CT_BY_CLOSURE));

    /* The first compile after an import elsewhere: a hit by the closure, nothing resolved. */
    char bundle[700];
    snprintf(bundle, sizeof(bundle), "%s/kernels.kcache", test_dir());
    export_to(a, bundle);
    import_into(b, sizeof(b), "elsewhere", bundle);
    int first = compile_in_child(b, "first compile after the import");
    if (!(first & CT_BY_CLOSURE))
        fprintf(stderr, "the first compile after the import resolved the includes again\n");
    CHECK(first == (CT_HIT | CT_BY_CLOSURE));
    CHECK(ct_counter(b, "closure_hits") == 1);
    CHECK(ptx_says(b, "1234567"));

    /* Checked against the files: a header edited since is never served the old kernel. */
    import_into(c, sizeof(c), "edited", bundle);
    test_write_text(test_path("include/more.h"), "#define KC_MORE 999\n");
    int edited = compile_in_child(c, "after an edit of a header");
    CHECK(!(edited & (CT_HIT | CT_BY_CLOSURE | CT_FAILED)));
    CHECK(ptx_says(c, "1234999"));
    test_write_text(test_path("include/more.h"), "#define KC_MORE 567\n");

    /*
     * A checkout at another path (a CI test job's workspace), its program
     * named in the key (the source says __FILE__, as CUB's asserts do): the
     * closure stands for any directory of a name without one, so the first
     * compile there is a hit by it too, with the kernel compiled for the
     * same name.
     */
    char named[600], moved[600], f[700], g[700];
    snprintf(named, sizeof(named), "%s/named.cu", test_dir());
    snprintf(moved, sizeof(moved), "%s/moved", test_dir());
    REQUIRE(mkdir(moved, 0700) == 0);
    snprintf(moved, sizeof(moved), "%s/moved/named.cu", test_dir());
    static const char named_src[] = "#include <val.h>\n"
                                    "__device__ const char where[] = __FILE__;\n"
                                    "extern \"C\" __global__ void k(int *v) { v[0] = KC_VAL + where[0]; }\n";
    test_write_text(named, named_src);
    test_write_text(moved, named_src);
    snprintf(f, sizeof(f), "%s/named.db", test_dir());
    snprintf(src, sizeof(src), "%s", named);
    CHECK(compile_in_child(f, "a program that names its file") == 0);
    export_to(f, bundle);
    import_into(g, sizeof(g), "workspace", bundle);
    snprintf(src, sizeof(src), "%s", moved);
    int there = compile_in_child(g, "first compile at another path after the import");
    if (!(there & CT_BY_CLOSURE))
        fprintf(stderr, "at another path the first compile resolved the includes again\n");
    CHECK(there == (CT_HIT | CT_BY_CLOSURE));
    CHECK(same_ptx(f, g));
    snprintf(src, sizeof(src), "%s", test_path("kern.cu"));

    /*
     * A bundle whose closure was copied onto another entry of its own (the
     * closure of KC_MORE 567 made to lead to the kernel of KC_MORE 999) must
     * not lead a cache away from the entry its own closure leads to: the
     * store keeps its own (doc/trust.md). The cache compiled the 567 kernel
     * before the import; its compile after the import must still be that.
     */
    char h[700], v[700], sql[600];
    snprintf(h, sizeof(h), "%s/home.db", test_dir());
    CHECK(compile_in_child(h, "home, KC_MORE 567") == 0);
    char k1[2 * KCACHE_KEY_SIZE + 1];
    {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        REQUIRE(sqlite3_open(h, &db) == SQLITE_OK);
        REQUIRE(sqlite3_prepare_v2(db, "SELECT hex(key) FROM entry", -1, &st, NULL) == SQLITE_OK);
        REQUIRE(sqlite3_step(st) == SQLITE_ROW);
        snprintf(k1, sizeof(k1), "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    test_write_text(test_path("include/more.h"), "#define KC_MORE 999\n");
    CHECK(compile_in_child(h, "home, KC_MORE 999") == 0);
    test_write_text(test_path("include/more.h"), "#define KC_MORE 567\n");
    export_to(h, bundle);
    snprintf(sql, sizeof(sql), "DELETE FROM manifest WHERE key <> X'%s' AND base <> key", k1);
    alter(bundle, sql);
    snprintf(sql, sizeof(sql),
             "UPDATE manifest SET key = (SELECT key FROM entry WHERE key <> X'%s')"
             " WHERE key = X'%s'",
             k1, k1);
    alter(bundle, sql);
    snprintf(v, sizeof(v), "%s/victim.db", test_dir());
    CHECK(compile_in_child(v, "victim, KC_MORE 567") == 0);
    CHECK(ptx_says(v, "1234567"));
    import_one(v, bundle);
    CHECK(compile_in_child(v, "victim after the import") == (CT_HIT | CT_BY_CLOSURE));
    if (!ptx_says(v, "1234567"))
        fprintf(stderr, "a carried closure led the victim's compile to another entry\n");
    CHECK(ptx_says(v, "1234567"));

    /* Signed: the closures under their own signature; one that does not match gives none. */
    REQUIRE(setenv("KCACHE_REMOTE_SECRET", "carried-closures", 1) == 0);
    export_to(a, bundle);
    import_into(d, sizeof(d), "signed", bundle);
    CHECK(compile_in_child(d, "signed bundle") == (CT_HIT | CT_BY_CLOSURE));
    alter(bundle, "UPDATE manifest SET recorded_at = recorded_at + 1");
    import_into(e, sizeof(e), "resigned", bundle);
    CHECK(compile_in_child(e, "closure changed after signing") == CT_HIT);
    CHECK(ct_counter(e, "closure_hits") == 0);
    return test_done();
}
