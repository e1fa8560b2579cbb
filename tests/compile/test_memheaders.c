/*
 * Headers handed over in memory (kcache_request v2, nvrtcCreateProgram's
 * headers and includeNames): the key covers each by name and content, an
 * include finds one by its exact spelling before anything on disk (NVRTC's
 * rule), and a version 1 request is read as one without them. Keys only
 * (KCACHE_COMPILE_KEY_ONLY): NVRTC is never loaded.
 */
#include <kcache/compile.h>

#include "testutil.h"

static kcache_compiler *compiler;

struct mem {
    const char *names[3];
    const char *contents[3];
};

static size_t n_of(const struct mem *m)
{
    size_t n = 0;
    while (n < 3 && m->names[n])
        n++;
    return n;
}

/* The key as hex, "" on failure or when not keyed (*status gets the status). */
static void key_of(char hex[KCACHE_KEY_HEX_SIZE], const char *src, const struct mem *m,
                   const char *inc, unsigned version, int *status)
{
    const char *opts[] = {inc};
    kcache_request r = KCACHE_REQUEST_INIT;
    r.version = version;
    r.source = src;
    r.source_name = "k.cu";
    r.arch = "sm_90";
    r.options = opts;
    r.n_options = inc ? 1 : 0;
    r.flags = KCACHE_COMPILE_KEY_ONLY;
    if (m) {
        r.n_headers = n_of(m);
        r.header_names = m->names;
        r.header_contents = m->contents;
    }
    kcache_result *res = NULL;
    int rc = kcache_compiler_compile(&res, compiler, &r);
    if (status)
        *status = rc;
    hex[0] = '\0';
    /* A key that cannot be sound (keyed 0) is no key for these tests. */
    if (!rc && res->keyed)
        kcache_key_hex(hex, &res->key);
    else if (!rc)
        printf("not keyed: %s\n", res->store_message);
    kcache_result_free(res);
}

#define SAME(a, b) CHECK((a)[0] && strcmp((a), (b)) == 0)
#define DIFFERENT(a, b) CHECK((a)[0] && (b)[0] && strcmp((a), (b)) != 0)

static const char *const SRC = "#include \"vec.h\"\n__global__ void k(float *p) { p[0] = f(); }\n";

static void test_name_and_content(void)
{
    char a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE];
    struct mem m = {{"vec.h"}, {"__device__ float f() { return 1; }\n"}};
    key_of(a, SRC, &m, NULL, KCACHE_REQUEST_VERSION, NULL);
    struct mem edited = {{"vec.h"}, {"__device__ float f() { return 2; }\n"}};
    key_of(b, SRC, &edited, NULL, KCACHE_REQUEST_VERSION, NULL);
    DIFFERENT(a, b);
    struct mem renamed = {{"vec2.h"}, {"__device__ float f() { return 1; }\n"}};
    key_of(b, SRC, &renamed, NULL, KCACHE_REQUEST_VERSION, NULL);
    DIFFERENT(a, b);
    /* One the source never includes still counts: NVRTC was handed it. */
    struct mem more = {{"vec.h", "unused.h"}, {m.contents[0], "int x;\n"}};
    key_of(b, SRC, &more, NULL, KCACHE_REQUEST_VERSION, NULL);
    DIFFERENT(a, b);
    /* Same inputs, same key. */
    key_of(b, SRC, &m, NULL, KCACHE_REQUEST_VERSION, NULL);
    SAME(a, b);
}

static void test_nested(void)
{
    char a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE];
    struct mem m = {{"vec.h", "inner.h"}, {"#include \"inner.h\"\n", "#define V 1\n"}};
    struct mem edited = {{"vec.h", "inner.h"}, {"#include \"inner.h\"\n", "#define V 2\n"}};
    key_of(a, SRC, &m, NULL, KCACHE_REQUEST_VERSION, NULL);
    key_of(b, SRC, &edited, NULL, KCACHE_REQUEST_VERSION, NULL);
    DIFFERENT(a, b);
}

/* A header in memory is found before one on disk: the disk's is never read. */
static void test_memory_before_disk(void)
{
    char a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE], c[KCACHE_KEY_HEX_SIZE];
    char d1[600], d2[600], p[700], i1[700], i2[700];
    snprintf(d1, sizeof(d1), "%s/one", test_dir());
    snprintf(d2, sizeof(d2), "%s/two", test_dir());
    test_sh("mkdir -p '%s' '%s'", d1, d2);
    snprintf(p, sizeof(p), "%s/vec.h", d1);
    test_write_text(p, "__device__ float f() { return 10; }\n");
    snprintf(p, sizeof(p), "%s/vec.h", d2);
    test_write_text(p, "__device__ float f() { return 20; }\n");
    snprintf(i1, sizeof(i1), "-I%s", d1);
    snprintf(i2, sizeof(i2), "-I%s", d2);
    struct mem m = {{"vec.h"}, {"__device__ float f() { return 1; }\n"}};
    key_of(a, SRC, &m, i1, KCACHE_REQUEST_VERSION, NULL);
    key_of(b, SRC, &m, i2, KCACHE_REQUEST_VERSION, NULL);
    SAME(a, b);
    /* Without it, the disk's header is what counts. */
    key_of(b, SRC, NULL, i1, KCACHE_REQUEST_VERSION, NULL);
    key_of(c, SRC, NULL, i2, KCACHE_REQUEST_VERSION, NULL);
    DIFFERENT(b, c);
    DIFFERENT(a, b);
}

/*
 * NVRTC looks for an in-memory header's "quoted" includes beside its name,
 * relative to the working directory: "sub/h.h" including "g.h" reads
 * ./sub/g.h. That file is an input like any other.
 */
static void test_beside_the_name(void)
{
    char a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE], cwd[600], d[600], p[700];
    REQUIRE(getcwd(cwd, sizeof(cwd)) != NULL);
    snprintf(d, sizeof(d), "%s/beside", test_dir());
    test_sh("mkdir -p '%s/sub'", d);
    REQUIRE(chdir(d) == 0);
    struct mem m = {{"vec.h", "sub/h.h"}, {"#include \"sub/h.h\"\n", "#include \"g.h\"\n"}};
    snprintf(p, sizeof(p), "%s/sub/g.h", d);
    test_write_text(p, "__device__ float f() { return 1; }\n");
    key_of(a, SRC, &m, NULL, KCACHE_REQUEST_VERSION, NULL);
    test_write_text(p, "__device__ float f() { return 2; }\n");
    key_of(b, SRC, &m, NULL, KCACHE_REQUEST_VERSION, NULL);
    DIFFERENT(a, b);
    REQUIRE(chdir(cwd) == 0);
}

static void test_versions_and_bad_requests(void)
{
    char a[KCACHE_KEY_HEX_SIZE], b[KCACHE_KEY_HEX_SIZE];
    int rc;
    /* Version 1 requests have no header fields: whatever lies there is not read. */
    struct mem m = {{"vec.h"}, {"__device__ float f() { return 1; }\n"}};
    key_of(a, SRC, &m, NULL, 1, &rc);
    key_of(b, SRC, NULL, NULL, KCACHE_REQUEST_VERSION, NULL);
    SAME(a, b);
    struct mem no_content = {{"vec.h"}, {NULL}};
    key_of(a, SRC, &no_content, NULL, KCACHE_REQUEST_VERSION, &rc);
    CHECK(rc == KCACHE_EINVAL);
    struct mem no_name = {{""}, {"int x;\n"}};
    key_of(a, SRC, &no_name, NULL, KCACHE_REQUEST_VERSION, &rc);
    CHECK(rc == KCACHE_EINVAL);
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source = SRC;
    r.arch = "sm_90";
    r.flags = KCACHE_COMPILE_KEY_ONLY;
    r.n_headers = 2;
    kcache_result *res = NULL;
    CHECK(kcache_compiler_compile(&res, compiler, &r) == KCACHE_EINVAL);
    CHECK(res && strstr(res->message, "n_headers"));
    kcache_result_free(res);
}

int main(void)
{
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.no_store = 1;
    char err[512];
    if (kcache_compiler_new(&compiler, &o, err, sizeof(err)) != 0) {
        printf("SKIP: no CUDA toolkit: %s\n", err);
        return TEST_SKIP;
    }
    test_name_and_content();
    test_nested();
    test_memory_before_disk();
    test_beside_the_name();
    test_versions_and_bad_requests();
    kcache_compiler_free(compiler);
    return test_done();
}
