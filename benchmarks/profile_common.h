/* What the profiling drivers share (benchmarks/profile_*.c): opening the store, the clock, the median. */
#ifndef KC_PROFILE_COMMON_H
#define KC_PROFILE_COMMON_H

#include <kcache/store.h>
#include <stdio.h>
#include <stdlib.h>

#include "compare/cmp_util.h"

/* The store at path, or NULL after saying why on stderr as `prog`. */
static inline kcache_store *profile_open(const char *prog, const char *path, uint64_t max_size)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    if (max_size)
        o.max_size = max_size;
    kcache_store *s = NULL;
    char err[256];
    if (kcache_store_open(&s, &o, err, sizeof(err))) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return NULL;
    }
    return s;
}

static inline double now_us(void)
{
    return cmp_now() * 1e6;
}

/* Sorts v; its upper median (the middle one, or the higher of the middle two). */
static inline double median(double *v, size_t n)
{
    cmp_sort(v, n);
    return v[n / 2];
}

#endif
