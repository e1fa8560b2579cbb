/*
 * -G and -dlto write the path NVRTC opened each header by into the bytes (the
 * debug information's file table; LTO-IR), and -lineinfo the file of every
 * function left a call (a __noinline__ function of a header's). kcache's
 * hermetic compile hands user headers to NVRTC in memory, each under the path
 * NVRTC would open it by (#line), so such a compile gives NVRTC's own bytes
 * and is cached with the paths and the working directory in its key: the
 * second round hits. (Before kcache-key-7 the headers went under names of
 * kcache's own: ".file 2 \"<the source's directory>/a.h\"" where NVRTC says
 * "<the -I directory>/a.h", so these compiled from disk, uncached.) Skips
 * (77) where the toolkit is missing.
 */
#include <kcache/compile.h>
#include <sys/stat.h>

#include "compiletest.h"

static char db[600], inc_opt[620], src_path[620];

/* What NVIDIA's NVRTC alone gives for text (its PTX, or LTO-IR with -dlto); *size set. */
static char *nvrtc_bytes(const kc_nvrtc *api, const char *text, const char *const *opts,
                         int n_opts, int ltoir, size_t *size)
{
    nvrtcProgram p;
    REQUIRE(api->CreateProgram(&p, text, src_path, 0, NULL, NULL) == NVRTC_SUCCESS);
    REQUIRE(api->CompileProgram(p, n_opts, opts) == NVRTC_SUCCESS);
    REQUIRE((ltoir ? api->GetLTOIRSize(p, size) : api->GetPTXSize(p, size)) == NVRTC_SUCCESS);
    char *out = malloc(*size);
    REQUIRE(out && (ltoir ? api->GetLTOIR(p, out) : api->GetPTX(p, out)) == NVRTC_SUCCESS);
    REQUIRE(api->DestroyProgram(&p) == NVRTC_SUCCESS);
    return out;
}

/* text compiled by kcache with opts and by NVRTC alone: the same bytes; *keyed, *hit set. */
static int same_as_nvrtc(const kc_nvrtc *api, const char *what, const char *text,
                         const char *flag, int *keyed, int *hit)
{
    int ltoir = !strcmp(flag, "-dlto");
    const char *opts[] = {"-arch=sm_90", inc_opt, flag};
    size_t want_size = 0;
    char *want = nvrtc_bytes(api, text, opts, 3, ltoir, &want_size);
    kcache_store *s = ct_store_open(db);
    REQUIRE(s);
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_kind kind = ltoir ? KCACHE_KIND_LTOIR : KCACHE_KIND_PTX;
    kcache_request r = ct_request(src_path, "sm_90", kind, opts + 1, 2);
    r.source = text;
    kcache_result *res = NULL;
    REQUIRE(kcache_compiler_compile(&res, c, &r) == 0);
    if (!ltoir && want_size && !want[want_size - 1])
        want_size--; /* NVRTC counts PTX's terminating NUL; kcache's size does not */
    int same = res->size == want_size && !memcmp(res->data, want, want_size);
    if (!same)
        fprintf(stderr, "%s %s: kcache's %zu bytes are not NVRTC's %zu\n", what, flag,
                res->size, want_size);
    *keyed = res->keyed;
    *hit = res->hit;
    kcache_result_free(res);
    kcache_compiler_free(c);
    kcache_store_close(s);
    free(want);
    return same;
}

int main(void)
{
    kc_toolkit tk;
    const kc_nvrtc *api = NULL;
    if (ct_nvrtc_find(&tk, &api))
        return TEST_SKIP;
    char inc[600], src[600], header[700];
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    snprintf(inc, sizeof(inc), "%s/inc", test_dir());
    snprintf(src, sizeof(src), "%s/src", test_dir());
    snprintf(inc_opt, sizeof(inc_opt), "-I%s", inc);
    snprintf(src_path, sizeof(src_path), "%s/k.cu", src);
    REQUIRE(mkdir(inc, 0700) == 0 && mkdir(src, 0700) == 0);
    snprintf(header, sizeof(header), "%s/a.h", inc);
    test_write_text(header, "#pragma once\n#define KC_SIX 6\n"
                            "template <class T> __device__ T kc_tw(T t) { return t << 4; }\n");
    snprintf(header, sizeof(header), "%s/m.h", inc);
    test_write_text(header, "#pragma once\n#define KC_SEVEN 7\n");
    static const char code[] = "#include \"a.h\"\n"
                               "extern \"C\" __global__ void k(int *o) {\n"
                               "    o[0] = kc_tw(KC_SIX);\n}\n";
    static const char macros[] = "#include \"m.h\"\n"
                                 "extern \"C\" __global__ void k(int *o) { o[0] = KC_SEVEN; }\n";
    static const char alone[] = "extern \"C\" __global__ void k(int *o) { o[0] = 8; }\n";
    static const char called[] = "#include \"f.h\"\n"
                                 "extern \"C\" __global__ void k(int *o) { o[0] = kc_f(o[1]); }\n";
    snprintf(header, sizeof(header), "%s/f.h", inc);
    test_write_text(header, "#pragma once\n__device__ __noinline__ int kc_f(int t) {\n"
                            "    int s = 0;\n    for (int i = 0; i < t; i++) s += i * t;\n"
                            "    return s;\n}\n");
    int keyed, hit;
    /* A user header under -G, -dlto and -lineinfo: NVRTC's bytes, then from the cache. */
    static const char *const paths[] = {"-G", "-dlto", "-lineinfo"};
    for (int round = 0; round < 2; round++) {
        CHECK(same_as_nvrtc(api, "a header's function left a call", called, "-lineinfo", &keyed,
                            &hit));
        CHECK(keyed && hit == round);
    }
    for (int i = 0; i < 3; i++)
        for (int round = 0; round < 2; round++) {
            CHECK(same_as_nvrtc(api, "a user header's code", code, paths[i], &keyed, &hit));
            CHECK(keyed && hit == round);
            CHECK(same_as_nvrtc(api, "a user header's macros", macros, paths[i], &keyed, &hit));
            CHECK(keyed && hit == round);
        }
    /* No user header: the hermetic bytes are NVRTC's, and cached. */
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 3; i++) {
            CHECK(same_as_nvrtc(api, "no user header", alone, paths[i], &keyed, &hit));
            CHECK(keyed && hit == round);
        }
    kc_toolkit_free(&tk);
    return test_done();
}
