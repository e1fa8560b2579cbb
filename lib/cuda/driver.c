/* The CUDA driver opened at run time and its entry points (driver.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/common.h"
#include "cuda/driver.h"

/* ISO C has no cast between object and function pointers; the bytes are the same. */
#define KC_FN_FROM(fn, ptr)                                                                        \
    do {                                                                                           \
        void *p_ = (ptr);                                                                          \
        memcpy(&(fn), &p_, sizeof(p_));                                                            \
    } while (0)

static struct {
    pthread_once_t once;
    void *handle;
    int ok;
    PFN_cuGetProcAddress_v12000 gpa_v2; /* CUDA 12.0+ drivers */
    PFN_cuGetProcAddress_v11030 gpa_v1; /* 11.3+ */
    kc_cu cu;
    char error[320];
} drv = {PTHREAD_ONCE_INIT};

/*
 * One entry point by base name at an ABI version, through cuGetProcAddress.
 * *status: 0 found, 1 unknown name, 2 known but newer than version, -1 the
 * driver predates cuGetProcAddress.
 */
static void *lookup(const char *name, int version, int *status)
{
    void *p = NULL;
    if (version > drv.cu.version && drv.cu.version > 0)
        version = drv.cu.version; /* asking above the driver's version is an error */
    *status = -1;
    if (drv.gpa_v2) {
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (drv.gpa_v2(name, &p, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) != 0)
            st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        *status = st == CU_GET_PROC_ADDRESS_SUCCESS                  ? 0
                  : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? 2
                                                                     : 1;
    } else if (drv.gpa_v1) {
        *status =
            drv.gpa_v1(name, &p, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM) == 0 && p ? 0 : 1;
    }
    if (*status != 0)
        p = NULL;
    return p;
}

/*
 * As lookup; fallback_name is what dlsym needs when cuGetProcAddress does not
 * know the name (or the driver predates it). A name known only in a newer
 * variant is not looked up with dlsym: that would hand out the wrong ABI.
 */
static void *resolve(const char *name, int version, const char *fallback_name)
{
    int status;
    void *p = lookup(name, version, &status);
    if (!p && status != 2 && fallback_name)
        p = dlsym(drv.handle, fallback_name);
    return p;
}

static void load(void)
{
    drv.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv.handle) {
        const char *why = dlerror();
        snprintf(drv.error, sizeof(drv.error), "no CUDA driver: %s",
                 why ? why : "libcuda.so.1 not found");
        return;
    }
    /* The two calls that come before everything else exist in one version only. */
    PFN_cuInit_v2000 init = NULL;
    PFN_cuDriverGetVersion_v2020 get_version = NULL;
    KC_FN_FROM(init, dlsym(drv.handle, "cuInit"));
    KC_FN_FROM(get_version, dlsym(drv.handle, "cuDriverGetVersion"));
    KC_FN_FROM(drv.gpa_v2, dlsym(drv.handle, "cuGetProcAddress_v2"));
    if (!drv.gpa_v2)
        KC_FN_FROM(drv.gpa_v1, dlsym(drv.handle, "cuGetProcAddress"));
    if (!init || !get_version) {
        snprintf(drv.error, sizeof(drv.error), "libcuda.so.1 lacks the driver API (cuInit)");
        return;
    }
    int rc = init(0);
    if (rc == 0)
        rc = get_version(&drv.cu.version);
    if (rc != 0) {
        /* cuGetErrorName needs no cuInit, and says more than the number. */
        PFN_cuGetErrorName_v6000 name_of = NULL;
        KC_FN_FROM(name_of, dlsym(drv.handle, "cuGetErrorName"));
        const char *name = NULL;
        if (!name_of || name_of(rc, &name) != 0 || !name)
            name = "unknown error";
        snprintf(drv.error, sizeof(drv.error), "the CUDA driver did not start: %s (CUresult %d)%s",
                 name, rc, rc == 100 ? ": no GPU is visible" : "");
        return;
    }
    int v = KC_DRIVER_ABI;
    kc_cu *cu = &drv.cu;
    KC_FN_FROM(cu->get_error_name, resolve("cuGetErrorName", v, "cuGetErrorName"));
    KC_FN_FROM(cu->get_error_string, resolve("cuGetErrorString", v, "cuGetErrorString"));
    KC_FN_FROM(cu->device_get, resolve("cuDeviceGet", v, "cuDeviceGet"));
    KC_FN_FROM(cu->device_get_count, resolve("cuDeviceGetCount", v, "cuDeviceGetCount"));
    KC_FN_FROM(cu->device_get_attribute,
               resolve("cuDeviceGetAttribute", v, "cuDeviceGetAttribute"));
    KC_FN_FROM(cu->primary_ctx_retain,
               resolve("cuDevicePrimaryCtxRetain", v, "cuDevicePrimaryCtxRetain"));
    KC_FN_FROM(cu->primary_ctx_release,
               resolve("cuDevicePrimaryCtxRelease", v, "cuDevicePrimaryCtxRelease_v2"));
    if (!cu->primary_ctx_release) /* drivers before 11.0: same signature, first version */
        KC_FN_FROM(cu->primary_ctx_release, dlsym(drv.handle, "cuDevicePrimaryCtxRelease"));
    KC_FN_FROM(cu->ctx_get_current, resolve("cuCtxGetCurrent", v, "cuCtxGetCurrent"));
    KC_FN_FROM(cu->ctx_set_current, resolve("cuCtxSetCurrent", v, "cuCtxSetCurrent"));
    KC_FN_FROM(cu->ctx_push_current, resolve("cuCtxPushCurrent", v, "cuCtxPushCurrent_v2"));
    KC_FN_FROM(cu->ctx_pop_current, resolve("cuCtxPopCurrent", v, "cuCtxPopCurrent_v2"));
    KC_FN_FROM(cu->ctx_get_id, resolve("cuCtxGetId", v, "cuCtxGetId"));
    KC_FN_FROM(cu->module_load_data_ex, resolve("cuModuleLoadDataEx", v, "cuModuleLoadDataEx"));
    KC_FN_FROM(cu->module_unload, resolve("cuModuleUnload", v, "cuModuleUnload"));
    KC_FN_FROM(cu->module_get_function, resolve("cuModuleGetFunction", v, "cuModuleGetFunction"));
    if (!cu->get_error_name || !cu->get_error_string || !cu->device_get || !cu->device_get_count ||
        !cu->device_get_attribute || !cu->primary_ctx_retain || !cu->primary_ctx_release ||
        !cu->ctx_get_current || !cu->ctx_set_current || !cu->ctx_push_current ||
        !cu->ctx_pop_current || !cu->module_load_data_ex || !cu->module_unload ||
        !cu->module_get_function) {
        snprintf(drv.error, sizeof(drv.error),
                 "the CUDA driver (version %d.%d) is too old for kcache: update the driver",
                 cu->version / 1000, cu->version % 1000 / 10);
        return;
    }
    drv.ok = 1;
}

int kc_driver_get(const kc_cu **out, char *msg, size_t msg_size)
{
    pthread_once(&drv.once, load);
    *out = drv.ok ? &drv.cu : NULL;
    if (!drv.ok)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP, "%s", drv.error);
    return 0;
}

int kc_driver_symbol(void **out, const char *name, int version, char *msg, size_t msg_size)
{
    *out = NULL;
    const kc_cu *cu;
    int rc = kc_driver_get(&cu, msg, msg_size);
    if (rc)
        return rc;
    int status = 0;
    if (version > 0) {
        *out = resolve(name, version, name);
    } else {
        /* The variant current in CUDA 12.0, a fixed ABI that does not move when kcache is
         * rebuilt against a newer toolkit (13.0 turned cuCtxSynchronize into a function of a
         * context); an entry point born later, at the version kcache was built with. */
        *out = lookup(name, KC_DRIVER_ABI, &status);
        if (!*out && status == 2)
            *out = resolve(name, CUDA_VERSION, NULL);
        else if (!*out)
            *out = dlsym(drv.handle, name);
    }
    if (!*out)
        return kc_fmt(msg, msg_size, KCACHE_ENOTFOUND,
                      "the CUDA driver (version %d.%d) has no entry point %s%s", cu->version / 1000,
                      cu->version % 1000 / 10, name, version > 0 ? " at that CUDA version" : "");
    return 0;
}

const char *kc_driver_strerror(char *buf, size_t size, int cu_result)
{
    const char *name = NULL, *text = NULL;
    if (drv.ok) {
        if (drv.cu.get_error_name((CUresult)cu_result, &name) != 0)
            name = NULL;
        if (drv.cu.get_error_string((CUresult)cu_result, &text) != 0)
            text = NULL;
    }
    if (name && text)
        snprintf(buf, size, "%s: %s", name, text);
    else
        snprintf(buf, size, "CUresult %d", cu_result);
    return buf;
}

int kc_driver_native_arch(char *out, size_t out_size, int ordinal, int arch_specific, char *msg,
                          size_t msg_size)
{
    const kc_cu *cu;
    char why[320];
    if (kc_driver_get(&cu, why, sizeof(why)))
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "--arch native needs a GPU: %s; name the architecture (e.g. --arch sm_90)",
                      why);
    int count = 0, major = 0, minor = 0;
    CUdevice dev = 0;
    if (cu->device_get_count(&count) != 0 || ordinal < 0 || ordinal >= count ||
        cu->device_get(&dev, ordinal) != 0 ||
        cu->device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != 0 ||
        cu->device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != 0)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "--arch native: no CUDA device %d (%d visible); name the architecture "
                      "(e.g. --arch sm_90)",
                      ordinal, count);
    snprintf(out, out_size, "sm_%d%d%s", major, minor, arch_specific ? "a" : "");
    return 0;
}
