/*
 * The key: what changes it, what must not, and a golden key that pins the
 * format. Keys are derived with KCACHE_COMPILE_KEY_ONLY, which never loads
 * NVRTC, against a fake toolkit whose identity is fixed, so these tests run
 * anywhere and the golden value only moves when the key format does.
 */
#include <fcntl.h>
#include <kcache/compile.h>
#include <sys/wait.h>

#include "testutil.h"

static const char *corpus;
static char toolkit[512];

#define write_text test_write_text
#define mkdirs(path) test_sh("mkdir -p '%s'", (path))
#define copy_tree(from, to) test_sh("rm -rf '%s' && cp -R '%s' '%s'", (to), (from), (to))

/* A 64-bit ELF holding only a GNU build-id note: the fake NVRTC's identity. */
static void write_fake_elf(const char *path, uint8_t fill)
{
    uint8_t f[64 + 56 + 36];
    memset(f, 0, sizeof(f));
    memcpy(f, "\177ELF", 4);
    f[4] = 2;  /* 64-bit */
    f[5] = 1;  /* little endian */
    f[6] = 1;
    f[16] = 3; /* ET_DYN */
    f[18] = 62;
    f[32] = 64;  /* e_phoff */
    f[52] = 64;  /* e_ehsize */
    f[54] = 56;  /* e_phentsize */
    f[56] = 1;   /* e_phnum */
    uint8_t *ph = f + 64;
    ph[0] = 4;   /* PT_NOTE */
    ph[8] = 120; /* p_offset */
    ph[32] = 36; /* p_filesz */
    uint8_t *note = f + 120;
    note[0] = 4;  /* namesz */
    note[4] = 20; /* descsz */
    note[8] = 3;  /* NT_GNU_BUILD_ID */
    memcpy(note + 12, "GNU", 4);
    memset(note + 16, fill, 20);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, f, sizeof(f)) == (ssize_t)sizeof(f));
    close(fd);
}

static void make_toolkit(const char *root, uint8_t id)
{
    char p[700];
    snprintf(p, sizeof(p), "%s/lib64", root);
    mkdirs(p);
    snprintf(p, sizeof(p), "%s/include", root);
    mkdirs(p);
    snprintf(p, sizeof(p), "%s/include/cuda.h", root);
    write_text(p, "#define CUDA_VERSION 13000\n");
    snprintf(p, sizeof(p), "%s/lib64/libnvrtc.so.%d", root, 13);
    write_fake_elf(p, id);
}

static kcache_compiler *compiler_for(const char *root)
{
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.no_store = 1;
    o.toolkit_root = root;
    kcache_compiler *c = NULL;
    char err[512];
    int rc = kcache_compiler_new(&c, &o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "compiler: %s\n", err);
    REQUIRE(rc == 0);
    return c;
}

struct req {
    const char *path;
    const char *name;
    const char *source;
    const char *arch;
    const char *opts[8];
    const char *exprs[4];
    const char *extra;
    kcache_kind output;
    unsigned flags;
};

static size_t count(const char *const *v, size_t max)
{
    size_t n = 0;
    while (n < max && v[n])
        n++;
    return n;
}

/* The key as hex, or "" with the message on failure. */
static void key_of(kcache_compiler *c, const struct req *q, char hex[KCACHE_KEY_HEX_SIZE])
{
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source_path = q->path;
    r.source_name = q->name;
    r.source = q->source;
    r.arch = q->arch ? q->arch : "sm_90";
    r.options = q->opts;
    r.n_options = count(q->opts, 8);
    r.name_exprs = q->exprs;
    r.n_name_exprs = count(q->exprs, 4);
    r.output = q->output;
    if (q->extra) {
        r.extra_digest = q->extra;
        r.extra_digest_size = strlen(q->extra);
    }
    r.flags = KCACHE_COMPILE_KEY_ONLY | q->flags;
    kcache_result *res = NULL;
    int rc = kcache_compiler_compile(&res, c, &r);
    if (rc) {
        fprintf(stderr, "key of %s: %s\n", q->path ? q->path : "(text)",
                res ? res->message : kcache_strerror(rc));
        hex[0] = '\0';
    } else {
        kcache_key_hex(hex, &res->key);
    }
    kcache_result_free(res);
}

#define SAME(a, b) CHECK((a)[0] && strcmp((a), (b)) == 0)
#define DIFFERENT(a, b) CHECK((a)[0] && (b)[0] && strcmp((a), (b)) != 0)

static void test_golden(void)
{
    kcache_compiler *c = compiler_for(toolkit);
    struct req q = {.source = "extern \"C\" __global__ void k(float *x) { x[0] = 1; }\n",
                    .arch = "sm_90",
                    .opts = {"-std=c++17", "-DN=4"},
                    .exprs = {"k"}};
    char hex[KCACHE_KEY_HEX_SIZE];
    key_of(c, &q, hex);
    /*
     * Pinned: if this fails, key derivation changed. That must be deliberate.
     * If the same inputs could now encode what other inputs encoded before,
     * bump KC_KEY_FORMAT (lib/key.h) so that old entries miss; then update
     * this value. (Changed twice: the toolkit component became a short digest;
     * kcache-key-2 keys headers by canonical name and handed bytes; kcache-key-3
     * after old headers were keyed with a zero digest; kcache-key-4 keys the
     * toolkit's -I directories; kcache-key-5 the environment NVRTC reads;
     * kcache-key-6 leaves the source's name out where it cannot matter;
     * kcache-key-7 hands headers under the paths NVRTC opens them by.)
     */
    const char *golden = "7e5a970d0c220be37507a8d0db6e70cc3f6365367948deffeddb121c7c75c90c";
    if (strcmp(hex, golden) != 0)
        fprintf(stderr, "golden key changed: %s\n", hex);
    CHECK(strcmp(hex, golden) == 0);
    kcache_compiler_free(c);
}

/* The same inputs give the same key in another process. */
static void test_other_process(void)
{
    kcache_compiler *c = compiler_for(toolkit);
    char path[700], here[KCACHE_KEY_HEX_SIZE];
    snprintf(path, sizeof(path), "%s/tiled_gemm.cu", corpus);
    struct req q = {.path = path, .exprs = {"tiled_gemm<float, 16>"}};
    key_of(c, &q, here);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        kcache_compiler *cc = compiler_for(toolkit);
        char there[KCACHE_KEY_HEX_SIZE];
        key_of(cc, &q, there);
        ssize_t w = write(fds[1], there, sizeof(there));
        _exit(w == (ssize_t)sizeof(there) ? 0 : 1);
    }
    char there[KCACHE_KEY_HEX_SIZE] = "";
    CHECK(read(fds[0], there, sizeof(there)) == (ssize_t)sizeof(there));
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    SAME(here, there);
    close(fds[0]);
    close(fds[1]);
    kcache_compiler_free(c);
}

static void test_inputs_change_key(void)
{
    kcache_compiler *c = compiler_for(toolkit);
    char tree[600], main_cu[700], inc[700], hdr[700], base[KCACHE_KEY_HEX_SIZE],
        k[KCACHE_KEY_HEX_SIZE];
    char src[700];
    snprintf(src, sizeof(src), "%s/headers", corpus);
    snprintf(tree, sizeof(tree), "%s/change", test_dir());
    copy_tree(src, tree);
    snprintf(main_cu, sizeof(main_cu), "%s/main.cu", tree);
    snprintf(inc, sizeof(inc), "-I%s/include", tree);
    struct req q = {.path = main_cu, .opts = {inc}};
    key_of(c, &q, base);

    /* each option, the architecture, the output kind, name expressions, the extra digest */
    const char *options[] = {"-DX=1", "-UY", "-std=c++17", "-lineinfo", "--use_fast_math",
                             "-G", "-maxrregcount=32", "--fmad=false", "-rdc=true"};
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        struct req o = q;
        o.opts[1] = options[i];
        key_of(c, &o, k);
        DIFFERENT(base, k);
    }
    struct req o = q;
    o.arch = "sm_80";
    key_of(c, &o, k);
    DIFFERENT(base, k);
    o.arch = "sm_90a";
    key_of(c, &o, k);
    DIFFERENT(base, k);
    o.arch = "compute_90";
    key_of(c, &o, k);
    DIFFERENT(base, k);
    o = q;
    o.output = KCACHE_KIND_PTX;
    key_of(c, &o, k);
    DIFFERENT(base, k);
    o = q;
    o.exprs[0] = "blend";
    key_of(c, &o, k);
    DIFFERENT(base, k);
    o = q;
    o.extra = "model-v2";
    key_of(c, &o, k);
    DIFFERENT(base, k);

    /* the source, a header at depth 1 and one at depth 2; each put back, the key is back */
    static const char *const edited[] = {"main.cu", "include/common.cuh",
                                         "include/detail/math.cuh"};
    for (size_t i = 0; i < sizeof(edited) / sizeof(edited[0]); i++) {
        snprintf(hdr, sizeof(hdr), "%s/%s", tree, edited[i]);
        FILE *f = fopen(hdr, "a");
        REQUIRE(f);
        fputs("// edited\n", f);
        fclose(f);
        key_of(c, &q, k);
        DIFFERENT(base, k);
        copy_tree(src, tree);
        key_of(c, &q, k);
        SAME(base, k);
    }

    /* a header appearing where none was: common.cuh beside main.cu now shadows -I's */
    snprintf(hdr, sizeof(hdr), "%s/common.cuh", tree);
    char missing_key[KCACHE_KEY_HEX_SIZE];
    struct req quoted = {.path = main_cu, .source = NULL, .opts = {inc}};
    key_of(c, &quoted, missing_key);
    write_text(hdr, "#pragma once\n#define SHADOW 1\n");
    /* <common.cuh> is angled: the source's directory is not searched, so no change ... */
    key_of(c, &quoted, k);
    SAME(missing_key, k);
    /* ... but a "quoted" include of a header that did not exist, then does: */
    char probe[700];
    snprintf(probe, sizeof(probe), "%s/probe.cu", tree);
    write_text(probe, "#if __has_include(\"maybe.cuh\")\n#include \"maybe.cuh\"\n#endif\n");
    struct req p = {.path = probe};
    char before[KCACHE_KEY_HEX_SIZE];
    key_of(c, &p, before);
    snprintf(hdr, sizeof(hdr), "%s/maybe.cuh", tree);
    write_text(hdr, "#define MAYBE 1\n");
    key_of(c, &p, k);
    DIFFERENT(before, k);
    kcache_compiler_free(c);
}

static void test_what_must_not_change_key(void)
{
    kcache_compiler *c = compiler_for(toolkit);
    char src[700], a[600], b[600], main_a[700], main_b[700], inc_a[700], inc_b[700];
    char ka[KCACHE_KEY_HEX_SIZE], kb[KCACHE_KEY_HEX_SIZE];
    snprintf(src, sizeof(src), "%s/headers", corpus);
    snprintf(a, sizeof(a), "%s/checkout-a", test_dir());
    snprintf(b, sizeof(b), "%s/elsewhere/deeper/checkout-b", test_dir());
    mkdirs(b);
    copy_tree(src, a);
    copy_tree(src, b);
    snprintf(main_a, sizeof(main_a), "%s/main.cu", a);
    snprintf(main_b, sizeof(main_b), "%s/main.cu", b);
    snprintf(inc_a, sizeof(inc_a), "-I%s/include", a);
    snprintf(inc_b, sizeof(inc_b), "-I%s/include", b);

    /* the checkout moved elsewhere */
    struct req qa = {.path = main_a, .opts = {inc_a}}, qb = {.path = main_b, .opts = {inc_b}};
    key_of(c, &qa, ka);
    key_of(c, &qb, kb);
    SAME(ka, kb);

    /* equivalent spellings */
    struct req s1 = {.path = main_a, .opts = {"-arch=sm_90", "-I", a, "-std=c++17", "-DX"},
                     .arch = NULL};
    struct req s2 = {.path = main_a, .opts = {"--gpu-architecture=sm_90", inc_a, "--std=c++17",
                                              "--define-macro=X"}};
    /* NVRTC 13 takes --std's value only after '=' (tests/compile/test_opts.c) */
    struct req s3 = {.path = main_a, .opts = {"-arch", "sm_90", "--include-path", a,
                                              "-std=c++17", "-D", "X"}};
    char k1[KCACHE_KEY_HEX_SIZE], k2[KCACHE_KEY_HEX_SIZE], k3[KCACHE_KEY_HEX_SIZE];
    s1.arch = s2.arch = s3.arch = NULL;
    /* the -I directory differs in spelling only; point all three at include/ */
    char inc_dir[700];
    snprintf(inc_dir, sizeof(inc_dir), "%s/include", a);
    s1.opts[2] = inc_dir;
    s3.opts[3] = inc_dir;
    key_of(c, &s1, k1);
    key_of(c, &s2, k2);
    key_of(c, &s3, k3);
    SAME(k1, k2);
    SAME(k1, k3);
    /* "-arch sm_90" in options and arch "sm_90" in the request are one */
    struct req s4 = {.path = main_a, .opts = {inc_a, "-std=c++17", "-DX"}, .arch = "SM90"};
    char k4[KCACHE_KEY_HEX_SIZE];
    key_of(c, &s4, k4);
    SAME(k1, k4);

    /* NVRTC's own cache, on or off, in any spelling: it cannot change the bytes */
    struct req nc1 = {.path = main_a, .opts = {inc_a, "-std=c++17", "-DX", "--no-cache"},
                     .arch = "sm_90"};
    struct req nc2 = {.path = main_a, .opts = {inc_a, "-no-cache", "-std=c++17", "-DX"},
                     .arch = "sm_90"};
    key_of(c, &nc1, k2);
    key_of(c, &nc2, k3);
    SAME(k1, k2);
    SAME(k1, k3);
    struct req nc3 = s4;
    nc3.flags = KCACHE_COMPILE_NVRTC_CACHE;
    key_of(c, &nc3, k2);
    SAME(k1, k2);

    /* name-expression order */
    char g[700];
    snprintf(g, sizeof(g), "%s/tiled_gemm.cu", corpus);
    struct req n1 = {.path = g, .exprs = {"tiled_gemm<float, 16>", "tiled_gemm<double, 8>"}};
    struct req n2 = {.path = g, .exprs = {"tiled_gemm<double, 8>", "tiled_gemm<float, 16>"}};
    key_of(c, &n1, k1);
    key_of(c, &n2, k2);
    SAME(k1, k2);

    /* editing a header the source never includes */
    key_of(c, &qa, k1);
    char unrelated[700];
    snprintf(unrelated, sizeof(unrelated), "%s/include/unrelated.cuh", a);
    write_text(unrelated, "#define UNRELATED 2\n");
    key_of(c, &qa, k2);
    SAME(k1, k2);

    /* a different NVRTC build is a different key */
    char other[600];
    snprintf(other, sizeof(other), "%s/toolkit-b", test_dir());
    make_toolkit(other, 0x77);
    kcache_compiler *c2 = compiler_for(other);
    key_of(c2, &qa, k3);
    DIFFERENT(k1, k3);
    kcache_compiler_free(c2);
    kcache_compiler_free(c);
}

static void test_bad_requests(void)
{
    kcache_compiler *c = compiler_for(toolkit);
    kcache_request r = KCACHE_REQUEST_INIT;
    kcache_result *res = NULL;
    r.source = "__global__ void k() {}";
    r.flags = KCACHE_COMPILE_KEY_ONLY;
    const char *bad_arch[] = {"sm_9", "sm_90x", "gfx90a", "", "sm_0900", "compute_"};
    for (size_t i = 0; i < sizeof(bad_arch) / sizeof(bad_arch[0]); i++) {
        r.arch = bad_arch[i];
        CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
        CHECK(res && strstr(res->message, "architecture"));
        kcache_result_free(res);
    }
    r.arch = NULL;
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "no GPU architecture"));
    kcache_result_free(res);
    r.arch = "compute_90";
    r.output = KCACHE_KIND_CUBIN;
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "virtual"));
    kcache_result_free(res);
    r.output = 0;
    r.arch = "sm_90";
    const char *two[] = {"-arch=sm_80"};
    r.options = two;
    r.n_options = 1;
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "two architectures"));
    kcache_result_free(res);
    const char *novalue[] = {"-D"};
    r.options = novalue;
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "needs a value"));
    kcache_result_free(res);
    r.options = NULL;
    r.n_options = 0;
    const char *bad_exprs[] = {"k", NULL};
    r.name_exprs = bad_exprs;
    r.n_name_exprs = 2;
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "name expression 1 is empty"));
    kcache_result_free(res);
    r.name_exprs = NULL;
    r.n_name_exprs = 0;
    r.source = "a\0b";
    r.source_size = 3;
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "NUL"));
    kcache_result_free(res);
    r.source = NULL;
    r.source_size = 0;
    r.source_path = "/nonexistent/kernel.cu";
    CHECK_RC(kcache_compiler_compile(&res, c, &r), KCACHE_EIO);
    CHECK(res && strstr(res->message, "/nonexistent/kernel.cu"));
    kcache_result_free(res);
    kcache_compiler_free(c);
}

/*
 * The program's name only where it can change the bytes (compile/progname.c):
 * CuPy names each program <a new temporary directory>/kern.cu.
 */
static void test_program_name(void)
{
    kcache_compiler *c = compiler_for(toolkit);
    static const char *const uses[] = {
        "",                                           /* the name reaches nothing */
        "__device__ const char *w = __FILE__;\n",
        "__device__ int n = sizeof(__BASE_FILE__);\n",
        "__device__ const char *w = __builtin_FILE();\n",
        "#line 40\n",
        "#define WHERE_FILE 1\n",                      /* an identifier with FILE in it */
        /* %:%: is ## (a digraph): its pieces spell __FILE__. */
        "#define C(a, b) a %:%: b\n#define X(a, b) C(a, b)\n"
        "__device__ int n = sizeof(X(__FI, LE__));\n",
    };
    for (size_t i = 0; i < sizeof(uses) / sizeof(uses[0]); i++) {
        char text[512], a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE];
        snprintf(text, sizeof(text), "%sextern \"C\" __global__ void k(int *o) { o[0] = 1; }\n",
                 uses[i]);
        struct req q = {.source = text, .name = "/tmp/tmpa1b2c3d4/kern.cu"};
        key_of(c, &q, a);
        q.name = "/tmp/tmpzz/kern.cu";
        key_of(c, &q, b);
        if (i == 0)
            SAME(a, b);
        else
            DIFFERENT(a, b);
    }
    /*
     * A user header's own __FILE__ names that header (CuPy's bundled CCCL is full
     * of them): the name stays out. Its macro that expands __FILE__, invoked in
     * the program, and its code naming __builtin_FILE (a default argument is
     * the caller's file): the name is keyed.
     */
    char inc[600], opt[620];
    snprintf(inc, sizeof(inc), "%s/progname-inc", test_dir());
    REQUIRE(mkdir(inc, 0700) == 0);
    test_write_text(test_path("progname-inc/own.h"),
                    "#define OWN_WHERE __FILE__\n__device__ const char *own = OWN_WHERE;\n");
    test_write_text(test_path("progname-inc/where.h"),
                    "#define INNER __FILE__\n#define WHERE (sizeof(INNER))\n");
    test_write_text(test_path("progname-inc/caller.h"),
                    "__device__ int at(const char *f = __builtin_FILE()) { return f[0]; }\n");
    /* ## keys the name only where its pieces can spell __FILE__ (CCCL's NAN, reduced). */
    test_write_text(test_path("progname-inc/paste.h"),
                    "#define CAT1(X, Y) X##Y\n#define CAT(X, Y) CAT1(X, Y)\n#define ABI 4\n"
                    "#define NS CAT(__, ABI)\nnamespace NS { __device__ const int v = 1; }\n"
                    "#define KC_NAN ::NS::v\n#define CWHERE /* a comment\n  */ __FILE__\n");
    /* A comment before a #define's name or its #; a macro's name past 255 bytes. */
    char long_name[1024];
    snprintf(long_name, sizeof(long_name),
             "#define L%0300d __BASE_FILE__\n__device__ int l = sizeof(L%0300d);\n", 0, 0);
    test_write_text(test_path("progname-inc/long.h"), long_name);
    test_write_text(test_path("progname-inc/hidden.h"),
                    "/* c */ #define HID1 __FILE__\n#/* c */define HID2 __FILE__\n");
    snprintf(opt, sizeof(opt), "-I%s", inc);
    static const char *const with_headers[][2] = {
        {"#include \"own.h\"\n", "same"},
        {"#include \"where.h\"\n__device__ int n = WHERE;\n", "different"},
        {"#include \"caller.h\"\n", "different"},
        {"#include \"paste.h\"\n__device__ int n = KC_NAN;\n", "same"},
        {"#include \"paste.h\"\n__device__ int n = sizeof(CAT(__FI, LE__));\n", "different"},
        {"#include \"paste.h\"\n__device__ int n = sizeof(CWHERE);\n", "different"},
        {"#include \"hidden.h\"\n__device__ int n = sizeof(HID1);\n", "different"},
        {"#include \"hidden.h\"\n__device__ int n = sizeof(HID2);\n", "different"},
        {"#include \"long.h\"\n", "different"},
    };
    for (size_t i = 0; i < sizeof(with_headers) / sizeof(with_headers[0]); i++) {
        char text[512], a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE];
        snprintf(text, sizeof(text), "%sextern \"C\" __global__ void k(int *o) { o[0] = 1; }\n",
                 with_headers[i][0]);
        struct req q = {.source = text, .name = "/tmp/tmpa1b2c3d4/kern.cu", .opts = {opt}};
        key_of(c, &q, a);
        q.name = "/tmp/tmpzz/kern.cu";
        key_of(c, &q, b);
        if (!strcmp(with_headers[i][1], "same"))
            SAME(a, b);
        else
            DIFFERENT(a, b);
    }
    /* Line information and LTO-IR hold the name whatever the source says. */
    static const char *const opts[][2] = {{"-lineinfo", NULL}, {"-G", NULL},
                                          {"--generate-line-info", NULL}, {"-dlto", NULL}};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        char a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE];
        struct req q = {.source = "extern \"C\" __global__ void k(int *o) { o[0] = 1; }\n",
                        .name = "/tmp/tmpa1b2c3d4/kern.cu", .opts = {opts[i][0]}};
        key_of(c, &q, a);
        q.name = "/tmp/tmpzz/kern.cu";
        key_of(c, &q, b);
        DIFFERENT(a, b);
    }
    kcache_compiler_free(c);
}

int main(void)
{
    corpus = getenv("CORPUS");
    /* meson test sets CORPUS to examples/; run by hand without it, skip and say why. */
    if (!corpus || access(corpus, R_OK) != 0) {
        printf("skipped: CORPUS (the repository's examples/) is %s%s\n",
               corpus ? "unreadable: " : "not set", corpus ? corpus : "");
        return TEST_SKIP;
    }
    snprintf(toolkit, sizeof(toolkit), "%s/toolkit", test_dir());
    make_toolkit(toolkit, 0x42);
    test_golden();
    test_other_process();
    test_inputs_change_key();
    test_what_must_not_change_key();
    test_bad_requests();
    test_program_name();
    return test_done();
}
