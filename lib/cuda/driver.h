/*
 * The CUDA driver, opened at run time (libcuda.so.1) and never linked, so
 * that the library works on machines without one: that is where CI prepares
 * warm caches.
 *
 * Entry points are resolved the documented way, through cuGetProcAddress
 * (cuGetProcAddress_v2 on CUDA 12+ drivers, the four-argument form on 11.3+),
 * by base name and ABI version, which also picks the _v2 variants for us;
 * only drivers older than 11.3 fall back to dlsym with the versioned names.
 * The driver is opened once per process and never closed: unloading libcuda
 * while contexts exist is undefined.
 *
 * cuda.h is included for its types only; its prototypes are never called.
 */
#ifndef KC_DRIVER_H
#define KC_DRIVER_H

#include <stddef.h>

#include <cudaTypedefs.h>

/*
 * The ABI the table below is typed for: every entry point in it has had this
 * signature since CUDA 12.0 (older drivers get the version they have).
 */
#define KC_DRIVER_ABI 12000

/* The entry points the library calls. Optional ones may be NULL. */
typedef struct kc_cu {
    int version; /* cuDriverGetVersion: 12080 is 12.8 */
    PFN_cuGetErrorName_v6000 get_error_name;
    PFN_cuGetErrorString_v6000 get_error_string;
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetCount_v2000 device_get_count;
    PFN_cuDeviceGetAttribute_v2000 device_get_attribute;
    PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain;
    PFN_cuDevicePrimaryCtxRelease_v11000 primary_ctx_release;
    PFN_cuCtxGetCurrent_v4000 ctx_get_current;
    PFN_cuCtxSetCurrent_v4000 ctx_set_current;
    PFN_cuCtxPushCurrent_v4000 ctx_push_current;
    PFN_cuCtxPopCurrent_v4000 ctx_pop_current;
    PFN_cuCtxGetId_v12000 ctx_get_id; /* optional: drivers before 12.0 lack it */
    PFN_cuModuleLoadDataEx_v2010 module_load_data_ex;
    PFN_cuModuleUnload_v2000 module_unload;
    PFN_cuModuleGetFunction_v2000 module_get_function;
} kc_cu;

/*
 * The driver's entry points, opened and initialised (cuInit) on the first
 * call. Returns 0, or KCACHE_ENOTSUP with a one-line message when there is no
 * usable driver (none installed, too old, or cuInit failed: no device).
 */
int kc_driver_get(const kc_cu **out, char *msg, size_t msg_size);

/*
 * Any driver entry point by its base name ("cuMemAlloc" gives cuMemAlloc_v2),
 * legacy default stream. version > 0: the variant of that CUDA version
 * (13000), as cuGetProcAddress defines it. version 0: the variant current in
 * CUDA 12.0 (KC_DRIVER_ABI), or, for an entry point introduced later, the one
 * of the CUDA version kcache was built with. A name cuGetProcAddress does not
 * know ("cuMemAlloc_v2") is looked up as given with dlsym.
 * Returns 0, KCACHE_ENOTFOUND, or KCACHE_ENOTSUP without a driver.
 */
int kc_driver_symbol(void **out, const char *name, int version, char *msg, size_t msg_size);

/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a CUresult, in buf. */
const char *kc_driver_strerror(char *buf, size_t size, int cu_result);

/*
 * The architecture of device `ordinal` ("sm_90", or "sm_90a" with
 * arch_specific). Returns 0, or KCACHE_ENOTSUP with a message when there is
 * no driver or no such device.
 */
int kc_driver_native_arch(char *out, size_t out_size, int ordinal, int arch_specific, char *msg,
                          size_t msg_size);

#endif
