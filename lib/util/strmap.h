/* A string -> index map, open addressing; keys are copied. Not thread-safe. */
#ifndef KC_STRMAP_H
#define KC_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct kc_smap {
    char **keys;
    size_t *vals;
    size_t cap, n;
} kc_smap;

/* FNV-1a of n bytes: the hash of kcache's in-memory tables (not of anything stored). */
uint64_t kc_fnv1a(const void *data, size_t n);

/* 1 with *val (when not NULL) set if key is there, else 0. */
int kc_smap_find(const kc_smap *m, const char *key, size_t *val);
/* Sets key to val. 0 or KCACHE_ENOMEM. */
int kc_smap_put(kc_smap *m, const char *key, size_t val);
void kc_smap_free(kc_smap *m);

#endif
