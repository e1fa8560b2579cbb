/*
 * Putting entries: one at a time, in batches, and from the shared tier.
 * The store's put rules, an entry encoded and hashed, its rows written
 * (alone, or in a batch of the import gate).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"
#include "store/ingest.h"

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
/*
 * The entry_info row of entry id: its log, names and key material, less the
 * lists other entries may share, stored once (shared.c). *inputs_id, *in_at
 * and *in_n: where its inputs went into a shared list (*inputs_id 0: none).
 */
static int put_info(kcache_store *s, const struct kc_put_ctx *p, int64_t id, int64_t *inputs_id,
                    size_t *in_at, size_t *in_n)
{
    /* The lists other entries may share, stored once (shared.c); the row keeps the rest. */
    const kcache_entry *e = p->e;
    sqlite3_stmt *st;
    int64_t headers_id;
    size_t h_at, h_len;
    int rc;
    if ((rc = kc_shared_headers_put(s, e, &headers_id, &h_at, &h_len)) ||
        (rc = kc_shared_inputs_put(s, e, inputs_id, in_at, in_n)))
        return rc;
    uint8_t *rest = NULL;
    if (headers_id) {
        if (!(rest = kc_malloc(e->key_material_size - h_len + 1)))
            return kc_err(s, KCACHE_ENOMEM, "out of memory");
        memcpy(rest, e->key_material, h_at);
        memcpy(rest + h_at, (const uint8_t *)e->key_material + h_at + h_len,
               e->key_material_size - h_at - h_len);
    }
    if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_INSERT_INFO))) {
        free(rest);
        return rc;
    }
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, e->log);
    sqlite3_bind_blob64(st, 3, p->names->data, p->names->size, SQLITE_STATIC);
    if (headers_id) {
        sqlite3_bind_blob64(st, 4, rest, e->key_material_size - h_len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, headers_id);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)h_at);
    } else if (e->key_material_size) {
        sqlite3_bind_blob64(st, 4, e->key_material, e->key_material_size, SQLITE_STATIC);
    }
    if (*inputs_id) {
        sqlite3_bind_int64(st, 7, *inputs_id);
        sqlite3_bind_int64(st, 8, (sqlite3_int64)*in_at);
    }
    rc = step_done(s, st, "storing an entry");
    sqlite3_clear_bindings(st);
    free(rest);
    return rc;
}

int kc_put_rows(kcache_store *s, const struct kc_put_ctx *p)
{
    const kcache_entry *e = p->e;
    sqlite3_stmt *st;
    int rc;
    int64_t replaced;
    if ((rc = kc_delete_key(s, &e->key, &replaced)))
        goto fail;
    /* The totals, which no trigger keeps (prune.c). */
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

    int64_t inputs_id;
    size_t in_at, in_n;
    if ((rc = put_info(s, p, id, &inputs_id, &in_at, &in_n)))
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

/*
 * Batches of puts: entries checked and compressed as they come,
 * outside the store's lock, then written in one transaction each
 * max_entries.
 *
 * What a batch saves is the work of a commit per entry (BEGIN IMMEDIATE, the
 * WAL's frames and index, the locks, the cap's look at the files), and the
 * store's lock while compressing: several threads, each with its own batch,
 * compress at once. What it keeps from a put: the same checks and rows
 * (kc_put_rows), the same recovery from a damaged file, the same count of
 * failures, the cap enforced after each transaction, and all or nothing per
 * transaction, so that no reader ever sees half an entry.
 */
#define KC_BATCH_DEFAULT_ENTRIES 64

/* Compressed bytes held in memory before a batch writes itself. */
#define KC_BATCH_MAX_BYTES (UINT64_C(64) << 20)

/* One entry waiting: a copy of what kc_put_rows() reads, and its encoded bytes. */
struct pending {
    kcache_entry e;
    kcache_input *inputs;
    kc_buf stored, names;
    struct kc_put_ctx ctx;
};

struct kcache_batch {
    kcache_store *store;
    kc_codec_ctx *codec;
    size_t max_entries;
    struct pending *p;
    size_t n, cap;
    uint64_t bytes;
};

static void pending_free(struct pending *p)
{
    free((void *)p->e.arch);
    free((void *)p->e.name);
    free((void *)p->e.log);
    free((void *)p->e.toolchain);
    free((void *)p->e.key_material);
    for (size_t i = 0; p->inputs && i < p->e.n_inputs; i++) {
        free((void *)p->inputs[i].name);
        free((void *)p->inputs[i].data);
    }
    free(p->inputs);
    kc_buf_free(&p->stored);
    kc_buf_free(&p->names);
}

static void drop_all(kcache_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        pending_free(&b->p[i]);
    b->n = 0;
    b->bytes = 0;
}

/* The fields kc_put_rows() reads, copied: the caller's buffers are its own again. */
static int copy_entry(struct pending *p, const kcache_entry *e)
{
    kcache_entry *c = &p->e;
    c->version = KCACHE_ENTRY_VERSION;
    c->key = e->key;
    c->kind = e->kind;
    c->size = e->size;
    c->compile_ns = e->compile_ns;
    c->n_names = e->n_names; /* the names themselves are in p->names */
    c->arch = kc_strdup(e->arch);
    c->name = kc_strdup(e->name ? e->name : "");
    c->log = kc_strdup(e->log ? e->log : "");
    c->toolchain = kc_strdup(e->toolchain ? e->toolchain : "");
    if (!c->arch || !c->name || !c->log || !c->toolchain)
        return KCACHE_ENOMEM;
    if (e->key_material_size) {
        if (!(c->key_material = kc_memdup(e->key_material, e->key_material_size)))
            return KCACHE_ENOMEM;
        c->key_material_size = e->key_material_size;
    }
    if (e->n_inputs) {
        if (!(p->inputs = kc_calloc(e->n_inputs, sizeof(*p->inputs))))
            return KCACHE_ENOMEM;
        c->inputs = p->inputs;
        c->n_inputs = e->n_inputs;
        for (size_t i = 0; i < e->n_inputs; i++) {
            const kcache_input *in = &e->inputs[i];
            p->inputs[i].role = in->role;
            p->inputs[i].size = in->size;
            p->inputs[i].name = kc_strdup(in->name);
            p->inputs[i].data = kc_memdup(in->data, in->size);
            if (!p->inputs[i].name || !p->inputs[i].data)
                return KCACHE_ENOMEM;
        }
    }
    return 0;
}

KCACHE_API int kcache_batch_new(kcache_batch **out, kcache_store *store,
                                const kcache_batch_options *options)
{
    static const kcache_batch_options defaults = KCACHE_BATCH_OPTIONS_INIT;
    if (!store)
        return KCACHE_EINVAL;
    if (!out)
        return kc_err_locking(store, KCACHE_EINVAL, "kcache_batch_new: out is NULL");
    *out = NULL;
    if (kc_check_version(store, options, "kcache_batch_options", KCACHE_BATCH_OPTIONS_VERSION))
        return KCACHE_EINVAL;
    if (!options)
        options = &defaults;
    kcache_batch *b = kc_calloc(1, sizeof(*b));
    if (!b || kc_codec_new(&b->codec)) {
        free(b);
        return kc_err_locking(store, KCACHE_ENOMEM, "out of memory");
    }
    b->store = store;
    b->max_entries = options->max_entries ? options->max_entries : KC_BATCH_DEFAULT_ENTRIES;
    *out = b;
    return 0;
}

/* Writes every waiting entry in one transaction; the store's lock is held. */
static int write_locked(kcache_store *s, kcache_batch *b)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    if ((rc = kc_pending_write(s)))
        goto fail;
    for (size_t i = 0; i < b->n; i++) {
        struct pending *p = &b->p[i];
        /* Pointed here, not when added: the array may have moved since. */
        p->ctx.e = &p->e;
        p->ctx.stored = &p->stored;
        p->ctx.names = &p->names;
        if ((rc = kc_put_rows(s, &p->ctx)))
            goto fail;
    }
    if ((rc = kc_db_commit(&s->db)))
        goto fail;
    kc_pending_clear(s);
    return 0;
fail:
    kc_db_rollback(&s->db);
    return rc;
}

KCACHE_API int kcache_batch_commit(kcache_batch *batch)
{
    if (!batch)
        return KCACHE_EINVAL;
    if (!batch->n)
        return 0;
    kcache_store *s = batch->store;
    pthread_mutex_lock(&s->lock);
    int rc;
    KC_WITH_RECOVERY(s, rc, write_locked(s, batch));
    if (!rc)
        rc = kc_maybe_prune_locked(s);
    else if (rc != KCACHE_EINVAL && rc != KCACHE_EREADONLY && rc != KCACHE_EVERSION)
        s->pending_failures += batch->n; /* each entry lost is a put that failed */
    if (rc == KCACHE_EFULL)
        kc_count_now_locked(s);
    kc_unlock(s);
    drop_all(batch);
    return rc;
}

KCACHE_API int kcache_batch_put(kcache_batch *batch, const kcache_entry *entry)
{
    if (!batch)
        return KCACHE_EINVAL;
    kcache_store *s = batch->store;
    if (!entry)
        return kc_err_locking(s, KCACHE_EINVAL, "kcache_batch_put: entry is NULL");
    pthread_mutex_lock(&s->lock);
    int rc = kc_put_allowed(s, entry);
    kc_unlock(s);
    if (rc)
        return rc;
    struct pending *grown = kc_grow(batch->p, &batch->cap, batch->n, sizeof(*grown), 16);
    if (!grown)
        return kc_err_locking(s, KCACHE_ENOMEM, "out of memory");
    batch->p = grown;
    struct pending *p = &batch->p[batch->n];
    memset(p, 0, sizeof(*p));
    /* The costly part (compressing, hashing) without the store's lock. */
    /* s->compression is set at open and never changes: no lock needed to read it. */
    rc = kc_put_encode(&p->ctx, entry, batch->codec, s->compression, &p->stored, &p->names);
    if (!rc)
        rc = copy_entry(p, entry);
    if (rc) {
        pending_free(p);
        return kc_err_locking(s, rc, rc == KCACHE_ENOMEM ? "out of memory compressing an artifact"
                                                    : "kcache_batch_put: name expressions too "
                                                      "large");
    }
    batch->n++;
    /* What the batch holds for it: the stored artifact, the key material and
     * the raw copy of each input (a header closure can be megabytes). */
    batch->bytes += p->stored.size + p->e.key_material_size;
    for (size_t i = 0; i < p->e.n_inputs; i++)
        batch->bytes += p->e.inputs[i].size;
    if (batch->n >= batch->max_entries || batch->bytes >= KC_BATCH_MAX_BYTES)
        return kcache_batch_commit(batch);
    return 0;
}

KCACHE_API size_t kcache_batch_pending(const kcache_batch *batch)
{
    return batch ? batch->n : 0;
}

KCACHE_API void kcache_batch_free(kcache_batch *batch)
{
    if (!batch)
        return;
    drop_all(batch);
    free(batch->p);
    kc_codec_free(batch->codec);
    free(batch);
}

/*
 * Entries from the shared tier enter through the same gate as a bundle's
 * (ingest.c), then a put: lib/remote/ decodes and checks what only it knows
 * (its value format, the signature, the bounds before decompressing) and
 * hands the entry here.
 */
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
