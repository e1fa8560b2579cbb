/* The usage list: hits, misses and time saved per (arch, kind). Stats reports
 * one, the pending batch keeps one (touch.c) and the hit log adds its records
 * to one (hitlog.c); it calls nothing of the store, so all three sit above it. */
#include <stdio.h>
#include <string.h>

#include "store/storeint.h"

int kc_usage_merge(kcache_usage **v, size_t *n, size_t *cap, const char *arch, int kind,
                   uint64_t hits, uint64_t misses, uint64_t saved_ns)
{
    kcache_usage *u = NULL;
    for (size_t i = 0; i < *n; i++)
        if ((int)(*v)[i].kind == kind && strcmp((*v)[i].arch, arch) == 0)
            u = &(*v)[i];
    if (!u) {
        kcache_usage *grown = kc_grow(*v, cap, *n, sizeof(*grown), 8);
        if (!grown)
            return KCACHE_ENOMEM;
        *v = grown;
        u = &grown[(*n)++];
        memset(u, 0, sizeof(*u));
        snprintf(u->arch, sizeof(u->arch), "%s", arch);
        u->kind = (kcache_kind)kind;
    }
    u->hits += hits;
    u->misses += misses;
    u->saved_ns += saved_ns;
    return 0;
}
