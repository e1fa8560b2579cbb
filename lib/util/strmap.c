/* A string -> index map and its hash (strmap.h): alone, generic code resolve/ and store/ share. */
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/strmap.h"

/* xxHash as its header alone (codec.c does the same). */
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t kc_fnv1a(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/*
 * Where a key goes in the table. XXH3 and not FNV-1a: it takes 8 bytes and
 * more at a step where FNV-1a multiplies once a byte, and a cold resolution
 * of a CuPy kernel looks up identifiers half a million times (closures' macro
 * names, pieces, headers). Nothing outside the process sees these hashes.
 */
static uint64_t hash_str(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

int kc_smap_find(const struct kc_smap *m, const char *key, size_t *val)
{
    if (!m->cap)
        return 0;
    for (size_t i = hash_str(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i])
            return 0;
        if (!strcmp(m->keys[i], key)) {
            if (val)
                *val = m->vals[i];
            return 1;
        }
    }
}

int kc_smap_put(struct kc_smap *m, const char *key, size_t val)
{
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        char **keys = kc_calloc(cap, sizeof(*keys));
        size_t *vals = kc_calloc(cap, sizeof(*vals));
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return KCACHE_ENOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = hash_str(m->keys[i]) & (cap - 1);
            while (keys[j])
                j = (j + 1) & (cap - 1);
            keys[j] = m->keys[i];
            vals[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    size_t i = hash_str(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key) != 0)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) {
        if (!(m->keys[i] = kc_strdup(key)))
            return KCACHE_ENOMEM;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

void kc_smap_free(struct kc_smap *m)
{
    kc_strv_free(m->keys, m->cap);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
