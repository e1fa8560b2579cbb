/*
 * The named counters' entry points: a count queued with the hits (written by
 * the next flush, touch.c), and a counter read back with what is still
 * pending. Above the flush; counter.c below it writes the rows.
 */
#include <stdio.h>
#include <string.h>

#include "store/storeint.h"

void kc_store_count(kcache_store *store, const char *name, uint64_t delta)
{
    if (!store || !delta || strlen(name) >= sizeof(store->counters[0].name))
        return;
    pthread_mutex_lock(&store->lock);
    struct kc_counter_delta *c = NULL;
    for (size_t i = 0; i < store->n_counters; i++)
        if (!strcmp(store->counters[i].name, name))
            c = &store->counters[i];
    if (!c) {
        struct kc_counter_delta *grown = kc_grow(store->counters, &store->cap_counters,
                                                 store->n_counters, sizeof(*grown), 8);
        if (grown) {
            store->counters = grown;
            c = &store->counters[store->n_counters++];
            snprintf(c->name, sizeof(c->name), "%s", name);
            c->value = 0;
        }
    }
    if (c) /* out of memory: one count lost, nothing else */
        c->value += delta;
    kc_maybe_flush_locked(store);
    kc_unlock(store);
}

static int read_counter(kcache_store *s, const char *name, uint64_t *out)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st, KC_STMT_COUNTER_GET);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    *out = src == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return src == SQLITE_ROW || src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "reading counters");
}

KCACHE_API int kcache_store_counter(uint64_t *out, kcache_store *store, const char *name)
{
    KC_CHECK_ARG(store, out && name);
    *out = 0;
    pthread_mutex_lock(&store->lock);
    uint64_t v = 0;
    int rc;
    KC_WITH_RECOVERY(store, rc, read_counter(store, name, &v));
    if (!rc)
        *out = v + kc_counter_pending(store, name);
    kc_unlock(store);
    return rc;
}
