/*
 * From cached bytes to a launchable kernel: the CUDA driver API, opened at
 * run time, with context safety and an in-process memo of loaded modules and
 * functions.
 *
 * The driver (libcuda.so.1) is opened with dlopen on the first
 * kcache_gpu_new() and never linked: a program that links libkcache runs on
 * machines without a driver, where every entry point here returns
 * KCACHE_ENOTSUP with a one-line message (kcache_gpu_errmsg) and nothing else
 * in the library is affected. Driver entry points are resolved through
 * cuGetProcAddress, the documented way (see kcache_gpu_driver_symbol for
 * which variants).
 *
 * Contexts. Before any driver call, the calling thread must have a current
 * context. If it has one, that context is used (whatever device it is on).
 * If it has none (a worker thread of a data loader, say), the primary context
 * of the device named in the options (ordinal 0 by default) is retained with
 * cuDevicePrimaryCtxRetain, once per kcache_gpu, and made current on the
 * calling thread with cuCtxSetCurrent; it stays current on that thread after
 * the call, as the CUDA runtime would leave it, so the caller can launch on it.
 * The primary context is the one the CUDA runtime (and so CuPy, PyTorch, ...)
 * uses: kernels loaded here can work on their memory.
 *
 * Memo. A module is loaded once per (cache key, context) with
 * cuModuleLoadDataEx, and each function is resolved once per (key, context,
 * name); both are kept in an in-process hash table. A second request for the
 * same kernel costs a key derivation (kcache_gpu_function) or nothing
 * (kcache_gpu_function_by_key) plus a table lookup: no store access, no load.
 *
 * Who releases what:
 *   - kcache_gpu_free() unloads every module it loaded (with its context
 *     pushed) and releases the primary contexts it retained (one release per
 *     retain). Every CUfunction/CUmodule it handed out is invalid afterwards.
 *   - A context the caller created or retained itself stays the caller's: it
 *     must outlive the kcache_gpu (destroying it first unloads our modules with
 *     it; kcache_gpu_free then ignores the stale handles' errors).
 *   - The compiler is borrowed: it must outlive the kcache_gpu.
 *   - Results are never handed out; names are copied.
 *
 * Thread safety: a kcache_gpu may be shared by any number of threads. Lookups
 * take a shared lock; a load takes the exclusive lock for its duration.
 * kcache_gpu_free() must not run concurrently with other calls.
 *
 * struct CUfunc_st, CUmod_st and CUctx_st are cuda.h's own tags
 * (CUfunction is `struct CUfunc_st *`), so this header needs no cuda.h and a
 * program that includes both gets identical types.
 */
#ifndef KCACHE_GPU_H
#define KCACHE_GPU_H

#include <kcache/compile.h>
#include <kcache/core.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUfunc_st;
struct CUmod_st;
struct CUctx_st;

typedef struct kcache_gpu kcache_gpu;

#define KCACHE_GPU_OPTIONS_VERSION 1

typedef struct kcache_gpu_options {
    unsigned version; /* KCACHE_GPU_OPTIONS_VERSION */
    /* The device whose primary context a thread without a current context
     * gets. Default 0. */
    int device;
} kcache_gpu_options;

KCACHE_API int kcache_gpu_options_init(kcache_gpu_options *out, unsigned version);
#define KCACHE_GPU_OPTIONS_INIT                                                                    \
    KCACHE_VERSIONED_INIT(kcache_gpu_options, KCACHE_GPU_OPTIONS_VERSION)

/*
 * Creates a GPU handle on a compiler (borrowed: it must outlive the handle).
 * options may be NULL. Opens and initialises the driver (cuInit); touches no
 * device and creates no context yet.
 *
 * Without a usable driver this still succeeds: the handle then answers every
 * call with KCACHE_ENOTSUP and says why in kcache_gpu_errmsg(), so a program
 * may create it unconditionally and fall back when kcache_gpu_available() is 0.
 * Returns 0, KCACHE_EINVAL or KCACHE_ENOMEM (*out NULL, message in errbuf
 * when not NULL).
 */
KCACHE_API int kcache_gpu_new(kcache_gpu **out, kcache_compiler *compiler,
                              const kcache_gpu_options *options, char *errbuf,
                              size_t errbuf_size);

/*
 * Unloads the modules this handle loaded and releases the primary contexts
 * it retained (see "Who releases what" above). Accepts NULL.
 */
KCACHE_API void kcache_gpu_free(kcache_gpu *gpu);

/* 1 when a driver was found and started, else 0 (kcache_gpu_errmsg says why). */
KCACHE_API int kcache_gpu_available(const kcache_gpu *gpu);

/*
 * The message of the calling thread's last failure on this handle, one line,
 * never NULL. Thread-local: valid until this thread's next call on the handle.
 */
KCACHE_API const char *kcache_gpu_errmsg(const kcache_gpu *gpu);

/*
 * Gets a kernel ready to launch in the calling thread's context (made
 * current first if the thread had none, see above).
 *
 * name is either a plain symbol name ("saxpy", an extern "C" kernel) or one
 * of the request's name expressions ("tiled_gemm<float, 16>"), mapped
 * through the lowered names kept with the artifact (also on a cache hit).
 *
 * The first call for a (key, context) gets the artifact through the cache
 * (kcache_compiler_compile: a hit, or a compile that is stored), loads it and
 * memoises the module and the function; later calls derive the key and look
 * the function up. The request must produce a CUBIN or PTX (not LTO-IR: use
 * kcache_gpu_link_function). A request the cache cannot key (see
 * kcache_result.store_message) is compiled and loaded on every call.
 *
 * *out is the function, owned by the handle (valid until kcache_gpu_free).
 * Returns 0; KCACHE_ECOMPILE (the message holds the compiler's first error);
 * KCACHE_ENOTFOUND when the artifact has no such kernel (a template needs its
 * name expression in the request); KCACHE_ENOTSUP without a driver or when
 * the driver refuses the module (wrong architecture: the message says which);
 * or another code from the cache.
 */
KCACHE_API int kcache_gpu_function(struct CUfunc_st **out, kcache_gpu *gpu,
                                   const kcache_request *request, const char *name);

/*
 * As kcache_gpu_function, for an artifact already in the store, by key: a
 * pure table lookup once memoised; else a store get and a load (no compile).
 * Returns as kcache_gpu_function, KCACHE_ENOTFOUND when the key is not in the
 * store, KCACHE_EINVAL for an LTO-IR entry.
 */
KCACHE_API int kcache_gpu_function_by_key(struct CUfunc_st **out, kcache_gpu *gpu,
                                          const kcache_key *key, const char *name);

/*
 * As kcache_gpu_function, for a kernel linked with nvJitLink (kcache_compiler_link:
 * every step cached). name is the kernel's symbol in the linked CUBIN. Each
 * call runs the (cached) link lookup; the load and resolution are memoised.
 */
KCACHE_API int kcache_gpu_link_function(struct CUfunc_st **out, kcache_gpu *gpu,
                                        const kcache_link_request *request, const char *name);

/*
 * Any driver entry point, from the same loaded driver, through
 * cuGetProcAddress. name is the base name ("cuMemAlloc", "cuLaunchKernel").
 * Which variant: cuGetProcAddress picks by CUDA version, and a variant's
 * signature can change (CUDA 13.0's cuCtxSynchronize takes a context), so the
 * version is fixed and documented rather than taken from whatever toolkit
 * kcache was built with: the variant current in CUDA 12.0, whose type is the
 * PFN_<name>_vNNNN of cudaTypedefs.h with the largest NNNN <= 12000
 * (cuMemAlloc: PFN_cuMemAlloc_v3020; cuCtxSynchronize: _v2000). An entry
 * point introduced after 12.0 comes in the variant of the CUDA version kcache
 * was built with. Legacy default stream. A versioned name ("cuMemAlloc_v2")
 * is looked up as given. To find the module of a function, use
 * cuFuncGetModule.
 * Returns 0, KCACHE_ENOTFOUND, KCACHE_ENOTSUP without a driver.
 */
KCACHE_API int kcache_gpu_driver_symbol(void **out, kcache_gpu *gpu, const char *name);

/*
 * As kcache_gpu_driver_symbol, in the variant of cuda_version (1000 * major +
 * 10 * minor, e.g. 13000), as cuGetProcAddress defines it; a version above
 * the driver's is read as the driver's; 0 is kcache_gpu_driver_symbol's choice.
 */
KCACHE_API int kcache_gpu_driver_symbol_version(void **out, kcache_gpu *gpu,
                                                const char *name, int cuda_version);

/*
 * The architecture of device `ordinal`, for "--arch native": "sm_90", or
 * "sm_90a" when arch_specific is set, written into buf (16 bytes suffice).
 * Returns 0, KCACHE_EINVAL (buf too small), KCACHE_ENOTSUP (no driver, no
 * such device).
 */
KCACHE_API int kcache_gpu_arch(char *buf, size_t size, kcache_gpu *gpu, int ordinal,
                               int arch_specific);

/*
 * The calling thread's context, made current as described above (a primary
 * context retained by this handle if the thread had none). *out is borrowed.
 * Useful before calling driver entry points that need one (cuMemAlloc).
 */
KCACHE_API int kcache_gpu_context(struct CUctx_st **out, kcache_gpu *gpu);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_GPU_H */
