/*
 * What the GPU tests and the hot-start benchmark share: driver entry points
 * fetched through kcache_gpu_driver_symbol (the same loaded driver the
 * library uses; nothing here links libcuda), and a check that stops the
 * program with the driver's message.
 */
#ifndef KC_GPUTEST_H
#define KC_GPUTEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudaTypedefs.h>

#include <kcache/gpu.h>

typedef struct gpu_api {
    PFN_cuMemAlloc_v3020 mem_alloc;
    PFN_cuMemFree_v3020 mem_free;
    PFN_cuMemcpyHtoD_v3020 memcpy_htod;
    PFN_cuMemcpyDtoH_v3020 memcpy_dtoh;
    PFN_cuLaunchKernel_v4000 launch;
    PFN_cuCtxSynchronize_v2000 synchronize;
    PFN_cuCtxGetCurrent_v4000 ctx_get_current;
    PFN_cuFuncGetModule_v11000 func_get_module;
    PFN_cuGetErrorName_v6000 error_name;
} gpu_api;

/* Base names, as cuGetProcAddress wants them: the ABI variant comes from the version. */
static void *gpu_sym(kcache_gpu *gpu, const char *name)
{
    void *p = NULL;
    if (kcache_gpu_driver_symbol(&p, gpu, name) != 0 || !p) {
        fprintf(stderr, "driver entry point %s: %s\n", name, kcache_gpu_errmsg(gpu));
        exit(1);
    }
    return p;
}

#define GPU_SYM(dst, gpu, name)                                                                    \
    do {                                                                                           \
        void *p_ = gpu_sym(gpu, name);                                                             \
        memcpy(&(dst), &p_, sizeof(p_));                                                           \
    } while (0)

static void gpu_api_load(gpu_api *api, kcache_gpu *gpu)
{
    GPU_SYM(api->mem_alloc, gpu, "cuMemAlloc");
    GPU_SYM(api->mem_free, gpu, "cuMemFree");
    GPU_SYM(api->memcpy_htod, gpu, "cuMemcpyHtoD");
    GPU_SYM(api->memcpy_dtoh, gpu, "cuMemcpyDtoH");
    GPU_SYM(api->launch, gpu, "cuLaunchKernel");
    GPU_SYM(api->synchronize, gpu, "cuCtxSynchronize");
    GPU_SYM(api->ctx_get_current, gpu, "cuCtxGetCurrent");
    GPU_SYM(api->func_get_module, gpu, "cuFuncGetModule");
    GPU_SYM(api->error_name, gpu, "cuGetErrorName");
}

/* A driver call that must succeed. */
#define CU_OK(api, expr)                                                                           \
    do {                                                                                           \
        CUresult cr_ = (expr);                                                                     \
        if (cr_ != CUDA_SUCCESS) {                                                                 \
            const char *n_ = "?";                                                                  \
            (api)->error_name(cr_, &n_);                                                           \
            fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #expr, n_, (int)cr_);      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
