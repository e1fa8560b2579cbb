/* kcache verify: SQLite's integrity check, then every entry through the store's own checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcache/verify.h"
#include "storeint.h"

static int integrity(kcache_store *s, kcache_verify_result *r)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    int src = s->db ? sqlite3_prepare_v2(s->db, "PRAGMA integrity_check(20)", -1, &st, NULL)
                    : SQLITE_MISUSE;
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(st, 0);
        snprintf(r->integrity, sizeof(r->integrity), "%s", first ? first : "?");
        r->integrity_ok = first && !strcmp(first, "ok") && sqlite3_step(st) == SQLITE_DONE;
    } else if ((src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB) {
        snprintf(r->integrity, sizeof(r->integrity), "%s", sqlite3_errstr(src));
        r->integrity_ok = 0;
    } else {
        rc = kc_sqlerr(s, src, "checking the database");
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

struct keys {
    kcache_key *keys;
    size_t n, cap;
};

static int collect(void *userdata, const kcache_entry *e)
{
    struct keys *k = userdata;
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        kcache_key *p = kc_realloc(k->keys, cap * sizeof(*p));
        if (!p)
            return KCACHE_ENOMEM;
        k->keys = p;
        k->cap = cap;
    }
    k->keys[k->n++] = e->key;
    return 0;
}

KCACHE_API int kcache_store_verify(kcache_store *store, kcache_progress_fn progress,
                                   kcache_damaged_fn on_damaged, void *userdata,
                                   kcache_verify_result *out)
{
    kcache_verify_result r;
    memset(&r, 0, sizeof(r));
    struct keys k = {0};
    if (!store)
        return KCACHE_EINVAL;
    int rc = integrity(store, &r);
    if (rc)
        goto out;
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_CREATED;
    rc = kcache_store_list(store, &f, collect, &k);
    if (rc == KCACHE_ENOMEM) {
        pthread_mutex_lock(&store->lock);
        kc_err(store, rc, "out of memory listing entries");
        pthread_mutex_unlock(&store->lock);
    }
    if (rc)
        goto out;
    for (size_t i = 0; i < k.n; i++) {
        if (progress)
            progress(userdata, "verifying", i, k.n);
        kcache_entry *e = NULL;
        rc = kcache_store_get(store, &e, &k.keys[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        r.entries++;
        if (rc == KCACHE_ENOTFOUND || rc == KCACHE_ECORRUPT) {
            r.damaged++;
            if (on_damaged)
                on_damaged(userdata, &k.keys[i], kcache_store_errmsg(store));
            rc = 0;
            continue;
        }
        if (rc)
            goto out;
        r.bytes += e->size;
        kcache_entry_free(e);
    }
    if (progress)
        progress(userdata, "verifying", k.n, k.n);
out:
    free(k.keys);
    if (out)
        *out = r;
    return rc;
}
