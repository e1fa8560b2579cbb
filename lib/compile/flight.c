/*
 * Single flight: when several processes or threads miss one key, the holder of
 * the key's lease compiles, renewing it from a heartbeat thread, and the
 * others wait for its entry.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compileint.h"
/* A lease whose heartbeat is older than this belongs to a stuck owner. */
#define KC_LEASE_STALE_MS 15000
#define KC_HEARTBEAT_MS 2000

static void *heartbeat_main(void *arg)
{
    struct heartbeat *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += KC_HEARTBEAT_MS / 1000;
        pthread_cond_timedwait(&h->wake, &h->lock, &until);
        if (h->stop)
            break;
        kcache_remote *remote = h->remote; /* set under the lock once the fleet's lease is ours */
        pthread_mutex_unlock(&h->lock);
        kc_store_lease_renew(h->store, &h->key);
        if (remote)
            kc_remote_renew(remote, &h->key);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

void kc_heartbeat_start(struct heartbeat *h, kcache_store *store, const kcache_key *key)
{
    memset(h, 0, sizeof(*h));
    h->store = store;
    h->key = *key;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    h->running = pthread_create(&h->thread, NULL, heartbeat_main, h) == 0;
}

void kc_heartbeat_stop(struct heartbeat *h)
{
    if (h->running) {
        pthread_mutex_lock(&h->lock);
        h->stop = 1;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
    }
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->wake);
}

/*
 * Looks the key up, and on a miss takes the lease or waits for whoever holds
 * it. Returns 1 on a hit (r filled), 0 when the caller should compile
 * (*leased says whether it holds the lease), or a negative store error (the
 * caller compiles without the cache).
 */
/* The entry under key, else under also: 1 or 2 (*e filled), or the store's code. */
static int get_either(kcache_entry **e, kcache_store *s, const kcache_key *key,
                      const kcache_key *also, unsigned get_flags)
{
    int rc = kcache_store_get(e, s, key, get_flags);
    if (rc == KCACHE_ENOTFOUND && also)
        return (rc = kcache_store_get(e, s, also, get_flags)) ? rc : 2;
    return rc ? rc : 1;
}

int kc_lookup_or_lease(kcache_compiler *c, const kcache_key *key, const kcache_key *also,
                       unsigned get_flags, struct kc_result *r, int *leased)
{
    kcache_store *s = c->store;
    uint64_t deadline = kc_mono_ns() + (uint64_t)c->wait_timeout_ms * 1000000u;
    unsigned pause_ms = 5;
    *leased = 0;
    for (;;) {
        kcache_entry *e = NULL;
        int rc = get_either(&e, s, key, also, get_flags);
        if (rc > 0) {
            kc_result_from_entry(r, e);
            return rc;
        }
        if (rc != KCACHE_ENOTFOUND)
            return rc;
        int acquired = 0;
        if ((rc = kc_store_lease_acquire(&acquired, s, key, KC_LEASE_STALE_MS)))
            return rc;
        if (acquired) {
            /* The owner may have finished between the get and the lease. */
            if ((rc = get_either(&e, s, key, also, get_flags)) > 0) {
                kc_store_lease_release(s, key);
                kc_result_from_entry(r, e);
                return rc;
            }
            *leased = 1;
            return 0;
        }
        if (kc_mono_ns() >= deadline)
            return 0; /* waited long enough: compile anyway */
        struct timespec ts = {0, (long)pause_ms * 1000000L};
        nanosleep(&ts, NULL);
        pause_ms = KC_MIN(pause_ms * 2, 100u);
    }
}
