/*
 * Entries from the shared tier enter through the same gate as a bundle's
 * (ingest.c), then a put: lib/remote/ decodes and checks what only it knows
 * (its value format, the signature, the bounds before decompressing) and
 * hands the entry here.
 */
#include <stdio.h>
#include <string.h>

#include "store/ingest.h"
#include "store/storeint.h"

int kc_store_local_only(const kcache_entry *e)
{
    return kc_ingest_local_only(e);
}

int kc_store_admit(kcache_store *store, kcache_entry *e, char *what, size_t what_size)
{
    int64_t now = kc_now_ms();
    pthread_mutex_lock(&store->lock);
    int rc = kc_ingest_check_entry(store, e, now, what, what_size);
    kc_unlock(store);
    if (rc)
        return rc;
    if (kc_ingest_local_only(e)) {
        snprintf(what, what_size, "it is a record only the machine that wrote it may believe "
                                  "(the drop-in's facts of its NVRTC)");
        return KCACHE_ECORRUPT;
    }
    /*
     * The look for a conflict and the put in one write transaction: another
     * process's compile of the same key landing in between is then seen,
     * never overwritten. The times are the put's own (now), as before.
     */
    if ((rc = kc_put_batch_begin(store)))
        return rc;
    int64_t created = 0;
    uint8_t have[KC_DIGEST_SIZE];
    int exists = kc_ingest_existing(store, &e->key, &created, have);
    int conflict = exists == 1 && memcmp(have, e->digest, KC_DIGEST_SIZE) != 0;
    rc = exists < 0 ? exists : conflict ? 0 : kc_put_batch_add(store, e, now, now);
    int end = kc_put_batch_end(store, rc == 0 && !conflict);
    if (!rc && !conflict)
        rc = end;
    if (rc)
        return rc;
    if (conflict) {
        kc_ingest_conflict_text(what, what_size, &e->key, have, e->digest, "the remote");
        kc_store_count(store, KC_COUNTER_CONFLICTS, 1);
        kc_log_unlocked(store, KCACHE_LOG_WARNING, what);
        return 1;
    }
    return 0;
}

int kc_store_bundle_has(const char *path, const kcache_key *key, char *err, size_t err_size)
{
    kcache_store *b = NULL;
    int rc = kc_store_open_bundle(&b, path, err, err_size);
    if (rc)
        return rc;
    kcache_entry *e = NULL;
    rc = kcache_store_get(&e, b, key, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA |
                                          KCACHE_GET_NO_COUNT);
    if (rc && rc != KCACHE_ENOTFOUND)
        snprintf(err, err_size, "%s", kcache_store_errmsg(b));
    kcache_entry_free(e);
    kcache_store_close(b);
    return rc == 0 ? 1 : rc == KCACHE_ENOTFOUND ? 0 : rc;
}
