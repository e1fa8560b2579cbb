/*
 * The random workload the stress tests share (many threads on one handle,
 * many processes on one file): a generator each worker seeds with its number,
 * what a worker counts, and a get of entry n checked and counted as the
 * compile path would count it.
 */
#ifndef KC_STRESS_H
#define KC_STRESS_H

#include "store/storelib.h"
#include "storetest.h"

struct st_tally {
    unsigned errors, wrong, hits, misses, puts, prunes;
    uint64_t evicted;
};

/* The next 31 random bits of the sequence *x holds. */
static inline unsigned st_random(uint64_t *x)
{
    *x = *x * 6364136223846793005u + 1442695040888963407u;
    return (unsigned)(*x >> 33);
}

/*
 * Gets entry n with flags: a hit must hold what st_put() put (its size alone
 * under KCACHE_GET_NO_DATA), a miss is counted in the store as a compile's
 * is. Returns 0 for either, else the store's error (not counted here).
 */
static inline int st_get_counted(struct st_tally *t, kcache_store *s, unsigned n, unsigned flags,
                                 size_t size_max, uint8_t *scratch, const char *who)
{
    kcache_entry *e = NULL;
    kcache_key k = st_key(n);
    int rc = kcache_store_get(&e, s, &k, flags);
    if (rc == 0) {
        t->hits++;
        int ok = flags & KCACHE_GET_NO_DATA ? !e->data && e->size == st_size(n, size_max)
                                            : st_entry_ok(e, n, size_max, scratch);
        if (!ok || memcmp(&e->key, &k, sizeof(k)) != 0) {
            t->wrong++;
            fprintf(stderr, "%s: entry %u came back wrong\n", who, n);
        }
    } else if (rc == KCACHE_ENOTFOUND) {
        t->misses++;
        kc_store_count_miss(s, "sm_90", KCACHE_KIND_CUBIN);
        rc = 0;
    }
    kcache_entry_free(e);
    return rc;
}

static inline void st_tally_add(struct st_tally *sum, const struct st_tally *t)
{
    sum->errors += t->errors;
    sum->wrong += t->wrong;
    sum->hits += t->hits;
    sum->misses += t->misses;
    sum->puts += t->puts;
    sum->prunes += t->prunes;
    sum->evicted += t->evicted;
}

/* The line each stress test prints after its run. */
static inline void st_tally_print(const struct st_tally *t, const char *workers, int n, int ops,
                                  double seconds)
{
    printf("%d %s x %d ops: %u puts, %u hits, %u misses, %u prunes evicting %llu, %u errors, "
           "%u wrong, %.2f s\n",
           n, workers, ops, t->puts, t->hits, t->misses, t->prunes,
           (unsigned long long)t->evicted, t->errors, t->wrong, seconds);
}

#endif
