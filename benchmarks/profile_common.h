/* What the profiling drivers share (benchmarks/profile_*.c): opening the store, the clock, the median. */
#ifndef KC_PROFILE_COMMON_H
#define KC_PROFILE_COMMON_H

#include <kcache/store.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v; its upper median (the middle one, or the higher of the middle two). */
static inline double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return v[n / 2];
}

#endif
