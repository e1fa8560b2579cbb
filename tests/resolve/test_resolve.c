/*
 * The include resolver alone, without NVRTC or a store: NVRTC's search order
 * (deps.h), what each lookup records for the manifest, one name per file, and
 * what makes a resolution not hermetic. The same orders are checked against
 * NVRTC reading the disk by tests/compile/test_compile.c; this file pins the
 * resolver's own answers so that a change to it shows here first.
 */
#include <string.h>
#include <sys/stat.h>

#include "resolve/deps.h"
#include "testutil.h"

static void mkdirs(const char *rel)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", test_path(rel));
    REQUIRE(system(cmd) == 0);
}

/* Resolves src (named dir/k.cu) with the -I directories given, relative to the test dir. */
static void resolve(kc_deps *out, const char *src, const char *const *incs, size_t n_incs,
                    const char *const *defines, size_t n_defines)
{
    static char dirs[8][512];
    static const char *dirv[8];
    REQUIRE(n_incs <= 8);
    for (size_t i = 0; i < n_incs; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s", test_path(incs[i]));
        dirv[i] = dirs[i];
    }
    char name[512];
    snprintf(name, sizeof(name), "%s", test_path("src/k.cu"));
    kc_deps_request req;
    memset(&req, 0, sizeof(req));
    req.source = src;
    req.source_size = strlen(src);
    req.source_name = name;
    req.source_dir = test_path("src");
    req.include_dirs = dirv;
    req.n_include_dirs = n_incs;
    req.defines = defines;
    req.n_defines = n_defines;
    char msg[512];
    memset(out, 0, sizeof(*out));
    REQUIRE(kc_deps_resolve(out, &req, msg, sizeof(msg)) == 0);
}

static const kc_dep *dep_with(const kc_deps *d, int state, const char *needle)
{
    for (size_t i = 0; i < d->n_deps; i++)
        if (d->deps[i].state == state && strstr(d->deps[i].content ? d->deps[i].content : "",
                                                needle))
            return &d->deps[i];
    return NULL;
}

static int probed(const kc_deps *d, const char *rel, int state)
{
    const char *want = test_path(rel);
    for (size_t i = 0; i < d->n_probes; i++)
        if (strcmp(d->probes[i].path, want) == 0 && d->probes[i].state == state)
            return 1;
    return 0;
}

/* "quoted": beside the source first, then -I in order; the miss beside it is recorded. */
static void test_quoted_order(void)
{
    mkdirs("src");
    mkdirs("a");
    mkdirs("b");
    test_write_text(test_path("a/q.h"), "int from_a;\n");
    test_write_text(test_path("b/q.h"), "int from_b;\n");
    const char *incs[] = {"a", "b"};
    kc_deps d;
    resolve(&d, "#include \"q.h\"\n", incs, 2, NULL, 0);
    CHECK(!d.not_hermetic);
    CHECK(dep_with(&d, KC_DEP_USER, "from_a"));
    CHECK(!dep_with(&d, KC_DEP_USER, "from_b"));
    CHECK(probed(&d, "src/q.h", KC_PROBE_ABSENT));
    CHECK(probed(&d, "a/q.h", KC_PROBE_FILE));
    kc_deps_free(&d);

    /* Beside the source wins over every -I directory. */
    test_write_text(test_path("src/q.h"), "int from_src;\n");
    resolve(&d, "#include \"q.h\"\n", incs, 2, NULL, 0);
    CHECK(dep_with(&d, KC_DEP_USER, "from_src"));
    CHECK(!dep_with(&d, KC_DEP_USER, "from_a"));
    kc_deps_free(&d);
    CHECK(unlink(test_path("src/q.h")) == 0);
}

/* <angled>: -I directories only, never beside the source. */
static void test_angled_skips_source_dir(void)
{
    test_write_text(test_path("src/w.h"), "int beside;\n");
    test_write_text(test_path("b/w.h"), "int in_b;\n");
    const char *incs[] = {"a", "b"};
    kc_deps d;
    resolve(&d, "#include <w.h>\n", incs, 2, NULL, 0);
    CHECK(dep_with(&d, KC_DEP_USER, "in_b"));
    CHECK(!dep_with(&d, KC_DEP_USER, "beside"));
    CHECK(probed(&d, "a/w.h", KC_PROBE_ABSENT));
    kc_deps_free(&d);
}

/* A name without '.' takes NAME.stdh in a directory ahead of NAME in a later one. */
static void test_stdh(void)
{
    mkdirs("e");
    mkdirs("d");
    test_write_text(test_path("e/vec.stdh"), "int stdh_in_e;\n");
    test_write_text(test_path("d/vec"), "int plain_in_d;\n");
    const char *incs[] = {"e", "d"};
    kc_deps d;
    resolve(&d, "#include <vec>\n", incs, 2, NULL, 0);
    CHECK(dep_with(&d, KC_DEP_USER, "stdh_in_e"));
    CHECK(!dep_with(&d, KC_DEP_USER, "plain_in_d"));
    kc_deps_free(&d);
}

/* One file reached by two spellings is one header, so include guards hold as on disk. */
static void test_one_name_per_file(void)
{
    mkdirs("t/sub");
    test_write_text(test_path("t/cfg.h"), "int the_config;\n");
    test_write_text(test_path("t/sub/user.h"), "#include \"../cfg.h\"\n");
    const char *incs[] = {"t", "t/sub"};
    kc_deps d;
    resolve(&d, "#include \"cfg.h\"\n#include \"user.h\"\n", incs, 2, NULL, 0);
    CHECK(!d.not_hermetic);
    size_t n = 0;
    for (size_t i = 0; i < d.n_deps; i++)
        if (d.deps[i].state == KC_DEP_USER && d.deps[i].content &&
            strstr(d.deps[i].content, "the_config"))
            n++;
    CHECK(n == 1);
    kc_deps_free(&d);
}

/* A __has_include in a -D value is looked up, found or not: it is an input. */
static void test_has_include_in_define(void)
{
    const char *incs[] = {"a"};
    const char *defs[] = {"HAS=__has_include(\"opt.h\")"};
    kc_deps d;
    resolve(&d, "#if HAS\nint yes;\n#endif\n", incs, 1, defs, 1);
    CHECK(!d.not_hermetic);
    CHECK(probed(&d, "a/opt.h", KC_PROBE_ABSENT));
    kc_deps_free(&d);
}

/* What the resolver cannot follow makes the compile uncached, with a reason. */
static void test_not_hermetic(void)
{
    const char *incs[] = {"a"};
    kc_deps d;
    resolve(&d, "#include_next <q.h>\n", incs, 1, NULL, 0);
    CHECK(d.not_hermetic);
    CHECK(d.reason[0] && test_one_line(d.problem));
    kc_deps_free(&d);
}

int main(void)
{
    test_quoted_order();
    test_angled_skips_source_dir();
    test_stdh();
    test_one_name_per_file();
    test_has_include_in_define();
    test_not_hermetic();
    return test_failures ? 1 : 0;
}
