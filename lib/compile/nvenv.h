/*
 * The environment variables NVIDIA's NVRTC reads: which ones (observed, per
 * build), their values in the key, and a check that a compile read no other
 * (nvenv.c says how and why).
 */
#ifndef KC_NVENV_H
#define KC_NVENV_H

#include <stddef.h>

#include "cuda/toolkit.h"
#include "kcache/store.h"

/* What the key holds of the environment, for one compile. */
typedef struct kc_nvenv {
    char **set;       /* "NAME=VALUE" for each name NVRTC reads that is set, sorted */
    size_t n_set;
    /* Why the compile runs uncached, or "": an identifier and a one-line message. */
    char reason[32];
    char problem[512];
} kc_nvenv;

/*
 * Fills out for a compile with tk's NVRTC: the names its build reads (once
 * per process and build; remembered in store, else observed by a probe), and
 * the values of those set now. out->reason is set when the environment cannot
 * be keyed. Returns 0 or KCACHE_ENOMEM.
 */
int kc_nvenv_get(kc_nvenv *out, const kc_toolkit *tk, kcache_store *store);
void kc_nvenv_free(kc_nvenv *e);

/*
 * Watches the getenv calls of the NVRTC library dlopen gave (handle): called
 * by toolkit.c once it is loaded, before its first compile.
 */
void kc_nvenv_watch(void *handle);

/* A mark of the calls watched so far (before a compile). */
unsigned long kc_nvenv_mark(void);

/*
 * After a compile: NULL if every name the watched NVRTC asked for since mark
 * is one tk's build is known to read (so its value is in the key), else a
 * one-line message naming it.
 */
const char *kc_nvenv_unkeyed_since(const kc_toolkit *tk, unsigned long mark, char *buf,
                                   size_t size);

#endif
