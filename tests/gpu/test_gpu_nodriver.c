/*
 * Without a CUDA driver (CI, a build machine): the GPU handle still opens,
 * every GPU entry point says KCACHE_ENOTSUP with a message naming the
 * driver, and the rest of the library (compiling, the cache) works as ever.
 * Skipped (77) where a driver is installed: test_gpu covers that machine.
 */
#include <dlfcn.h>
#include <string.h>

#include <kcache/compile.h>
#include <kcache/gpu.h>

#include "testutil.h"

int main(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv) {
        fprintf(stderr, "skipped: a CUDA driver is installed here\n");
        dlclose(drv);
        return TEST_SKIP;
    }
    const char *corpus = getenv("CORPUS");
    REQUIRE(corpus);
    char saxpy[700];
    snprintf(saxpy, sizeof(saxpy), "%s/saxpy.cu", corpus);

    char err[512];
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = test_path("nodriver.db");
    kcache_store *store = NULL;
    REQUIRE(kcache_store_open(&store, &so, err, sizeof(err)) == 0);
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = store;
    kcache_compiler *c = NULL;
    REQUIRE(kcache_compiler_new(&c, &co, err, sizeof(err)) == 0);

    kcache_gpu *gpu = NULL;
    CHECK_RC(kcache_gpu_new(&gpu, c, NULL, err, sizeof(err)), 0);
    REQUIRE(gpu);
    CHECK(!kcache_gpu_available(gpu));
    CHECK(strstr(kcache_gpu_errmsg(gpu), "libcuda.so.1") != NULL);

    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = saxpy;
    q.arch = "sm_90";
    struct CUfunc_st *fn = (struct CUfunc_st *)(void *)err;
    CHECK_RC(kcache_gpu_function(&fn, gpu, &q, "saxpy"), KCACHE_ENOTSUP);
    CHECK(fn == NULL);
    CHECK(strstr(kcache_gpu_errmsg(gpu), "no CUDA driver") != NULL);
    kcache_key key;
    memset(&key, 1, sizeof(key));
    CHECK_RC(kcache_gpu_function_by_key(&fn, gpu, &key, "saxpy"), KCACHE_ENOTSUP);
    kcache_link_request lr = KCACHE_LINK_REQUEST_INIT;
    CHECK_RC(kcache_gpu_link_function(&fn, gpu, &lr, "apply"), KCACHE_ENOTSUP);
    void *p = err;
    CHECK_RC(kcache_gpu_driver_symbol(&p, gpu, "cuMemAlloc"), KCACHE_ENOTSUP);
    CHECK(p == NULL);
    char arch[16];
    CHECK_RC(kcache_gpu_arch(arch, sizeof(arch), gpu, 0, 0), KCACHE_ENOTSUP);
    CHECK_RC(kcache_gpu_arch(arch, 4, gpu, 0, 0), KCACHE_EINVAL);
    struct CUctx_st *ctx = NULL;
    CHECK_RC(kcache_gpu_context(&ctx, gpu), KCACHE_ENOTSUP);
    /* Wrong arguments are still wrong arguments, driver or not. */
    CHECK_RC(kcache_gpu_function(&fn, gpu, NULL, "saxpy"), KCACHE_EINVAL);
    CHECK_RC(kcache_gpu_new(NULL, c, NULL, err, sizeof(err)), KCACHE_EINVAL);
    kcache_gpu *none = NULL;
    CHECK_RC(kcache_gpu_new(&none, NULL, NULL, err, sizeof(err)), KCACHE_EINVAL);
    CHECK(none == NULL && strstr(err, "compiler"));
    kcache_gpu_options bad = KCACHE_GPU_OPTIONS_INIT;
    bad.version = 99;
    CHECK_RC(kcache_gpu_new(&none, c, &bad, err, sizeof(err)), KCACHE_EINVAL);

    /* Nothing else is affected: the same compiler compiles and caches. */
    kcache_result *r = NULL;
    CHECK_RC(kcache_compiler_compile(&r, c, &q), 0);
    CHECK(r && r->data && r->size > 0 && r->keyed);
    kcache_result_free(r);
    r = NULL;
    CHECK_RC(kcache_compiler_compile(&r, c, &q), 0);
    CHECK(r && r->hit);
    kcache_result_free(r);
    /* ... and --arch native says to name the architecture. */
    q.arch = "native";
    r = NULL;
    int rc = kcache_compiler_compile(&r, c, &q);
    CHECK(rc == KCACHE_ENOTSUP);
    CHECK(r && strstr(r->message, "name the architecture"));
    kcache_result_free(r);

    kcache_gpu_free(gpu);
    kcache_gpu_free(NULL);
    kcache_compiler_free(c);
    kcache_store_close(store);
    return test_done();
}
