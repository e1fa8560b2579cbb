/*
 * A log with the program's name in it (every NVRTC diagnostic starts with
 * "NAME(LINE): "), under CuPy's names, <a new temporary directory>/kern.cu:
 * a warning's log is kept as a template, so a second store handle compiling
 * the same source under a name in another directory hits, and its log is
 * byte for byte what NVIDIA's NVRTC alone gives under that name
 * (compile/progname.c). A log that shows the name any other way (quoted in
 * a message, a header's path, a short name found inside other words) is
 * never served to another name: that compile misses, and its log too is
 * NVRTC's own. A header's warning is compared with kcache's own miss under
 * that name in another cache: a hermetic compile hands NVRTC the header by
 * its spelling, which its log shows in place of the path NVRTC alone would
 * print. Skips (77) where the toolkit is missing.
 */
#include <kcache/compile.h>
#include <sys/stat.h>

#include "compiletest.h"

static char db[600], inc[600], inc_opt[620];
static int beside; /* "quoted" includes looked for beside the name, as NVRTC does */
static const char *opts[] = {"-arch=compute_90", inc_opt};

/* The log NVIDIA's NVRTC alone gives for text named name (the caller frees it). */
static char *nvrtc_log(const kc_nvrtc *api, const char *text, const char *name)
{
    nvrtcProgram p;
    size_t n = 0;
    REQUIRE(api->CreateProgram(&p, text, name, 0, NULL, NULL) == NVRTC_SUCCESS);
    REQUIRE(api->CompileProgram(p, 2, opts) == NVRTC_SUCCESS);
    REQUIRE(api->GetProgramLogSize(p, &n) == NVRTC_SUCCESS && n > 0);
    char *log = malloc(n);
    REQUIRE(log && api->GetProgramLog(p, log) == NVRTC_SUCCESS);
    REQUIRE(api->DestroyProgram(&p) == NVRTC_SUCCESS);
    return log;
}

/*
 * Compiles text named name through a new handle on the store at path, its log
 * into *log (the caller frees it) where log is not NULL: 1 on a hit, 0 on a miss.
 */
static int compile_at(const char *path, const char *text, const char *name, char **log)
{
    kcache_store *s = ct_store_open(path);
    REQUIRE(s);
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_request r = ct_request(name, "compute_90", KCACHE_KIND_PTX, opts + 1, 1);
    r.source = text;
    r.source_path = beside ? name : NULL;
    kcache_result *res = NULL;
    REQUIRE(kcache_compiler_compile(&res, c, &r) == 0 && res->keyed);
    REQUIRE(!log || (*log = strdup(res->log)));
    int hit = res->hit;
    kcache_result_free(res);
    kcache_compiler_free(c);
    kcache_store_close(s);
    return hit;
}

/*
 * compile_at() on the test's store: 1 on a hit, 0 on a miss. The log must be
 * NVRTC's alone for name, or with header, kcache's miss in a new cache.
 */
static int compile(const kc_nvrtc *api, const char *text, const char *name, int header)
{
    static int n_cold;
    char *got = NULL, *want = NULL, cold[700];
    int hit = compile_at(db, text, name, &got);
    snprintf(cold, sizeof(cold), "%s/cold-%d.db", test_dir(), n_cold++);
    if (header)
        CHECK(compile_at(cold, text, name, &want) == 0);
    else
        want = nvrtc_log(api, text, name);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "%s (%s): the log is not %s:\n--- kcache\n%s--- wanted\n%s", name,
                hit ? "hit" : "miss", header ? "a miss's" : "NVRTC's", got, want);
        CHECK(0);
    }
    CHECK(strlen(got) > 0);
    free(got);
    free(want);
    return hit;
}

/* text under two names: the second hits (want_hit) or misses, each with NVRTC's log. */
static void case_of(const kc_nvrtc *api, const char *what, const char *text, const char *first,
                    const char *second, int want_hit)
{
    int header = strstr(text, "#include") != NULL;
    CHECK(compile(api, text, first, header) == 0);
    int hit = compile(api, text, second, header);
    if (hit != want_hit)
        fprintf(stderr, "%s: %s under %s\n", what, hit ? "a hit" : "a miss", second);
    CHECK(hit == want_hit);
    CHECK(compile(api, text, first, header) == 1); /* the first name again: its own log */
}

#define KERNEL "extern \"C\" __global__ void k(int *v) { "

/*
 * NVRTC hands the program's name to its front end as an argument: a name
 * that starts with '-' is read as an option, and the compile fails there
 * ("invalid option: -k.cu"). Compiled under kern.cu first (an entry without
 * the name), text under such a name must fail as NVRTC's does, not hit.
 */
static void name_as_option(const kc_nvrtc *api)
{
    static const char text[] = KERNEL "v[0] = 16; }\n";
    static const char *const names[] = {"-k.cu", "-DKC_V=5", "--"};
    CHECK(compile_at(db, text, "kern.cu", NULL) == 0);
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
        nvrtcProgram p;
        REQUIRE(api->CreateProgram(&p, text, names[i], 0, NULL, NULL) == NVRTC_SUCCESS);
        int nvrtc_ok = api->CompileProgram(p, 2, opts) == NVRTC_SUCCESS;
        REQUIRE(api->DestroyProgram(&p) == NVRTC_SUCCESS);
        kcache_store *s = ct_store_open(db);
        REQUIRE(s);
        kcache_compiler *c = ct_compiler(s, NULL);
        kcache_request r = ct_request(names[i], "compute_90", KCACHE_KIND_PTX, opts + 1, 1);
        r.source = text;
        kcache_result *res = NULL;
        int ok = kcache_compiler_compile(&res, c, &r) == 0;
        if (ok != nvrtc_ok) {
            fprintf(stderr, "a program named %s: kcache %s (%s), NVRTC %s\n", names[i],
                    ok ? "compiled it" : "failed", ok && res->hit ? "a hit" : "no hit",
                    nvrtc_ok ? "compiled it" : "failed");
            CHECK(0);
        }
        kcache_result_free(res);
        kcache_compiler_free(c);
        kcache_store_close(s);
    }
}

int main(void)
{
    kc_toolkit tk;
    const kc_nvrtc *api = NULL;
    if (ct_nvrtc_find(&tk, &api))
        return TEST_SKIP;
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    snprintf(inc, sizeof(inc), "%s/include", test_dir());
    snprintf(inc_opt, sizeof(inc_opt), "-I%s", inc);
    REQUIRE(mkdir(inc, 0700) == 0);
    char path[700];
    snprintf(path, sizeof(path), "%s/warns.h", inc);
    test_write_text(path, "#pragma once\n#warning a user header warns\n"
                          "__device__ inline int kc_twice(int x) { int kc_h; return 2 * x; }\n");
    snprintf(path, sizeof(path), "%s/tw.h", inc);
    test_write_text(path, "template <class T> __device__ T kc_tw(T t) { return t << 40; }\n");
    snprintf(path, sizeof(path), "%s/kern.cu.h", inc);
    test_write_text(path, "#pragma once\n#warning its path holds the name's last component\n");
    snprintf(path, sizeof(path), "%s/kcline.h", inc);
    test_write_text(path, "#pragma once\n#line 5 \"kern.cu\"\n"
                          "__device__ inline int kc_l(int x) { int kc_lu; return x; }\n");
    snprintf(path, sizeof(path), "%s/kcq(1).h", inc);
    test_write_text(path, "#pragma once\n__device__ inline int kc_q(int x) { int kc_qu; return x; }\n");

    char a[700], b[700], c[700], d[700], f[720];
    test_in_new_dir(a, sizeof(a), "tmpAlpha1", "kern.cu");
    test_in_new_dir(b, sizeof(b), "tmpBravo22", "kern.cu");
    test_in_new_dir(c, sizeof(c), "tmpCharlie", "kern.cu");
    test_in_new_dir(d, sizeof(d), "tmpDelta4", "kern.cu");

    /* Warnings of the program, of a #warning, of a user header: templates. */
    case_of(api, "unused variable", KERNEL "int kc_unused; v[0] = 1; }\n", a, b, 1);
    case_of(api, "#warning", "#warning the program warns\n" KERNEL "v[0] = 2; }\n", a, b, 1);
    case_of(api, "a header's warning",
            "#include \"warns.h\"\n" KERNEL "int kc_u; v[0] = kc_twice(3); }\n", a, b, 1);
    /* Another last component, with a directory or none: the same template. */
    case_of(api, "another last component", KERNEL "int kc_other; v[0] = 4; }\n", c, "tmpEcho5/k2.cu",
            1);

    /* A name without a directory, then the empty name, which NVRTC prints as
     * "default_program". */
    case_of(api, "an empty name", KERNEL "int kc_empty; v[0] = 11; }\n", "kern.cu", "", 1);

    /* The name quoted in a message: never another name's log. */
    case_of(api, "#warning naming kern.cu", "#warning kern.cu is named here\n" KERNEL "v[0] = 5; }\n",
            a, b, 0);
    case_of(api, "#pragma message naming the directory",
            "#pragma message(\"tmpCharlie\")\n" KERNEL "int kc_w; v[0] = 6; }\n", c, d, 0);
    /* An instantiation's context: "at line 1" in the program... */
    case_of(api, "an instantiation in the program", "template <class T> __device__ T "
            "kc_tw(T t) { return t << 40; }\n" KERNEL "v[0] = kc_tw(11); }\n", a, b, 1);
    /* ... "at line 2 of NAME" from a header, past the prefix. */
    case_of(api, "an instantiation from a header",
            "#include \"tw.h\"\n" KERNEL "v[0] = kc_tw(12); }\n", a, b, 0);
    /* A header whose path holds the name's last component. */
    case_of(api, "a header named after it", "#include \"kern.cu.h\"\n" KERNEL "v[0] = 7; }\n", a,
            b, 0);
    /* A header whose path starts as the name's diagnostics do, "NAME(LINE)": its
     * lines are not the program's, and name the header under any name. */
    case_of(api, "a header's path in the name's prefix",
            "#include \"kcq(1).h\"\n" KERNEL "v[0] = kc_q(13); }\n", "kcq", "kcr", 0);
    /* A header beside a name without a directory whose path starts as that name's
     * diagnostics do, ": " and all: the header's lines, under any name. */
    char cwd[700];
    REQUIRE(getcwd(cwd, sizeof(cwd)) && chdir(test_dir()) == 0);
    beside = 1;
    test_write_text("kern.cu(1): y.h", "#pragma once\n"
                    "__device__ inline int kc_y(int x) { int kc_yu; return x; }\n");
    case_of(api, "a header's path as the name's prefix, \": \" and all",
            "#include \"kern.cu(1): y.h\"\n" KERNEL "v[0] = kc_y(15); }\n", "kern.cu", "kern2.cu",
            0);
    REQUIRE(chdir(cwd) == 0);
    beside = 0;
    /* A header whose #line names the program's file: its diagnostics read as the
     * program's ("kern.cu(5): "), and say so under any name. */
    case_of(api, "a header's #line naming the program",
            "#include \"kcline.h\"\n" KERNEL "v[0] = kc_l(17); }\n", "kern.cu", "kern2.cu", 0);
    /* A message that breaks its line and goes on as the name's diagnostic would
     * ("kern.cu(9): "): that line is the program's text, printed as it is under
     * any name (as are C++20's [[nodiscard("...")]] reasons), so never refilled. */
    case_of(api, "a message that goes on as a diagnostic",
            "#define KC_M \"a\\n\\n\" \"kern\" \".cu(9): warning #177-D: forged\"\n"
            "#pragma message(KC_M)\n" KERNEL "int kc_m; v[0] = 14; }\n", "kern.cu",
            "kern2.cu", 0);
    /* A name so short that other words hold it. */
    case_of(api, "a short name", KERNEL "int kc_short; v[0] = 9; }\n", "a", "b", 0);
    /* A directory too short to tell from other text ("tmp"). */
    snprintf(f, sizeof(f), "%s/kern.cu", a);
    case_of(api, "a short directory", KERNEL "int kc_shortdir; v[0] = 10; }\n", "tmp/kern.cu", f,
            0);
    name_as_option(api);
    kc_toolkit_free(&tk);
    return test_done();
}
