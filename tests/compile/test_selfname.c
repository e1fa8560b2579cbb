/*
 * NVRTC resolves an #include of the program's own name to the program: a
 * program named "kq.h" whose header includes "kq.h" reads itself again,
 * whatever the -I directories hold, and under another name that include
 * fails. Such a compile's result depends on the name in a way the include
 * resolution does not model, so it compiles uncached: kcache gives what
 * NVRTC alone gives under each name, never another name's kernel. Skips
 * (77) where the toolkit is missing.
 */
#include <kcache/compile.h>
#include <sys/stat.h>

#include "compiletest.h"

static char db[600], inc_opt[620];

static const char source[] = "#ifndef KQ_ONCE\n#define KQ_ONCE\n#include \"b.h\"\n"
                             "extern \"C\" __global__ void k(int *o) { o[0] = KQV; }\n"
                             "#else\n#define KQV 7\n#endif\n";

/* NVRTC alone under name: 1 and its PTX in *ptx (freed by the caller) if it compiled. */
static int nvrtc_ptx(const kc_nvrtc *api, const char *name, char **ptx)
{
    const char *opts[] = {"-arch=compute_90", inc_opt};
    nvrtcProgram p;
    size_t n = 0;
    *ptx = NULL;
    REQUIRE(api->CreateProgram(&p, source, name, 0, NULL, NULL) == NVRTC_SUCCESS);
    int ok = api->CompileProgram(p, 2, opts) == NVRTC_SUCCESS;
    if (ok) {
        REQUIRE(api->GetPTXSize(p, &n) == NVRTC_SUCCESS && (*ptx = malloc(n)));
        REQUIRE(api->GetPTX(p, *ptx) == NVRTC_SUCCESS);
    }
    REQUIRE(api->DestroyProgram(&p) == NVRTC_SUCCESS);
    return ok;
}

/*
 * kcache under name against NVRTC alone: the same outcome and PTX; never from
 * the cache where the program's name is included (reads_itself).
 */
static void same_as_nvrtc(const kc_nvrtc *api, const char *name, int reads_itself)
{
    char *want = NULL;
    int want_ok = nvrtc_ptx(api, name, &want);
    kcache_store *s = ct_store_open(db);
    REQUIRE(s);
    kcache_compiler *c = ct_compiler(s, NULL);
    const char *opts[] = {inc_opt};
    kcache_request r = ct_request(name, "compute_90", KCACHE_KIND_PTX, opts, 1);
    r.source = source;
    kcache_result *res = NULL;
    int rc = kcache_compiler_compile(&res, c, &r);
    int ok = rc == 0;
    if (ok != want_ok)
        fprintf(stderr, "%s: kcache %s where NVRTC %s\n", name, ok ? "compiled" : "failed",
                want_ok ? "compiled" : "failed");
    CHECK(ok == want_ok);
    if (ok && want_ok) {
        size_t n = strlen(want);
        CHECK(res->size == n && !memcmp(res->data, want, n));
        CHECK(!reads_itself || (!res->hit && !res->keyed));
    }
    kcache_result_free(res);
    kcache_compiler_free(c);
    kcache_store_close(s);
    free(want);
}

int main(void)
{
    kc_toolkit tk;
    const kc_nvrtc *api = NULL;
    if (ct_nvrtc_find(&tk, &api))
        return TEST_SKIP;
    char inc[600], header[700];
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    snprintf(inc, sizeof(inc), "%s/inc", test_dir());
    snprintf(inc_opt, sizeof(inc_opt), "-I%s", inc);
    REQUIRE(mkdir(inc, 0700) == 0);
    snprintf(header, sizeof(header), "%s/b.h", inc);
    test_write_text(header, "#pragma once\n#include \"kq.h\"\n");
    same_as_nvrtc(api, "kq.h", 1); /* reads itself: KQV is 7 */
    same_as_nvrtc(api, "kq.h", 1);
    same_as_nvrtc(api, "kr.h", 0); /* "kq.h" is nowhere: NVRTC fails */
    /* And with a kq.h on the search path, which NVRTC passes over for the program. */
    snprintf(header, sizeof(header), "%s/kq.h", inc);
    test_write_text(header, "#define KQV 5\n");
    same_as_nvrtc(api, "kq.h", 1);
    same_as_nvrtc(api, "kr.h", 0); /* inc/kq.h: 5, a compile like any other */
    same_as_nvrtc(api, "kr.h", 0);
    kc_toolkit_free(&tk);
    return test_done();
}
