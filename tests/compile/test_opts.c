/*
 * NVRTC options as NVRTC 13 reads them (compile/opts.c), compiled through
 * the cache against NVRTC alone: a spelling NVRTC rejects fails, never a
 * cached success; a value of any length works; several -arch give NVRTC's
 * kind and bytes. tests/nvrtc-shim/test_opts_walk.py walks every option.
 * Skips (77) where the toolkit is missing.
 */
#include <kcache/compile.h>
#include <stdlib.h>

#include "compiletest.h"
#include "compile/compileint.h"
#include "compile/key.h"
#include "cuda/toolkit.h"

static const char kernel[] = "extern \"C\" __global__ void k(float *x)\n"
                             "{\n"
                             "#ifdef X\n"
                             "    x[0] = X;\n"
                             "#endif\n"
                             "    x[threadIdx.x] = sqrtf(x[threadIdx.x]) / 3.0f;\n"
                             "}\n";
static const char *source = kernel; /* what the cases compile */

/* What NVRTC alone makes of the options: 0 and its first output, or its error. */
struct made {
    int rc;
    kcache_kind kind;
    char *data;
    size_t size;
};

static struct made nvrtc_alone(const kc_nvrtc *api, const char *const *opts, int n)
{
    struct made m = {0};
    nvrtcProgram p;
    REQUIRE(api->CreateProgram(&p, source, "k.cu", 0, NULL, NULL) == NVRTC_SUCCESS);
    m.rc = (int)api->CompileProgram(p, n, opts);
    if (m.rc == 0) {
        m.kind = KCACHE_KIND_CUBIN;
        if (api->GetCUBINSize(p, &m.size) != NVRTC_SUCCESS || m.size == 0) {
            m.kind = KCACHE_KIND_PTX;
            REQUIRE(api->GetPTXSize(p, &m.size) == NVRTC_SUCCESS);
        }
        REQUIRE((m.data = malloc(m.size)));
        REQUIRE((m.kind == KCACHE_KIND_CUBIN ? api->GetCUBIN(p, m.data)
                                             : api->GetPTX(p, m.data)) == NVRTC_SUCCESS);
        if (m.kind == KCACHE_KIND_PTX)
            m.size = strlen(m.data); /* kcache keeps PTX without its NUL */
    }
    api->DestroyProgram(&p);
    return m;
}

static kcache_result *through_kcache(kcache_compiler *c, const char *const *opts, size_t n)
{
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source = source;
    r.source_name = "k.cu";
    r.options = opts;
    r.n_options = n;
    kcache_result *res = NULL;
    kcache_compiler_compile(&res, c, &r);
    REQUIRE(res);
    return res;
}

static const char *kind_name(int ok, kcache_kind kind)
{
    return ok && kcache_kind_name(kind) ? kcache_kind_name(kind) : "nothing";
}

/* kcache's verdict and bytes are NVRTC's, on a miss and on the call after it. */
static void same_as_nvrtc(kcache_compiler *c, const kc_nvrtc *api, const char *what,
                          const char *const *opts, size_t n)
{
    struct made want = nvrtc_alone(api, opts, (int)n);
    for (int round = 0; round < 2; round++) {
        kcache_result *res = through_kcache(c, opts, n);
        int same = (res->status == 0) == (want.rc == 0);
        if (same && want.rc == 0)
            same = res->kind == want.kind && res->size == want.size &&
                   memcmp(res->data, want.data, want.size) == 0;
        if (!same)
            fprintf(stderr, "%s (%s): NVRTC alone: rc %d, %s of %zu bytes; kcache: status %d "
                    "(%s), %s of %zu bytes%s\n", what, round ? "again" : "first", want.rc,
                    kind_name(want.rc == 0, want.kind), want.size, res->status, res->message,
                    kind_name(res->status == 0, res->kind), res->size, res->hit ? ", a hit" : "");
        CHECK(same);
        kcache_result_free(res);
    }
    free(want.data);
}

/* Spellings NVRTC 13 rejects: one-dash long names, a separate value where it takes none. */
static void test_rejected_spellings(kcache_compiler *c, const kc_nvrtc *api)
{
    const char *line_info[] = {"-arch=sm_90", "-generate-line-info"};
    const char *debug[] = {"-arch=sm_90", "-device-debug"};
    const char *include[] = {"-arch=sm_90", "-include-path=inc"};
    const char *std[] = {"-arch=sm_90", "-std", "c++17"};
    const char *seed[] = {"-arch=sm_90", "--frandom-seed", "5"};
    const char *arch[] = {"-arch=SM_90"};
    same_as_nvrtc(c, api, "-generate-line-info", line_info, 2);
    same_as_nvrtc(c, api, "-device-debug", debug, 2);
    same_as_nvrtc(c, api, "-include-path=inc", include, 2);
    same_as_nvrtc(c, api, "-std c++17", std, 3);
    same_as_nvrtc(c, api, "--frandom-seed 5", seed, 3);
    same_as_nvrtc(c, api, "-arch=SM_90", arch, 1);
    /* ...and the spellings it takes, for contrast. */
    const char *line_info2[] = {"-arch=sm_90", "--generate-line-info"};
    const char *std2[] = {"-arch", "sm_90", "-std=c++17"};
    same_as_nvrtc(c, api, "--generate-line-info", line_info2, 2);
    same_as_nvrtc(c, api, "-arch sm_90 -std=c++17", std2, 3);
}

/* -D values of 5 KiB and 1 MiB: no buffer in the way. */
static void test_long_values(kcache_compiler *c, const kc_nvrtc *api)
{
    size_t sizes[] = {5000, 1u << 20};
    for (size_t i = 0; i < 2; i++) {
        char *def = malloc(sizes[i] + 16);
        REQUIRE(def);
        size_t n = (size_t)sprintf(def, "-DX=(1");
        while (n + 3 < sizes[i])
            n += (size_t)sprintf(def + n, "+0");
        sprintf(def + n, ")");
        const char *opts[] = {"-arch=sm_90", def};
        same_as_nvrtc(c, api, i ? "-D of 1 MiB" : "-D of 5 KiB", opts, 2);
        /* The key's recipe (kcache verify --recompile rebuilds from it) holds it whole. */
        kcache_result *res = through_kcache(c, opts, 2);
        kc_recipe rc;
        int whole = 0;
        REQUIRE(kc_key_decode(&rc, res->key_material, res->key_material_size) == 0);
        for (size_t k = 0; k < rc.n_options; k++)
            whole |= !strncmp(rc.options[k], "--define-macro=X=(1+0", 21) &&
                     strlen(rc.options[k]) == strlen("--define-macro=") + strlen(def) - 2;
        if (!whole)
            fprintf(stderr, "the key's recipe does not hold the -D of %zu bytes whole\n",
                    strlen(def));
        CHECK(whole);
        kc_recipe_free(&rc);
        kcache_result_free(res);
        free(def);
    }
}

/* An include spelling longer than a path can be: absent for NVRTC, and no limit in the key. */
static void test_long_include_spelling(kcache_compiler *c, const kc_nvrtc *api)
{
    size_t n = 6000;
    char *text = malloc(n + 200);
    REQUIRE(text);
    int at = sprintf(text, "#if __has_include(\"");
    memset(text + at, 'h', n);
    sprintf(text + at + n, ".h\")\n#define X 1\n#endif\n%s", kernel);
    source = text;
    const char *opts[] = {"-arch=sm_90"};
    same_as_nvrtc(c, api, "__has_include of a 6000-byte name", opts, 1);
    source = kernel;
    free(text);
}

/* Several -arch: NVRTC makes a CUBIN when one is real, whatever the order. */
static void test_several_archs(kcache_compiler *c, const kc_nvrtc *api)
{
    const char *real_first[] = {"-arch=sm_90", "-arch=compute_90"};
    const char *real_last[] = {"-arch=compute_90", "-arch=sm_80"};
    const char *accelerated[] = {"-arch=sm_90a", "-arch=sm_90"};
    same_as_nvrtc(c, api, "-arch=sm_90 -arch=compute_90", real_first, 2);
    same_as_nvrtc(c, api, "-arch=compute_90 -arch=sm_80", real_last, 2);
    same_as_nvrtc(c, api, "-arch=sm_90a -arch=sm_90", accelerated, 2);
}

int main(void)
{
    kc_toolkit tk;
    char msg[512], db[600];
    const kc_nvrtc *api;
    if (ct_nvrtc_find(&tk, &api))
        return TEST_SKIP;
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    kcache_store *s = NULL;
    REQUIRE(kcache_store_open(&s, &so, msg, sizeof(msg)) == 0);
    kcache_compiler *c = ct_compiler(s, NULL);
    test_rejected_spellings(c, api);
    test_long_values(c, api);
    test_several_archs(c, api);
    test_long_include_spelling(c, api);
    kcache_compiler_free(c);
    kcache_store_close(s);
    kc_toolkit_free(&tk);
    return test_done();
}
