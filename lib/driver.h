/*
 * The CUDA driver, opened at run time (libcuda.so.1) and never linked, so
 * that the library works on machines without one: that is where CI prepares
 * warm caches.
 */
#ifndef KC_DRIVER_H
#define KC_DRIVER_H

#include <stddef.h>

/*
 * The architecture of device `ordinal` ("sm_90", or "sm_90a" with
 * arch_specific). Returns 0, or KCACHE_ENOTSUP with a message when there is
 * no driver or no such device.
 */
int kc_driver_native_arch(char *out, size_t out_size, int ordinal, int arch_specific, char *msg,
                          size_t msg_size);

#endif
