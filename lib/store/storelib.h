/*
 * The store's header for the layers above it (short: they see nothing else).
 *
 * What the layers above the store call beyond its public API: counters that
 * only a compile can know, and the leases of single flight. Not exported.
 */
#ifndef KC_STORELIB_H
#define KC_STORELIB_H

#include <stdint.h>

#include "kcache/store.h"

/*
 * Counts a miss for (arch, kind). A lookup that finds nothing does not count
 * one by itself: whoever then compiles does, so that a probe (inspect,
 * explain) is not a miss.
 */
void kc_store_count_miss(kcache_store *store, const char *arch, kcache_kind kind);

/*
 * Counts a store failure seen by a caller (a put that could not be written
 * while the compile itself succeeded), so that stats shows it. Best effort.
 */
void kc_store_count_failure(kcache_store *store);

/*
 * Adds delta to a named counter of the generic counter table (batched with
 * the hits; a new name needs no schema change). Names are under 32 bytes.
 * Read back with kcache_store_counter(). Best effort.
 */
void kc_store_count(kcache_store *store, const char *name, uint64_t delta);

/*
 * Puts an entry that came from outside the store (the shared tier) through
 * the import gate (ingest.c: the put rules, the key recomputed from the key
 * material, kind and arch against the key material, the artifact against
 * e->digest, dates clamped), then a put. Returns 0; 1 for a conflict (the
 * store holds the key with other bytes: they are kept, the conflict is
 * counted and logged, and `what` is its line with both digests);
 * KCACHE_ECORRUPT with why in `what` when the gate refuses it; or the put's
 * error (message on the store).
 */
int kc_store_admit(kcache_store *store, kcache_entry *e, char *what, size_t what_size);

/*
 * Whether the bundle at path (read immutable: no lock, nothing written
 * beside it) holds key: 1 or 0; or an error with its message in err. Only
 * a look: what it holds is checked when it is imported (kcache_bundle_import()).
 */
int kc_store_bundle_has(const char *path, const kcache_key *key, char *err, size_t err_size);

/* 1 if e never leaves this machine (ingest.c, "Local-only records"): not pushed. */
int kc_store_local_only(const kcache_entry *e);

/*
 * Single flight: when several processes (or threads) miss the same key, the
 * one that gets the lease compiles and the others wait for its entry.
 *
 * kc_store_lease_acquire() sets *acquired to 1 when this process now
 * holds the lease (it was free, or its owner died, or its owner's heartbeat
 * is older than stale_ms), else 0. The holder renews it while it works and
 * releases it when done, whether it stored an entry or not.
 */
int kc_store_lease_acquire(int *acquired, kcache_store *store, const kcache_key *key,
                           unsigned stale_ms);
int kc_store_lease_renew(kcache_store *store, const kcache_key *key);
void kc_store_lease_release(kcache_store *store, const kcache_key *key);

/*
 * Remembered include closures (schema/004_manifests.sql, compile/manifest.c):
 * the closures kept under a base key, newest first, at most
 * KC_MANIFEST_PER_BASE, each with the key its compile had. *out is freed with
 * kc_manifest_rows_free(). Errors are returned, never fatal to a compile: a
 * closure only saves work.
 */
#define KC_MANIFEST_PER_BASE 8

typedef struct kc_manifest_row {
    kcache_key key;
    int64_t recorded_at;   /* ns since the epoch: when its files were read */
    void *closure;         /* compile/manifest.c's encoding, shared by every use */
    size_t size;
} kc_manifest_row;

int kc_store_manifest_get(kc_manifest_row **out, size_t *n, kcache_store *store,
                          const kcache_key *base);
void kc_manifest_rows_free(kc_manifest_row *rows, size_t n);
int kc_store_manifest_put(kcache_store *store, const kcache_key *base, const kcache_key *key,
                          int64_t recorded_at, const void *closure, size_t size);
/*
 * A closure from a bundle (carried.c): tried after every closure this
 * machine recorded under base, so that it never leads a request away from
 * an entry a closure of this machine's leads to.
 */
int kc_store_manifest_put_carried(kcache_store *store, const kcache_key *base,
                                  const kcache_key *key, int64_t recorded_at, const void *closure,
                                  size_t size);

/* Counts a compile served without the cache, under "uncacheable.<reason>". Best effort. */
void kc_store_count_uncacheable(kcache_store *store, const char *reason);

#endif
