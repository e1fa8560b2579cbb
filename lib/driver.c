#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "driver.h"

/* The few driver entry points this file needs, declared by hand: cuda.h's
 * prototypes are for linking, which kcache never does with the driver. */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_device_get_attribute_fn)(int *, int, int);
typedef int (*cu_device_get_count_fn)(int *);

#define KC_CU_ATTR_CC_MAJOR 75
#define KC_CU_ATTR_CC_MINOR 76

static struct {
    pthread_once_t once;
    void *handle;
    int init_rc;
    cu_init_fn init;
    cu_device_get_fn device_get;
    cu_device_get_attribute_fn attribute;
    cu_device_get_count_fn count;
    char error[256];
} drv = {PTHREAD_ONCE_INIT};

static void load(void)
{
    drv.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv.handle) {
        snprintf(drv.error, sizeof(drv.error), "no CUDA driver (libcuda.so.1): %s", dlerror());
        return;
    }
    void *p;
    p = dlsym(drv.handle, "cuInit");
    memcpy(&drv.init, &p, sizeof(p));
    p = dlsym(drv.handle, "cuDeviceGet");
    memcpy(&drv.device_get, &p, sizeof(p));
    p = dlsym(drv.handle, "cuDeviceGetAttribute");
    memcpy(&drv.attribute, &p, sizeof(p));
    p = dlsym(drv.handle, "cuDeviceGetCount");
    memcpy(&drv.count, &p, sizeof(p));
    if (!drv.init || !drv.device_get || !drv.attribute || !drv.count) {
        snprintf(drv.error, sizeof(drv.error), "libcuda.so.1 lacks the driver API");
        drv.handle = NULL;
        return;
    }
    drv.init_rc = drv.init(0);
    if (drv.init_rc != 0) {
        snprintf(drv.error, sizeof(drv.error), "the CUDA driver failed to start (CUresult %d)",
                 drv.init_rc);
        drv.handle = NULL;
    }
}

int kc_driver_native_arch(char *out, size_t out_size, int ordinal, int arch_specific, char *msg,
                          size_t msg_size)
{
    pthread_once(&drv.once, load);
    if (!drv.handle)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "--arch native needs a GPU: %s; name the architecture (e.g. --arch sm_90)",
                      drv.error);
    int count = 0, dev = 0, major = 0, minor = 0;
    if (drv.count(&count) != 0 || ordinal >= count || drv.device_get(&dev, ordinal) != 0 ||
        drv.attribute(&major, KC_CU_ATTR_CC_MAJOR, dev) != 0 ||
        drv.attribute(&minor, KC_CU_ATTR_CC_MINOR, dev) != 0)
        return kc_fmt(msg, msg_size, KCACHE_ENOTSUP,
                      "--arch native: no CUDA device %d; name the architecture (e.g. --arch "
                      "sm_90)",
                      ordinal);
    snprintf(out, out_size, "sm_%d%d%s", major, minor, arch_specific ? "a" : "");
    return 0;
}
