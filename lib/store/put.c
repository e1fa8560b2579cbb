/*
 * Putting entries: the store's put rules, an entry encoded and hashed, its
 * rows written (alone, or in a batch of the import gate).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

static int bind_text(sqlite3_stmt *st, int col, const char *text)
{
    return sqlite3_bind_text(st, col, text ? text : "", -1, SQLITE_STATIC);
}

static int put_input(kcache_store *s, int64_t entry_id, int seq, const kcache_input *in)
{
    /* Not s->scratch: that holds the entry's own encoded bytes during a put. */
    kc_buf enc = {0};
    int64_t input_id;
    int rc = kc_blob_id(&input_id, s, KC_STMT_FIND_INPUT, KC_STMT_INSERT_INPUT, &enc, in->data,
                        in->size, "storing inputs", "storing inputs");
    kc_buf_free(&enc);
    if (rc)
        return rc;
    sqlite3_stmt *st;
    if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_INSERT_ENTRY_INPUT)))
        return rc;
    sqlite3_bind_int64(st, 1, entry_id);
    sqlite3_bind_int(st, 2, seq);
    sqlite3_bind_int(st, 3, in->role);
    bind_text(st, 4, in->name);
    sqlite3_bind_int64(st, 5, input_id);
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "storing inputs");
}

static int step_done(kcache_store *s, sqlite3_stmt *st, const char *what)
{
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, what);
}

/* The rows of one entry, inside a write transaction the caller holds. */
int kc_put_rows(kcache_store *s, const struct kc_put_ctx *p)
{
    const kcache_entry *e = p->e;
    sqlite3_stmt *st;
    int rc;
    int64_t replaced;
    if ((rc = kc_delete_key(s, &e->key, &replaced)))
        goto fail;
    /* The totals, which no trigger keeps (cascade.c). */
    int src = sqlite3_prepare_v2(s->db.conn,
                                 "UPDATE totals SET entries = entries + 1,"
                                 " raw_bytes = raw_bytes + ?1, stored_bytes = stored_bytes + ?2",
                                 -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)e->size);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)p->stored->size);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    if (src != SQLITE_DONE) {
        rc = kc_sqlerr(&s->db, src, "storing an entry");
        goto fail;
    }

    if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_INSERT_ENTRY)))
        goto fail;
    sqlite3_bind_blob(st, 1, e->key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)e->kind);
    bind_text(st, 3, e->arch);
    bind_text(st, 4, e->name);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)e->size);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)p->stored->size);
    sqlite3_bind_int(st, 7, p->codec);
    sqlite3_bind_blob(st, 8, p->digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, kc_use_ms(s));
    sqlite3_bind_int64(st, 10, (sqlite3_int64)e->compile_ns);
    bind_text(st, 11, e->toolchain);
    if ((rc = step_done(s, st, "storing an entry")))
        goto fail;
    int64_t id = sqlite3_last_insert_rowid(s->db.conn);
    /* Counted with the row: entries_added - entries_removed is the entries there
     * are, and each removal has its reason's counter (doc/design.md, The store). */
    if ((rc = kc_counter_write(s, "entries_added", 1)) ||
        (replaced && (rc = kc_counter_write(s, "entries_replaced", (uint64_t)replaced))))
        goto fail;

    /* The lists other entries may share, stored once (shared.c); the row keeps the rest. */
    int64_t headers_id, inputs_id;
    size_t h_at, h_len, in_at, in_n;
    if ((rc = kc_shared_headers_put(s, e, &headers_id, &h_at, &h_len)) ||
        (rc = kc_shared_inputs_put(s, e, &inputs_id, &in_at, &in_n)))
        goto fail;
    uint8_t *rest = NULL;
    if (headers_id) {
        if (!(rest = kc_malloc(e->key_material_size - h_len + 1))) {
            rc = kc_err(s, KCACHE_ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(rest, e->key_material, h_at);
        memcpy(rest + h_at, (const uint8_t *)e->key_material + h_at + h_len,
               e->key_material_size - h_at - h_len);
    }
    if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_INSERT_INFO))) {
        free(rest);
        goto fail;
    }
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, e->log);
    if (e->n_names)
        sqlite3_bind_blob64(st, 3, p->names->data, p->names->size, SQLITE_STATIC);
    if (headers_id) {
        sqlite3_bind_blob64(st, 4, rest, e->key_material_size - h_len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, headers_id);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)h_at);
    } else if (e->key_material_size) {
        sqlite3_bind_blob64(st, 4, e->key_material, e->key_material_size, SQLITE_STATIC);
    }
    if (inputs_id) {
        sqlite3_bind_int64(st, 7, inputs_id);
        sqlite3_bind_int64(st, 8, (sqlite3_int64)in_at);
    }
    rc = step_done(s, st, "storing an entry");
    sqlite3_clear_bindings(st);
    free(rest);
    if (rc)
        goto fail;

    if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_INSERT_ARTIFACT)))
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_blob(st, 2, p->stored_digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 3, p->stored->size ? (const void *)p->stored->data : "",
                        p->stored->size, SQLITE_STATIC);
    if ((rc = step_done(s, st, "storing an artifact")))
        goto fail;

    for (size_t i = 0; i < e->n_inputs; i++)
        if ((!inputs_id || i < in_at || i >= in_at + in_n) &&
            (rc = put_input(s, id, (int)i, &e->inputs[i])))
            goto fail;
    return 0;
fail:
    return rc;
}

static int put_locked(kcache_store *s, const struct kc_put_ctx *p)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    if ((rc = kc_pending_write(s)) || (rc = kc_put_rows(s, p)) || (rc = kc_db_commit(&s->db))) {
        kc_db_rollback(&s->db);
        return rc;
    }
    kc_pending_clear(s);
    return 0;
}

static int check_entry(kcache_store *s, const kcache_entry *e)
{
    char msg[KC_ERRMSG_SIZE];
    if (kc_version_check(msg, sizeof(msg), "kcache_entry", e->version, KCACHE_ENTRY_VERSION))
        return kc_err(s, KCACHE_EINVAL, "%s", msg);
    if (!kcache_kind_name(e->kind))
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: kind %d is not cubin, ptx or ltoir",
                      (int)e->kind);
    if (!e->arch || !*e->arch || strlen(e->arch) >= sizeof(((kcache_usage *)0)->arch))
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: arch must be a short non-empty name");
    if (!e->data && e->size)
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: data is NULL");
    if (e->size > (uint64_t)INT64_MAX / 2)
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: artifact too large");
    if (e->n_names && (!e->name_exprs || !e->lowered_names))
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: n_names without names");
    if (e->n_inputs && !e->inputs)
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: n_inputs without inputs");
    for (size_t i = 0; i < e->n_inputs; i++)
        if (!e->inputs[i].name || (!e->inputs[i].data && e->inputs[i].size))
            return kc_err(s, KCACHE_EINVAL, "kcache_store_put: input %zu has no name or data", i);
    if (e->key_material_size && !e->key_material)
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: key_material is NULL");
    return 0;
}

int kc_put_encode(struct kc_put_ctx *p, const kcache_entry *e, kc_codec_ctx *codec, int method,
                  kc_buf *stored, kc_buf *names)
{
    *p = (struct kc_put_ctx){.e = e, .stored = stored, .names = names};
    int rc = kc_encode(codec, stored, &p->codec, method, e->data, e->size);
    if (rc)
        return rc;
    if ((rc = kc_names_encode(names, e)))
        return rc == KCACHE_ENOMEM ? rc : KCACHE_EINVAL;
    kc_digest(p->digest, e->data, e->size);
    kc_stored_digest(p->stored_digest, stored->data, stored->size);
    return 0;
}

int kc_put_check(kcache_store *s, const kcache_entry *e)
{
    return check_entry(s, e);
}

int kc_put_allowed(kcache_store *s, const kcache_entry *e)
{
    int rc = check_entry(s, e);
    if (!rc && !s->db.conn)
        rc = kc_err(s, KCACHE_EIO, "the cache could not be reopened");
    if (!rc)
        rc = kc_db_writable(&s->db);
    return rc;
}

/* Checks and encodes an entry for kc_put_rows(): the store's own put rules. */
static int put_prepare(kcache_store *store, const kcache_entry *entry, struct kc_put_ctx *p,
                       kc_buf *names)
{
    int rc = kc_put_allowed(store, entry);
    if (!rc && (rc = kc_put_encode(p, entry, store->codec, store->compression, &store->scratch, names)))
        kc_err(store, rc, rc == KCACHE_ENOMEM ? "out of memory compressing an artifact"
                                              : "name expressions too large");
    return rc;
}

int kc_put_batch_begin(kcache_store *s)
{
    pthread_mutex_lock(&s->lock);
    int rc = s->db.conn ? kc_db_begin_write(&s->db) : kc_err(s, KCACHE_EIO, "no database");
    if (!rc && (rc = kc_pending_write(s)))
        kc_db_rollback(&s->db);
    if (rc)
        kc_unlock(s);
    return rc;
}

int kc_put_batch_add_encoded(kcache_store *s, const struct kc_put_ctx *p, int64_t created_at,
                             int64_t accessed_at)
{
    int rc = kc_put_rows(s, p);
    if (rc)
        return rc;
    /* put_rows() stamps now; a batch keeps the times it was given (already clamped). */
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(s->db.conn,
                                 "UPDATE entry SET created_at = ?1, accessed_at = ?2"
                                 " WHERE key = ?3", -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, created_at);
        sqlite3_bind_int64(st, 2, accessed_at);
        sqlite3_bind_blob(st, 3, p->e->key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "setting an entry's times");
}

int kc_put_batch_add(kcache_store *s, const kcache_entry *e, int64_t created_at,
                     int64_t accessed_at)
{
    kc_buf names = {0};
    struct kc_put_ctx p;
    int rc = put_prepare(s, e, &p, &names);
    if (!rc)
        rc = kc_put_batch_add_encoded(s, &p, created_at, accessed_at);
    kc_buf_free(&names);
    return rc;
}

int kc_put_batch_end(kcache_store *s, int commit)
{
    int rc = 0;
    if (commit && !(rc = kc_db_commit(&s->db)))
        kc_pending_clear(s);
    if (!commit || rc)
        kc_db_rollback(&s->db);
    if (!rc && commit)
        rc = kc_maybe_prune_locked(s);
    else if (rc && rc != KCACHE_EINVAL)
        s->pending_failures++;
    kc_unlock(s);
    return rc;
}

KCACHE_API int kcache_store_put(kcache_store *store, const kcache_entry *entry)
{
    KC_CHECK_ARG(store, store && entry);
    kc_buf names = {0};
    pthread_mutex_lock(&store->lock);
    struct kc_put_ctx p;
    int rc = put_prepare(store, entry, &p, &names);
    if (!rc)
        KC_WITH_RECOVERY(store, rc, put_locked(store, &p));
    if (!rc)
        rc = kc_maybe_prune_locked(store);
    else if (rc != KCACHE_EINVAL && rc != KCACHE_EREADONLY && rc != KCACHE_EVERSION)
        store->pending_failures++;
    if (rc == KCACHE_EFULL)
        kc_count_now_locked(store);
    kc_unlock(store);
    kc_buf_free(&names);
    return rc;
}
