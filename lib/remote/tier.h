/*
 * The shared tier as the compile path sees it (compile/compiler.c, flight.c); the
 * public side, for tools, is <kcache/remote.h>.
 * Data flows: local miss -> kc_remote_fetch -> (miss) kc_remote_lease_or_wait
 * -> compile -> local put -> kc_remote_push -> kc_remote_release.
 *
 * The lease across machines (decision):
 *   - Two levels. The local lease (SQLite, store/lease.c) stays the first:
 *     of the processes of one machine that miss a key, only its holder talks
 *     to the remote, so a fleet of M machines puts at most M contenders on
 *     Redis per key, not M x processes.
 *   - The remote lease is `SET <prefix>lease:<key> <owner> NX PX 15000`,
 *     owner = host:pid:random. Its holder renews it (PEXPIRE, only if still
 *     the owner, in a script) from the compile's heartbeat thread every 2 s,
 *     pushes the entry, then deletes the lease (again only if the owner).
 *   - Others poll for the entry (50 ms growing to 250 ms) and try the lease
 *     again at each turn: a holder that died is replaced once its lease
 *     expires (15 s), with no clock shared between machines (PX is the
 *     server's clock).
 *   - It is advisory, and that is what makes it sound: entries are
 *     content-addressed and checked, so the worst a lost or evicted lease
 *     (allkeys-lru may evict it, a failover may lose it) can do is a second
 *     compile of the same key, never a wrong artifact. Hence one Redis and no
 *     Redlock quorum.
 *   - Waiting is bounded by the compiler's wait timeout, and any remote
 *     failure ends the wait: the caller compiles. A read-only remote takes
 *     no lease (it could not push the result anyway).
 */
#ifndef KC_REMOTE_INT_H
#define KC_REMOTE_INT_H

#include "kcache/remote.h"

#define KC_REMOTE_LEASE_TTL_MS 15000u

/* Counter names (store/stats.c), as listed in <kcache/remote.h>. */
#define KC_RC_HITS "remote_hits"
#define KC_RC_MISSES "remote_misses"
#define KC_RC_PUSHES "remote_pushes"
#define KC_RC_ERRORS "remote_errors"
#define KC_RC_REJECTED "remote_rejected"
#define KC_RC_SKIPPED "remote_skipped"
#define KC_RC_BYTES_IN "remote_bytes_in"
#define KC_RC_BYTES_OUT "remote_bytes_out"
#define KC_RC_SAVED_NS "remote_saved_ns"

/*
 * Looks key up on the remote. On a hit the entry, checked (wire.h), is put
 * into the local store and *out is the store's copy (KCACHE_GET_NO_TOUCH):
 * returns 1. Returns 0 on a miss; -1 when the remote is unusable or holds a
 * value that failed the checks (counted and logged; the caller compiles
 * without waiting on the fleet's lease, and its push replaces a bad value).
 */
int kc_remote_fetch(kcache_entry **out, kcache_remote *r, const kcache_key *key);

/*
 * After a remote miss: takes the fleet's lease for key (*leased = 1, return
 * 0: compile), or waits for its holder's entry until deadline_ns (return 1
 * with *out as kc_remote_fetch), or gives up (0, *leased = 0: compile).
 */
int kc_remote_lease_or_wait(kcache_entry **out, int *leased, kcache_remote *r,
                            const kcache_key *key, uint64_t deadline_ns);
/* Renews (from the heartbeat) and releases the lease taken above. */
void kc_remote_renew(kcache_remote *r, const kcache_key *key);
void kc_remote_release(kcache_remote *r, const kcache_key *key);

/*
 * Pushes a compile's entry (its data raw). The caller waits at most the
 * operation timeout; a failure is counted and logged, never returned.
 */
void kc_remote_push(kcache_remote *r, const kcache_entry *e);

/* Where the remote's warnings go (the compiler's log callback). */
void kc_remote_set_log(kcache_remote *r, kcache_log_fn log, void *userdata);

#endif
