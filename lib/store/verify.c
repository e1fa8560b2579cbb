/* kcache verify: SQLite's integrity check, then every entry through the store's own checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcache/verify.h"
#include "store/storeint.h"

static int integrity(kcache_store *s, kcache_verify_result *r)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    int src = s->db.conn
                  ? sqlite3_prepare_v2(s->db.conn, "PRAGMA integrity_check(20)", -1, &st, NULL)
                  : SQLITE_MISUSE;
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(st, 0);
        /* One line: SQLite may put several into this row. */
        static const char banner[] = "*** in database main ***";
        const char *t = first ? first : "?";
        if (!strncmp(t, banner, sizeof(banner) - 1))
            t += sizeof(banner) - 1;
        while (*t == '\n' || *t == ' ')
            t++;
        size_t n = 0;
        for (; *t && n + 1 < sizeof(r->integrity); t++)
            r->integrity[n++] = *t == '\n' || *t == '\r' ? ' ' : *t;
        r->integrity[n] = '\0';
        r->integrity_ok = first && !strcmp(first, "ok") && sqlite3_step(st) == SQLITE_DONE;
    } else if ((src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB) {
        snprintf(r->integrity, sizeof(r->integrity), "%s", sqlite3_errstr(src));
        r->integrity_ok = 0;
    } else {
        rc = kc_sqlerr(&s->db, src, "checking the database");
    }
    sqlite3_finalize(st);
    kc_unlock(s);
    return rc;
}


KCACHE_API int kcache_store_verify(kcache_verify_result *out, kcache_store *store,
                                   kcache_progress_fn progress, kcache_damaged_fn on_damaged,
                                   void *userdata)
{
    kcache_verify_result r = KCACHE_VERIFY_RESULT_INIT;
    memset(&r, 0, sizeof(r));
    kcache_key *keys = NULL;
    size_t n_keys = 0;
    if (!store)
        return KCACHE_EINVAL;
    char msg[KC_ERRMSG_SIZE];
    if (out && kc_version_check(msg, sizeof(msg), "kcache_verify_result", out->version,
                                KCACHE_VERIFY_RESULT_VERSION))
        return kc_err_locking(store, KCACHE_EINVAL, "%s", msg);
    int rc = integrity(store, &r);
    if (rc)
        goto out;
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_CREATED;
    rc = kcache_store_list_keys(&keys, &n_keys, store, &f);
    if (rc)
        goto out;
    for (size_t i = 0; i < n_keys; i++) {
        if (progress)
            progress(userdata, "verifying", i, n_keys);
        kcache_entry *e = NULL;
        rc = kcache_store_get(&e, store, &keys[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        /* Gone since it was listed (pruned or cleared by another process): not damage. */
        if (rc == KCACHE_ENOTFOUND && !kc_store_get_found_damage(store)) {
            rc = 0;
            continue;
        }
        r.entries++;
        if (rc == KCACHE_ENOTFOUND || rc == KCACHE_ECORRUPT) {
            r.damaged++;
            if (on_damaged)
                on_damaged(userdata, &keys[i], kcache_store_errmsg(store));
            rc = 0;
            continue;
        }
        if (rc)
            goto out;
        r.bytes += e->size;
        kcache_entry_free(e);
    }
    if (progress)
        progress(userdata, "verifying", n_keys, n_keys);
    /* Writable (verify --fix): what the damaged entries' deletes could not reach goes too. */
    if (r.damaged)
        rc = kc_shared_sweep(store);
out:
    kcache_keys_free(keys);
    if (out) {
        r.version = out->version;
        *out = r;
    }
    return rc;
}
