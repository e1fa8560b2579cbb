/*
 * Entries from the shared tier enter through the same gate as a bundle's
 * (ingest.c), then the normal put: lib/remote/ decodes and checks what only
 * it knows (its value format, the signature, the bounds before decompressing)
 * and hands the entry here.
 */
#include "store/ingest.h"

int kc_store_admit(kcache_store *store, kcache_entry *e, char *what, size_t what_size)
{
    pthread_mutex_lock(&store->lock);
    int rc = kc_ingest_check_entry(store, e, kc_now_ms(), what, what_size);
    pthread_mutex_unlock(&store->lock);
    return rc ? rc : kcache_store_put(store, e);
}
