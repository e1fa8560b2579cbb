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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

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
    if (!options)
        options = &defaults;
    char msg[KC_ERRMSG_SIZE];
    if (kc_version_check(msg, sizeof(msg), "kcache_batch_options", options->version,
                         KCACHE_BATCH_OPTIONS_VERSION))
        return kc_err_locking(store, KCACHE_EINVAL, "%s", msg);
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
