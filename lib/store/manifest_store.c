/*
 * Closures (manifests) in the database, and the counters of compiles served
 * without the cache. A closure only saves work: every failure here is
 * returned for the caller to ignore, never turned into a failed compile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storelib.h"
#include "store/storeint.h"

void kc_manifest_rows_free(kc_manifest_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rows[i].closure);
    free(rows);
}

static int manifest_get_locked(kc_manifest_row **out, size_t *n, kcache_store *s,
                               const kcache_key *base)
{
    sqlite3_stmt *q;
    int rc = kc_db_stmt(&s->db, &q, KC_STMT_MANIFEST_GET);
    if (rc)
        return rc;
    kc_manifest_row *rows = kc_calloc(KC_MANIFEST_PER_BASE, sizeof(*rows));
    if (!rows)
        return kc_err(s, KCACHE_ENOMEM, "out of memory");
    sqlite3_bind_blob(q, 1, base->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, KC_MANIFEST_PER_BASE);
    size_t k = 0;
    int src = SQLITE_DONE;
    while (k < KC_MANIFEST_PER_BASE && (src = sqlite3_step(q)) == SQLITE_ROW) {
        const void *key = sqlite3_column_blob(q, 0);
        int64_t recorded_at = sqlite3_column_int64(q, 1);
        int codec = sqlite3_column_int(q, 2);
        sqlite3_int64 raw_size = sqlite3_column_int64(q, 3);
        const void *blob = sqlite3_column_blob(q, 4);
        int size = sqlite3_column_bytes(q, 4);
        if (!key || sqlite3_column_bytes(q, 0) != KCACHE_KEY_SIZE || !blob || size <= 0 ||
            raw_size <= 0 || raw_size > (64 << 20))
            continue;
        memcpy(rows[k].key.bytes, key, KCACHE_KEY_SIZE);
        int drc = kc_decode(s->codec, &rows[k].closure, codec, blob, (size_t)size,
                            (size_t)raw_size);
        if (drc == KCACHE_ENOMEM) {
            rc = kc_err(s, KCACHE_ENOMEM, "out of memory");
            break;
        }
        if (drc)
            continue; /* a damaged closure is no closure: the long way finds the key */
        rows[k].recorded_at = recorded_at;
        rows[k++].size = (size_t)raw_size;
    }
    if (!rc && k < KC_MANIFEST_PER_BASE && src != SQLITE_DONE)
        rc = kc_sqlerr(&s->db, src, "reading include closures");
    sqlite3_reset(q);
    if (rc) {
        kc_manifest_rows_free(rows, k);
        return rc;
    }
    *out = rows;
    *n = k;
    return 0;
}

int kc_store_manifest_get(kc_manifest_row **out, size_t *n, kcache_store *s,
                          const kcache_key *base)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&s->lock);
    int rc = s->db.conn ? manifest_get_locked(out, n, s, base) : KCACHE_EIO;
    kc_unlock(s);
    return rc;
}

/* The id of the closure with these bytes, stored now if it was not. */
static int closure_id(int64_t *id, kcache_store *s, const void *closure, size_t size)
{
    /* Compressed: a closure is mostly paths (about 5x). */
    return kc_blob_id(id, s, KC_STMT_CLOSURE_FIND, KC_STMT_CLOSURE_PUT, &s->scratch, closure, size,
                      "finding an include closure", "storing an include closure");
}

/* Runs a statement bound to base and either key or an integer limit, to its end. */
static int step_base_key(kcache_store *s, enum kc_stmt which, const kcache_key *base,
                         const kcache_key *key, int limit, const char *what)
{
    sqlite3_stmt *q;
    int rc = kc_db_stmt(&s->db, &q, which);
    if (rc)
        return rc;
    sqlite3_bind_blob(q, 1, base->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    if (key)
        sqlite3_bind_blob(q, 2, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    else
        sqlite3_bind_int(q, 2, limit);
    int src = sqlite3_step(q);
    sqlite3_reset(q);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, what);
}

static int manifest_put_locked(kcache_store *s, const kcache_key *base, const kcache_key *key,
                               int64_t recorded_at, const void *closure, size_t size)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    int64_t id = 0;
    sqlite3_stmt *q;
    /* This base's closures now: those the delete and the trim leave unused go after
     * them (prune.c: no trigger does it). */
    int64_t *before = NULL;
    size_t n_before = 0;
    rc = kc_closures_collect(s, "SELECT closure_id FROM manifest WHERE base = ?1", base, &before,
                             &n_before);
    if (!rc)
        rc = step_base_key(s, KC_STMT_MANIFEST_DELETE, base, key, 0,
                           "replacing an include closure");
    if (!rc)
        rc = closure_id(&id, s, closure, size);
    if (!rc && !(rc = kc_db_stmt(&s->db, &q, KC_STMT_MANIFEST_PUT))) {
        sqlite3_bind_blob(q, 1, base->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_blob(q, 2, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(q, 3, id);
        sqlite3_bind_int64(q, 4, recorded_at);
        sqlite3_bind_int64(q, 5, kc_now_ms());
        int src = sqlite3_step(q);
        sqlite3_reset(q);
        if (src != SQLITE_DONE)
            rc = kc_sqlerr(&s->db, src, "storing an include closure");
    }
    /* Several closures per base key (a header's edit and its revert), not without end. */
    if (!rc)
        rc = step_base_key(s, KC_STMT_MANIFEST_TRIM, base, NULL, KC_MANIFEST_PER_BASE,
                           "trimming include closures");
    if (!rc)
        rc = kc_closures_drop_unused(s, before, n_before);
    free(before);
    if (rc) {
        kc_db_rollback(&s->db);
        return rc;
    }
    return kc_db_commit(&s->db);
}

int kc_store_manifest_put(kcache_store *s, const kcache_key *base, const kcache_key *key,
                          int64_t recorded_at, const void *closure, size_t size)
{
    pthread_mutex_lock(&s->lock);
    int rc = s->db.conn ? manifest_put_locked(s, base, key, recorded_at, closure, size)
                        : KCACHE_EIO;
    kc_unlock(s);
    return rc;
}

void kc_store_count_uncacheable(kcache_store *s, const char *reason)
{
    if (!s)
        return;
    char name[64];
    snprintf(name, sizeof(name), "uncacheable.%s", reason && *reason ? reason : "other");
    pthread_mutex_lock(&s->lock);
    /* Written at once: such a compile ran NVRTC, far slower than this write. */
    if (s->db.conn && kc_db_begin_write(&s->db) == 0) {
        sqlite3_stmt *q;
        int rc = kc_db_stmt(&s->db, &q, KC_STMT_COUNTER_ADD);
        if (!rc) {
            sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(q, 2, 1);
            rc = sqlite3_step(q) == SQLITE_DONE ? 0 : KCACHE_EIO;
            sqlite3_reset(q);
        }
        if (rc)
            kc_db_rollback(&s->db);
        else
            kc_db_commit(&s->db);
    }
    kc_unlock(s);
}
