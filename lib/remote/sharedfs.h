/*
 * The shared file system tier (sharedfs.c), as the compile path sees it:
 * between the local store and the remote, in the chain local -> shared ->
 * remote (doc/shared-tier.md).
 */
#ifndef KC_SHAREDFS_H
#define KC_SHAREDFS_H

#include "kcache/store.h"

typedef struct kc_shared kc_shared;

/* Counter names (store/stats.c), shown by kcache stats. */
#define KC_SC_HITS "shared_hits"
#define KC_SC_MISSES "shared_misses"
#define KC_SC_PUBLISHES "shared_publishes"
#define KC_SC_REJECTED "shared_rejected"
#define KC_SC_ERRORS "shared_errors"
#define KC_SC_COMPACTIONS "shared_compactions"

/*
 * The tier the settings of store name (shared, shared_read_only,
 * shared_max_size). KCACHE_ENOTFOUND when none is set; another error with
 * a one-line message in msg when it is set and cannot be used.
 */
int kc_shared_open(kc_shared **out, kcache_store *store, char *msg, size_t msg_size);
void kc_shared_close(kc_shared *sh);
void kc_shared_set_log(kc_shared *sh, kcache_log_fn log, void *userdata);

/*
 * Looks key up in the tier's segments; the segment that holds it is
 * imported into the store whole, through the bundle importer's checks, and
 * *out is the store's entry: returns 1. 0 when no segment holds it (or each
 * that does was refused, counted and logged).
 */
int kc_shared_fetch(kcache_entry **out, kc_shared *sh, const kcache_key *key);

/* Publishes e as a segment of its own (never fatal: counted and logged); may compact. */
void kc_shared_publish(kc_shared *sh, const kcache_entry *e);

/*
 * Merges the segments into one under the tier's cap, if no other
 * compaction holds the lease. Returns 0, 1 when another holds it, or an
 * error (logged).
 */
int kc_shared_compact(kc_shared *sh);

#endif
