/*
 * kcache: checking a store end to end.
 *
 * Thread safety: as for the store it is given.
 */
#ifndef KCACHE_VERIFY_H
#define KCACHE_VERIFY_H

#include <kcache/bundle.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KCACHE_VERIFY_RESULT_VERSION 1

/* Filled by kcache_store_verify(); the caller sets version (KCACHE_VERIFY_RESULT_INIT). */
typedef struct kcache_verify_result {
    unsigned version;          /* KCACHE_VERIFY_RESULT_VERSION */
    uint64_t entries;          /* entries looked at */
    uint64_t bytes;            /* raw artifact bytes checked */
    uint64_t damaged;          /* entries whose artifact or inputs failed their digest */
    int integrity_ok;          /* SQLite's integrity check passed */
    char integrity[256];       /* its first complaint, or "ok" */
} kcache_verify_result;

KCACHE_API int kcache_verify_result_init(kcache_verify_result *out, unsigned version);
#define KCACHE_VERIFY_RESULT_INIT                                                                  \
    KCACHE_VERSIONED_INIT(kcache_verify_result, KCACHE_VERIFY_RESULT_VERSION)

/*
 * Told about each damaged entry: its key and what was wrong. Valid during the
 * call, which is made with no lock held (it may use the store).
 */
typedef void (*kcache_damaged_fn)(void *userdata, const kcache_key *key, const char *message);

/*
 * Runs SQLite's integrity check on the database, then reads every entry with
 * its inputs and checks their digests, without counting hits. A damaged
 * entry is handled as the store always does (on a writable store: deleted and
 * counted; on a read-only one: left), reported to on_damaged (may be NULL)
 * and counted in out. progress (may be NULL) gets phase "verifying".
 * Returns 0 when the checks could run (look at out for what they found), or
 * an error with the message on the store.
 */
KCACHE_API int kcache_store_verify(kcache_verify_result *out, kcache_store *store,
                                   kcache_progress_fn progress, kcache_damaged_fn on_damaged,
                                   void *userdata);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_VERIFY_H */
