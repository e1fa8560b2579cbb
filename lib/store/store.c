/* The store's public entry points for entries: open, get, put, delete, find, list. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/settings.h"
#include "store/schema.h"
#include "store/storeint.h"

/* A hit's touch waits in memory until this many are pending ... */
#define KC_TOUCH_BATCH 64
/* ... or this much time has passed since the last write of them. */
#define KC_TOUCH_INTERVAL_NS (2ull * 1000000000ull)
/* Touches beyond this while the lock stays taken are dropped, not queued. */
#define KC_TOUCH_MAX 4096

int kc_err(kcache_store *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
    va_end(ap);
    for (char *p = s->errmsg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return code;
}

void kc_log(kcache_store *s, int level, const char *fmt, ...)
{
    if (!s->log)
        return;
    char msg[KC_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s->log(s->log_userdata, level, msg);
}

static void store_free(kcache_store *s)
{
    kc_db_close(s);
    kc_codec_free(s->codec);
    kc_buf_free(&s->scratch);
    free(s->touches);
    free(s->usage);
    free(s->path);
    free(s->wal_path);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

KCACHE_API int kcache_store_open(kcache_store **out, const kcache_store_options *options,
                                 char *errbuf, size_t errbuf_size)
{
    static const kcache_store_options defaults = KCACHE_STORE_OPTIONS_INIT;
    if (errbuf && errbuf_size)
        errbuf[0] = '\0';
    if (!out)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL, "kcache_store_open: out is NULL");
    *out = NULL;
    if (!options)
        options = &defaults;
    if (options->version < 1 || options->version > KCACHE_STORE_OPTIONS_VERSION)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL,
                      "kcache_store_open: options version %u is not supported",
                      options->version);
    kcache_store *s = kc_calloc(1, sizeof(*s));
    if (!s)
        return kc_fmt(errbuf, errbuf_size, KCACHE_ENOMEM, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    s->read_only = options->read_only != 0;
    s->log = options->log;
    s->log_userdata = options->log_userdata;
    s->last_flush_ns = kc_mono_ns();
    /* Caller, environment, kcache.conf beside the database, default. */
    int rc = kc_config_path(&s->path, options->path, s->errmsg, sizeof(s->errmsg));
    if (!rc)
        rc = kc_config_max_size_at(&s->max_size, options->max_size, s->path, s->errmsg,
                                   sizeof(s->errmsg));
    if (!rc &&
        (rc = kc_config_busy_timeout_at(&s->busy_timeout_ms, options->busy_timeout_ms, s->path)))
        kc_err(s, rc, "KCACHE_BUSY_TIMEOUT (or busy_timeout in kcache.conf) is not a time: "
               "use milliseconds from 1 to 3600000");
    if (!rc) {
        size_t n = strlen(s->path) + 5;
        if (!(s->wal_path = kc_malloc(n)))
            rc = kc_err(s, KCACHE_ENOMEM, "out of memory");
        else
            snprintf(s->wal_path, n, "%s-wal", s->path);
    }
    if (!rc && kc_codec_new(&s->codec))
        rc = kc_err(s, KCACHE_ENOMEM, "out of memory");
    if (!rc)
        rc = kc_db_open(s);
    if (rc) {
        kc_fmt(errbuf, errbuf_size, rc, "%s", s->errmsg);
        store_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

KCACHE_API void kcache_store_close(kcache_store *store)
{
    if (!store)
        return;
    pthread_mutex_lock(&store->lock);
    if (store->db) {
        kc_flush_locked(store, 1);
        /*
         * A close does not checkpoint (db.c: a hit must not write), so a WAL
         * that another process's readers kept from being truncated would
         * stay past the cap for good. The last writer out brings the files
         * back under it; when they already are, this is two stat() calls.
         */
        if (!store->read_only && !store->newer_schema)
            kc_maybe_prune_locked(store);
    }
    pthread_mutex_unlock(&store->lock);
    store_free(store);
}

KCACHE_API const char *kcache_store_errmsg(const kcache_store *store)
{
    if (!store)
        return "no store";
    return store->errmsg[0] ? store->errmsg : "no error";
}

KCACHE_API const char *kcache_store_path(const kcache_store *store)
{
    return store ? store->path : NULL;
}

KCACHE_API uint64_t kcache_store_max_size(const kcache_store *store)
{
    return store ? store->max_size : 0;
}

KCACHE_API int kcache_store_read_only(const kcache_store *store)
{
    return store ? store->read_only || store->newer_schema : 1;
}

KCACHE_API int kcache_store_schema_version(const kcache_store *store)
{
    return store ? store->schema_version : 0;
}

/* Bails out of a public entry point with KCACHE_EINVAL. */
#define KC_CHECK_ARG(s, cond)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return (s) ? kc_err((s), KCACHE_EINVAL, "%s: invalid argument: %s", __func__, #cond)   \
                       : KCACHE_EINVAL;                                                            \
    } while (0)

/* ---- pending touches and counters ------------------------------------ */

int kc_usage_add(kcache_store *s, const char *arch, int kind, uint64_t hits, uint64_t misses,
                 uint64_t saved_ns)
{
    struct kc_usage_delta *u = NULL;
    for (size_t i = 0; i < s->n_usage; i++)
        if (s->usage[i].kind == kind && strcmp(s->usage[i].arch, arch) == 0)
            u = &s->usage[i];
    if (!u) {
        if (s->n_usage == s->cap_usage) {
            size_t cap = s->cap_usage ? 2 * s->cap_usage : 8;
            struct kc_usage_delta *grown = kc_realloc(s->usage, cap * sizeof(*grown));
            if (!grown)
                return KCACHE_ENOMEM;
            s->usage = grown;
            s->cap_usage = cap;
        }
        u = &s->usage[s->n_usage++];
        memset(u, 0, sizeof(*u));
        snprintf(u->arch, sizeof(u->arch), "%s", arch);
        u->kind = kind;
    }
    u->hits += hits;
    u->misses += misses;
    u->saved_ns += saved_ns;
    return 0;
}

static void add_touch(kcache_store *s, const kcache_key *key)
{
    if (s->n_touches == s->cap_touches) {
        if (s->cap_touches >= KC_TOUCH_MAX)
            return; /* LRU order gets a little older; nothing else is lost */
        size_t cap = s->cap_touches ? 2 * s->cap_touches : KC_TOUCH_BATCH;
        struct kc_touch *grown = kc_realloc(s->touches, cap * sizeof(*grown));
        if (!grown)
            return;
        s->touches = grown;
        s->cap_touches = cap;
    }
    struct kc_touch *t = &s->touches[s->n_touches++];
    t->key = *key;
    t->accessed_at = kc_now_ms();
    t->hits = 1;
}

/*
 * Records a hit. Hits on a key already pending merge into its touch, so a hot
 * kernel costs one UPDATE per flush however often it is hit, and the batch
 * fills (forcing a flush into some hit's path) only with distinct keys.
 */
static void touch(kcache_store *s, const kcache_key *key)
{
    for (size_t i = s->n_touches; i-- > 0;) {
        if (memcmp(s->touches[i].key.bytes, key->bytes, KCACHE_KEY_SIZE) == 0) {
            s->touches[i].accessed_at = kc_now_ms();
            s->touches[i].hits++;
            return;
        }
    }
    add_touch(s, key);
}

static int add_counter(kcache_store *s, const char *name, uint64_t value)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(s, &st, KC_STMT_COUNTER_ADD);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)value);
    rc = sqlite3_step(st);
    return rc == SQLITE_DONE ? 0 : kc_sqlerr(s, rc, "recording counters");
}

/* Writes what is pending inside the caller's write transaction. */
static int write_pending(kcache_store *s)
{
    sqlite3_stmt *st;
    int rc;
    for (size_t i = 0; i < s->n_touches; i++) {
        if ((rc = kc_db_stmt(s, &st, KC_STMT_TOUCH)))
            return rc;
        sqlite3_bind_blob(st, 1, s->touches[i].key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, s->touches[i].accessed_at);
        sqlite3_bind_int64(st, 3, s->touches[i].hits);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE)
            return kc_sqlerr(s, rc, "recording hits");
    }
    for (size_t i = 0; i < s->n_usage; i++) {
        const struct kc_usage_delta *u = &s->usage[i];
        if ((rc = kc_db_stmt(s, &st, KC_STMT_USAGE_ADD)))
            return rc;
        sqlite3_bind_text(st, 1, u->arch, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, u->kind);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)u->hits);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)u->misses);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)u->saved_ns);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE)
            return kc_sqlerr(s, rc, "recording hits");
    }
    if (s->pending_corrupt && (rc = add_counter(s, "corrupt", s->pending_corrupt)))
        return rc;
    if (s->pending_failures && (rc = add_counter(s, "store_failures", s->pending_failures)))
        return rc;
    return 0;
}

static void clear_pending(kcache_store *s)
{
    s->n_touches = 0;
    s->n_usage = 0;
    s->pending_corrupt = 0;
    s->pending_failures = 0;
    s->last_flush_ns = kc_mono_ns();
}

static int has_pending(const kcache_store *s)
{
    return s->n_touches || s->n_usage || s->pending_corrupt || s->pending_failures;
}

/*
 * Writes pending touches. With wait == 0 it only tries: if another process
 * holds the write lock, the touches stay pending and the caller (a hit) goes
 * on without waiting.
 */
int kc_flush_locked(kcache_store *s, int wait)
{
    if (!has_pending(s))
        return 0;
    if (s->read_only || s->newer_schema) {
        clear_pending(s);
        return 0;
    }
    int rc;
    if (wait) {
        rc = kc_db_begin_write(s);
    } else {
        sqlite3_busy_timeout(s->db, 0);
        int src = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        sqlite3_busy_timeout(s->db, (int)s->busy_timeout_ms);
        if ((src & 0xff) == SQLITE_BUSY)
            return 0;
        rc = src == SQLITE_OK ? 0 : kc_sqlerr(s, src, "recording hits");
    }
    if (rc)
        return rc;
    if ((rc = write_pending(s)) || (rc = kc_db_commit(s))) {
        kc_db_rollback(s);
        return rc;
    }
    clear_pending(s);
    return 0;
}

static void maybe_flush(kcache_store *s)
{
    if (s->n_touches >= KC_TOUCH_BATCH || kc_mono_ns() - s->last_flush_ns >= KC_TOUCH_INTERVAL_NS)
        kc_flush_locked(s, 0);
}

KCACHE_API int kcache_store_flush(kcache_store *store)
{
    KC_CHECK_ARG(store, store);
    pthread_mutex_lock(&store->lock);
    int rc = kc_flush_locked(store, 1);
    pthread_mutex_unlock(&store->lock);
    return rc;
}

KCACHE_API void kcache_store_count_miss(kcache_store *store, const char *arch, kcache_kind kind)
{
    if (!store)
        return;
    pthread_mutex_lock(&store->lock);
    kc_usage_add(store, arch ? arch : "", (int)kind, 0, 1, 0);
    maybe_flush(store);
    pthread_mutex_unlock(&store->lock);
}

KCACHE_API void kcache_store_count_failure(kcache_store *store)
{
    if (!store)
        return;
    pthread_mutex_lock(&store->lock);
    store->pending_failures++;
    pthread_mutex_unlock(&store->lock);
}

/* ---- building a returned entry --------------------------------------- */

/*
 * An entry is one allocation: the struct, then its arrays, strings and bytes.
 * layout_put() runs twice over the same steps, first to size the block (base
 * NULL), then to fill it, so the two can never disagree.
 */
struct layout {
    uint8_t *base;
    size_t off;
};

static void *layout_put(struct layout *l, const void *src, size_t n, size_t align)
{
    l->off = (l->off + align - 1) & ~(align - 1);
    void *dst = l->base ? l->base + l->off : NULL;
    if (dst && src && n)
        memcpy(dst, src, n);
    l->off += n;
    return dst;
}

static const char *layout_str(struct layout *l, const void *text, size_t n)
{
    char *dst = layout_put(l, text, n + 1, 1);
    if (dst)
        dst[n] = '\0';
    return dst;
}

/* Name expressions are stored as u32 count, then (u32 length, bytes) pairs. */
static int names_encode(kc_buf *b, const kcache_entry *e)
{
    int rc = kc_buf_append_u32(b, (uint32_t)e->n_names);
    for (size_t i = 0; !rc && i < e->n_names; i++) {
        const char *pair[2] = {e->name_exprs[i] ? e->name_exprs[i] : "",
                               e->lowered_names[i] ? e->lowered_names[i] : ""};
        for (int j = 0; !rc && j < 2; j++) {
            size_t len = strlen(pair[j]);
            if (len > UINT32_MAX)
                return KCACHE_EINVAL;
            rc = kc_buf_append_u32(b, (uint32_t)len);
            if (!rc)
                rc = kc_buf_append(b, pair[j], len);
        }
    }
    return rc;
}

struct names_view {
    const uint8_t *p;
    size_t size;
    uint32_t count;
};

static int names_check(struct names_view *v, const void *blob, size_t size)
{
    v->p = blob;
    v->size = size;
    v->count = 0;
    if (!blob || size == 0)
        return 0;
    if (size < 4)
        return KCACHE_ECORRUPT;
    uint32_t n = kc_read_u32(v->p);
    size_t off = 4;
    for (uint64_t i = 0; i < 2ull * n; i++) {
        if (size - off < 4)
            return KCACHE_ECORRUPT;
        uint32_t len = kc_read_u32(v->p + off);
        off += 4;
        if (size - off < len)
            return KCACHE_ECORRUPT;
        off += len;
    }
    v->count = n;
    return 0;
}

struct row {
    kcache_key key;
    int kind;
    const char *arch, *name, *toolchain, *log;
    size_t arch_n, name_n, toolchain_n, log_n;
    struct names_view names;
    const void *key_material;
    size_t key_material_size;
    size_t raw_size;
    uint64_t stored_size, hits, compile_ns;
    int64_t created_at, accessed_at;
    const void *digest;
    /* the artifact, decoded into the block when present */
    int codec;
    const void *stored;
    size_t stored_n;
    /* decoded inputs, when asked for */
    size_t n_inputs;
    kcache_input *inputs;
};


/* Lays out (or, on the second pass, fills) the entry for a row. */
static kcache_entry *layout_entry(struct layout *l, const struct row *r, kc_codec_ctx *codec,
                                  int *rc)
{
    kcache_entry *e = layout_put(l, NULL, sizeof(*e), 16);
    const char **exprs = layout_put(l, NULL, r->names.count * sizeof(char *), sizeof(char *));
    const char **lowered = layout_put(l, NULL, r->names.count * sizeof(char *), sizeof(char *));
    kcache_input *inputs = layout_put(l, NULL, r->n_inputs * sizeof(kcache_input), 16);
    const char *arch = layout_str(l, r->arch, r->arch_n);
    const char *name = layout_str(l, r->name, r->name_n);
    const char *toolchain = layout_str(l, r->toolchain, r->toolchain_n);
    const char *log = layout_str(l, r->log, r->log_n);
    size_t off = 4;
    for (uint32_t i = 0; i < r->names.count; i++) {
        for (int j = 0; j < 2; j++) {
            uint32_t len = kc_read_u32(r->names.p + off);
            const char *s = layout_str(l, r->names.p + off + 4, len);
            off += 4 + (size_t)len;
            if (e)
                (j ? lowered : exprs)[i] = s;
        }
    }
    const void *key_material = layout_put(l, r->key_material, r->key_material_size, 1);
    for (size_t i = 0; i < r->n_inputs; i++) {
        const char *in_name = layout_str(l, r->inputs[i].name, strlen(r->inputs[i].name));
        void *in_data = layout_put(l, r->inputs[i].data, r->inputs[i].size + 1, 16);
        if (e) {
            inputs[i] = r->inputs[i];
            inputs[i].name = in_name;
            inputs[i].data = in_data;
        }
    }
    uint8_t *data = r->stored ? layout_put(l, NULL, r->raw_size + 1, 16) : NULL;
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->version = KCACHE_ENTRY_VERSION;
    e->key = r->key;
    e->kind = (kcache_kind)r->kind;
    e->arch = arch;
    e->name = name;
    e->toolchain = toolchain;
    e->log = log;
    e->n_names = r->names.count;
    e->name_exprs = exprs;
    e->lowered_names = lowered;
    e->key_material = r->key_material_size ? key_material : NULL;
    e->key_material_size = r->key_material_size;
    e->n_inputs = r->n_inputs;
    e->inputs = r->n_inputs ? inputs : NULL;
    e->size = r->raw_size;
    e->stored_size = r->stored_size;
    e->hits = r->hits;
    e->compile_ns = r->compile_ns;
    e->created_at = r->created_at;
    e->accessed_at = r->accessed_at;
    if (r->digest)
        memcpy(e->digest, r->digest, sizeof(e->digest));
    if (data) {
        *rc = kc_decode_into(codec, data, r->raw_size, r->codec, r->stored, r->stored_n);
        data[r->raw_size] = '\0';
        e->data = data;
    }
    return e;
}

static int build_entry(kcache_entry **out, const struct row *r, kc_codec_ctx *codec)
{
    struct layout l = {NULL, 0};
    int rc = 0;
    layout_entry(&l, r, codec, &rc);
    l.base = kc_malloc(l.off);
    if (!l.base)
        return KCACHE_ENOMEM;
    l.off = 0;
    kcache_entry *e = layout_entry(&l, r, codec, &rc);
    if (rc) {
        free(l.base);
        return rc;
    }
    *out = e;
    return 0;
}

KCACHE_API void kcache_entry_free(kcache_entry *entry)
{
    free(entry);
}

static size_t col_text(sqlite3_stmt *st, int col, const char **out)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    *out = t ? (const char *)t : "";
    return t ? (size_t)sqlite3_column_bytes(st, col) : 0;
}

/* Reads the metadata columns shared by get and list (list's column order). */
static void row_from_list(struct row *r, sqlite3_stmt *st)
{
    memset(r, 0, sizeof(*r));
    const void *key = sqlite3_column_blob(st, 1);
    if (key && sqlite3_column_bytes(st, 1) == KCACHE_KEY_SIZE)
        memcpy(r->key.bytes, key, KCACHE_KEY_SIZE);
    r->kind = sqlite3_column_int(st, 2);
    r->arch_n = col_text(st, 3, &r->arch);
    r->name_n = col_text(st, 4, &r->name);
    r->raw_size = (size_t)sqlite3_column_int64(st, 5);
    r->stored_size = (uint64_t)sqlite3_column_int64(st, 6);
    r->digest = sqlite3_column_bytes(st, 7) == KC_DIGEST_SIZE ? sqlite3_column_blob(st, 7) : NULL;
    r->created_at = sqlite3_column_int64(st, 8);
    r->accessed_at = sqlite3_column_int64(st, 9);
    r->hits = (uint64_t)sqlite3_column_int64(st, 10);
    r->compile_ns = (uint64_t)sqlite3_column_int64(st, 11);
    r->toolchain_n = col_text(st, 12, &r->toolchain);
    r->log = "";
}

/* ---- get ------------------------------------------------------------- */

static void free_inputs(struct row *r)
{
    for (size_t i = 0; i < r->n_inputs; i++) {
        free((void *)r->inputs[i].name);
        free((void *)r->inputs[i].data);
    }
    free(r->inputs);
    r->inputs = NULL;
    r->n_inputs = 0;
}

static int load_inputs(kcache_store *s, int64_t id, struct row *r)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(s, &st, KC_STMT_GET_INPUTS);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    size_t cap = 0;
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->n_inputs == cap) {
            cap = cap ? 2 * cap : 8;
            kcache_input *grown = kc_realloc(r->inputs, cap * sizeof(*grown));
            if (!grown)
                return KCACHE_ENOMEM;
            r->inputs = grown;
        }
        kcache_input *in = &r->inputs[r->n_inputs];
        const char *name;
        size_t name_n = col_text(st, 1, &name);
        int64_t size = sqlite3_column_int64(st, 2);
        const void *stored = sqlite3_column_blob(st, 5);
        size_t stored_n = (size_t)sqlite3_column_bytes(st, 5);
        const void *digest = sqlite3_column_blob(st, 4);
        void *data = NULL;
        if (size < 0 || sqlite3_column_bytes(st, 4) != KC_DIGEST_SIZE)
            return KCACHE_ECORRUPT;
        if ((rc = kc_decode(s->codec, &data, sqlite3_column_int(st, 3), stored, stored_n,
                            (size_t)size)))
            return rc;
        uint8_t check[KC_DIGEST_SIZE];
        kc_digest(check, data, (size_t)size);
        in->role = sqlite3_column_int(st, 0);
        in->name = kc_memdup(name, name_n);
        in->data = data;
        in->size = (size_t)size;
        r->n_inputs++;
        if (!in->name)
            return KCACHE_ENOMEM;
        if (memcmp(check, digest, KC_DIGEST_SIZE) != 0)
            return KCACHE_ECORRUPT;
    }
    return src == SQLITE_DONE ? 0 : kc_sqlerr(s, src, "reading inputs");
}

static int delete_locked(kcache_store *s, const kcache_key *key)
{
    sqlite3_stmt *st;
    int rc = kc_db_begin_write(s);
    if (rc)
        return rc;
    if ((rc = kc_db_stmt(s, &st, KC_STMT_DELETE)))
        goto fail;
    sqlite3_bind_blob(st, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src != SQLITE_DONE) {
        rc = kc_sqlerr(s, src, "deleting an entry");
        goto fail;
    }
    int changed = sqlite3_changes(s->db);
    sqlite3_reset(st);
    if ((rc = write_pending(s)) || (rc = kc_db_commit(s)))
        goto fail;
    clear_pending(s);
    return changed ? 0 : KCACHE_ENOTFOUND;
fail:
    if (st)
        sqlite3_reset(st);
    kc_db_rollback(s);
    return rc;
}

static int get_locked(kcache_store *s, kcache_entry **out, const kcache_key *key, unsigned flags)
{
    sqlite3_stmt *st;
    struct row r;
    int rc = kc_db_stmt(s, &st, KC_STMT_GET);
    if (rc)
        return rc;
    sqlite3_bind_blob(st, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE) {
        sqlite3_reset(st);
        return kc_err(s, KCACHE_ENOTFOUND, "no entry for this key");
    }
    if (src != SQLITE_ROW)
        return kc_sqlerr(s, src, "reading an entry");

    memset(&r, 0, sizeof(r));
    int64_t id = sqlite3_column_int64(st, 0);
    r.key = *key;
    r.kind = sqlite3_column_int(st, 1);
    r.arch_n = col_text(st, 2, &r.arch);
    r.name_n = col_text(st, 3, &r.name);
    int64_t raw_size = sqlite3_column_int64(st, 4);
    r.stored_size = (uint64_t)sqlite3_column_int64(st, 5);
    r.codec = sqlite3_column_int(st, 6);
    r.digest = sqlite3_column_bytes(st, 7) == KC_DIGEST_SIZE ? sqlite3_column_blob(st, 7) : NULL;
    r.created_at = sqlite3_column_int64(st, 8);
    r.accessed_at = sqlite3_column_int64(st, 9);
    r.hits = (uint64_t)sqlite3_column_int64(st, 10);
    r.compile_ns = (uint64_t)sqlite3_column_int64(st, 11);
    r.toolchain_n = col_text(st, 12, &r.toolchain);
    r.log_n = col_text(st, 13, &r.log);
    const void *names = sqlite3_column_blob(st, 14);
    /* The row must be the key's: a damaged index can lead a lookup to another
     * entry's row, and handing that out would be a false hit. */
    const void *row_key = sqlite3_column_blob(st, 18);
    int damaged = raw_size < 0 || sqlite3_column_bytes(st, 18) != KCACHE_KEY_SIZE || !row_key ||
                  memcmp(row_key, key->bytes, KCACHE_KEY_SIZE) != 0 ||
                  names_check(&r.names, names, (size_t)sqlite3_column_bytes(st, 14));
    r.key_material = sqlite3_column_blob(st, 15);
    r.key_material_size = (size_t)sqlite3_column_bytes(st, 15);
    r.raw_size = (size_t)raw_size;
    if (!damaged && !(flags & KCACHE_GET_NO_DATA)) {
        const void *stored_digest = sqlite3_column_blob(st, 16);
        int digest_n = sqlite3_column_bytes(st, 16);
        /* The type first: reading the blob may convert it. SQLite hands out
         * NULL for an empty blob, which is an empty artifact, not a lost one. */
        int type = sqlite3_column_type(st, 17);
        r.stored = sqlite3_column_blob(st, 17);
        r.stored_n = (size_t)sqlite3_column_bytes(st, 17);
        if (!r.stored && type != SQLITE_NULL && sqlite3_errcode(s->db) == SQLITE_NOMEM) {
            sqlite3_reset(st);
            return kc_err(s, KCACHE_ENOMEM, "out of memory reading an artifact");
        }
        if (!r.stored && type == SQLITE_BLOB && r.stored_n == 0)
            r.stored = "";
        uint8_t check[KC_DIGEST_SIZE];
        if (r.stored)
            kc_digest(check, r.stored, r.stored_n);
        damaged = !r.stored || digest_n != KC_DIGEST_SIZE || r.stored_n != r.stored_size ||
                  memcmp(check, stored_digest, KC_DIGEST_SIZE) != 0;
        /* Raw bytes have no frame checksum behind the stored digest: they are
         * the artifact, so the same hash must also match the artifact's digest
         * (damage that hit both the bytes and stored_digest is caught here). */
        if (!damaged && r.codec == KC_CODEC_RAW)
            damaged = !r.digest || memcmp(check, r.digest, KC_DIGEST_SIZE) != 0;
    }
    if (!damaged && (flags & KCACHE_GET_INPUTS)) {
        rc = load_inputs(s, id, &r);
        if (rc == KCACHE_ECORRUPT)
            damaged = 1;
        else if (rc)
            goto out;
    }
    if (!damaged) {
        rc = build_entry(out, &r, s->codec);
        if (rc == KCACHE_ECORRUPT)
            damaged = 1;
        else if (rc)
            goto out;
    }
    if (damaged) {
        /* A miss, never a damaged kernel: drop the entry and count it. */
        sqlite3_reset(st);
        free_inputs(&r);
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, key);
        s->pending_corrupt++;
        kc_log(s, KCACHE_LOG_WARNING, "entry %s in %s is damaged%s", hex, s->path,
               s->read_only || s->newer_schema ? "" : "; deleted it");
        if (s->read_only || s->newer_schema)
            return kc_err(s, KCACHE_ENOTFOUND,
                          "entry %s is damaged (left in place: this store is read-only)", hex);
        if (delete_locked(s, key) == KCACHE_ECORRUPT)
            return KCACHE_ECORRUPT; /* SQLite says the file is damaged: the caller sets it aside */
        return kc_err(s, KCACHE_ENOTFOUND, "entry %s was damaged and has been deleted", hex);
    }
    if (!(flags & KCACHE_GET_NO_TOUCH)) {
        touch(s, key);
        kc_usage_add(s, r.arch, r.kind, 1, 0, r.compile_ns);
    }
out:
    sqlite3_reset(st);
    free_inputs(&r);
    return rc;
}

KCACHE_API int kcache_store_get(kcache_store *store, kcache_entry **out, const kcache_key *key,
                                unsigned flags)
{
    KC_CHECK_ARG(store, store && out && key);
    *out = NULL;
    pthread_mutex_lock(&store->lock);
    int rc = KCACHE_EIO;
    if (store->db)
        KC_WITH_RECOVERY(store, rc, get_locked(store, out, key, flags));
    else
        kc_err(store, rc, "the cache could not be reopened");
    if (!(flags & KCACHE_GET_NO_TOUCH) && store->db)
        maybe_flush(store);
    pthread_mutex_unlock(&store->lock);
    return rc;
}

KCACHE_API int kcache_store_delete(kcache_store *store, const kcache_key *key)
{
    KC_CHECK_ARG(store, store && key);
    pthread_mutex_lock(&store->lock);
    int rc = KCACHE_EIO;
    if (store->db)
        KC_WITH_RECOVERY(store, rc, delete_locked(store, key));
    else
        kc_err(store, rc, "no database");
    if (rc == KCACHE_ENOTFOUND)
        kc_err(store, rc, "no entry for this key");
    pthread_mutex_unlock(&store->lock);
    return rc;
}

/* ---- put ------------------------------------------------------------- */

static int bind_text(sqlite3_stmt *st, int col, const char *text)
{
    return sqlite3_bind_text(st, col, text ? text : "", -1, SQLITE_STATIC);
}

static int put_input(kcache_store *s, int64_t entry_id, int seq, const kcache_input *in)
{
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, in->data, in->size);
    sqlite3_stmt *st;
    int rc = kc_db_stmt(s, &st, KC_STMT_FIND_INPUT);
    if (rc)
        return rc;
    sqlite3_bind_blob(st, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    int src = sqlite3_step(st);
    int64_t input_id = src == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return kc_sqlerr(s, src, "storing inputs");
    if (!input_id) {
        kc_buf enc = {0};
        int codec;
        if ((rc = kc_encode(s->codec, &enc, &codec, in->data, in->size)))
            return rc;
        if ((rc = kc_db_stmt(s, &st, KC_STMT_INSERT_INPUT))) {
            kc_buf_free(&enc);
            return rc;
        }
        sqlite3_bind_blob(st, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)in->size);
        sqlite3_bind_int(st, 3, codec);
        sqlite3_bind_blob64(st, 4, enc.data ? (const void *)enc.data : "", enc.size,
                            SQLITE_STATIC);
        src = sqlite3_step(st);
        sqlite3_reset(st);
        kc_buf_free(&enc);
        if (src != SQLITE_DONE)
            return kc_sqlerr(s, src, "storing inputs");
        input_id = sqlite3_last_insert_rowid(s->db);
    }
    if ((rc = kc_db_stmt(s, &st, KC_STMT_INSERT_ENTRY_INPUT)))
        return rc;
    sqlite3_bind_int64(st, 1, entry_id);
    sqlite3_bind_int(st, 2, seq);
    sqlite3_bind_int(st, 3, in->role);
    bind_text(st, 4, in->name);
    sqlite3_bind_int64(st, 5, input_id);
    src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(s, src, "storing inputs");
}

struct put_ctx {
    const kcache_entry *e;
    const kc_buf *stored;
    int codec;
    uint8_t digest[KC_DIGEST_SIZE];
    uint8_t stored_digest[KC_DIGEST_SIZE];
    const kc_buf *names;
};

static int step_done(kcache_store *s, sqlite3_stmt *st, const char *what)
{
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(s, src, what);
}

static int put_locked(kcache_store *s, const struct put_ctx *p)
{
    const kcache_entry *e = p->e;
    sqlite3_stmt *st;
    int rc = kc_db_begin_write(s);
    if (rc)
        return rc;
    if ((rc = write_pending(s)))
        goto fail;
    if ((rc = kc_db_stmt(s, &st, KC_STMT_DELETE)))
        goto fail;
    sqlite3_bind_blob(st, 1, e->key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    if ((rc = step_done(s, st, "replacing an entry")))
        goto fail;

    if ((rc = kc_db_stmt(s, &st, KC_STMT_INSERT_ENTRY)))
        goto fail;
    sqlite3_bind_blob(st, 1, e->key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)e->kind);
    bind_text(st, 3, e->arch);
    bind_text(st, 4, e->name);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)e->size);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)p->stored->size);
    sqlite3_bind_int(st, 7, p->codec);
    sqlite3_bind_blob(st, 8, p->digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, kc_now_ms());
    sqlite3_bind_int64(st, 10, (sqlite3_int64)e->compile_ns);
    bind_text(st, 11, e->toolchain);
    if ((rc = step_done(s, st, "storing an entry")))
        goto fail;
    int64_t id = sqlite3_last_insert_rowid(s->db);

    if ((rc = kc_db_stmt(s, &st, KC_STMT_INSERT_INFO)))
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, e->log);
    if (e->n_names)
        sqlite3_bind_blob64(st, 3, p->names->data, p->names->size, SQLITE_STATIC);
    if (e->key_material_size)
        sqlite3_bind_blob64(st, 4, e->key_material, e->key_material_size, SQLITE_STATIC);
    if ((rc = step_done(s, st, "storing an entry")))
        goto fail;

    if ((rc = kc_db_stmt(s, &st, KC_STMT_INSERT_ARTIFACT)))
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_blob(st, 2, p->stored_digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 3, p->stored->size ? (const void *)p->stored->data : "",
                        p->stored->size, SQLITE_STATIC);
    if ((rc = step_done(s, st, "storing an artifact")))
        goto fail;

    for (size_t i = 0; i < e->n_inputs; i++)
        if ((rc = put_input(s, id, (int)i, &e->inputs[i])))
            goto fail;
    if ((rc = kc_db_commit(s)))
        return rc;
    clear_pending(s);
    return 0;
fail:
    kc_db_rollback(s);
    return rc;
}

static int check_entry(kcache_store *s, const kcache_entry *e)
{
    if (e->version < 1 || e->version > KCACHE_ENTRY_VERSION)
        return kc_err(s, KCACHE_EINVAL, "kcache_store_put: entry version %u is not supported",
                      e->version);
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

KCACHE_API int kcache_store_put(kcache_store *store, const kcache_entry *entry)
{
    KC_CHECK_ARG(store, store && entry);
    kc_buf names = {0};
    pthread_mutex_lock(&store->lock);
    struct put_ctx p = {.e = entry, .stored = &store->scratch, .names = &names};
    int rc = check_entry(store, entry);
    if (!rc && !store->db)
        rc = kc_err(store, KCACHE_EIO, "the cache could not be reopened");
    if (!rc)
        rc = kc_db_writable(store);
    if (!rc && (rc = kc_encode(store->codec, &store->scratch, &p.codec, entry->data, entry->size)))
        kc_err(store, rc, "out of memory compressing an artifact");
    if (!rc && (rc = names_encode(&names, entry)))
        kc_err(store, rc, "name expressions too large");
    if (!rc) {
        kc_digest(p.digest, entry->data, entry->size);
        kc_digest(p.stored_digest, store->scratch.data, store->scratch.size);
        KC_WITH_RECOVERY(store, rc, put_locked(store, &p));
    }
    if (!rc)
        rc = kc_maybe_prune_locked(store);
    else if (rc != KCACHE_EINVAL && rc != KCACHE_EREADONLY && rc != KCACHE_EVERSION)
        store->pending_failures++;
    pthread_mutex_unlock(&store->lock);
    kc_buf_free(&names);
    return rc;
}

/* ---- find and list --------------------------------------------------- */

KCACHE_API int kcache_store_find(kcache_store *store, kcache_key *out, const char *hex_prefix)
{
    KC_CHECK_ARG(store, store && out && hex_prefix);
    size_t n = strlen(hex_prefix);
    uint8_t lo[KCACHE_KEY_SIZE] = {0}, hi[KCACHE_KEY_SIZE + 1];
    if (n < 4 || n > 2 * KCACHE_KEY_SIZE)
        return kc_err(store, KCACHE_EINVAL,
                      "key prefix '%.80s' must be 4 to 64 hex digits (see 'kcache ls')",
                      hex_prefix);
    char full[2 * KCACHE_KEY_SIZE + 1];
    memset(full, '0', sizeof(full) - 1);
    full[sizeof(full) - 1] = '\0';
    memcpy(full, hex_prefix, n);
    kcache_key parsed;
    if (kcache_key_parse(&parsed, full) != 0)
        return kc_err(store, KCACHE_EINVAL,
                      "key prefix '%.80s' is not hexadecimal (see 'kcache ls')", hex_prefix);
    memcpy(lo, parsed.bytes, sizeof(lo));
    /* The upper bound: the prefix plus one in its last digit, carried. */
    size_t nbytes = (n + 1) / 2;
    memcpy(hi, lo, sizeof(lo));
    unsigned step = n % 2 ? 0x10 : 0x01;
    size_t hi_n = nbytes;
    int carry = 1;
    for (size_t i = nbytes; i-- > 0 && carry;) {
        unsigned v = hi[i] + step;
        hi[i] = (uint8_t)v;
        carry = v > 0xff;
        step = 1;
    }
    if (carry) {
        memset(hi, 0xff, sizeof(hi));
        hi_n = sizeof(hi);
    }
    pthread_mutex_lock(&store->lock);
    sqlite3_stmt *st;
    int rc = store->db ? kc_db_stmt(store, &st, KC_STMT_FIND_PREFIX)
                       : kc_err(store, KCACHE_EIO, "no database");
    if (!rc) {
        sqlite3_bind_blob(st, 1, lo, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, hi, (int)hi_n, SQLITE_STATIC);
        int found = 0, src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            if (found++ == 0 && sqlite3_column_bytes(st, 0) == KCACHE_KEY_SIZE)
                memcpy(out->bytes, sqlite3_column_blob(st, 0), KCACHE_KEY_SIZE);
        }
        sqlite3_reset(st);
        if (src != SQLITE_DONE)
            rc = kc_sqlerr(store, src, "looking up a key");
        else if (found == 0)
            rc = kc_err(store, KCACHE_ENOTFOUND, "no entry starts with %s (see 'kcache ls')",
                        hex_prefix);
        else if (found > 1)
            rc = kc_err(store, KCACHE_EAMBIGUOUS,
                        "more than one entry starts with %s: give more digits", hex_prefix);
    }
    pthread_mutex_unlock(&store->lock);
    return rc;
}

/*
 * Walks the selected entries; the store's lock is held. *from_fn tells a
 * callback's own return value (any int, even one that looks like ours) from a
 * failure of the store, which alone may lead to recovery.
 */
static int list_locked(kcache_store *store, const kcache_filter *filter, enum kc_stmt which,
                       kcache_entry_fn fn, void *userdata, int *from_fn)
{
    *from_fn = 0;
    sqlite3_stmt *st;
    kc_flush_locked(store, 0);
    int rc = kc_db_stmt(store, &st, which);
    if (!rc) {
        if (filter->arch && *filter->arch)
            sqlite3_bind_text(st, 1, filter->arch, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, (int)filter->kind);
        sqlite3_bind_int64(st, 3, filter->accessed_before);
        sqlite3_bind_int64(st, 4, filter->created_since);
        sqlite3_bind_int64(st, 5, filter->limit ? (sqlite3_int64)filter->limit : -1);
        int src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            struct row r;
            row_from_list(&r, st);
            kcache_entry e = KCACHE_ENTRY_INIT;
            e.key = r.key;
            e.kind = (kcache_kind)r.kind;
            e.arch = r.arch;
            e.name = r.name;
            e.toolchain = r.toolchain;
            e.log = "";
            e.size = r.raw_size;
            e.stored_size = r.stored_size;
            if (r.digest)
                memcpy(e.digest, r.digest, sizeof(e.digest));
            e.created_at = r.created_at;
            e.accessed_at = r.accessed_at;
            e.hits = r.hits;
            e.compile_ns = r.compile_ns;
            if ((rc = fn(userdata, &e)) != 0) {
                *from_fn = 1;
                break;
            }
        }
        if (!rc && src != SQLITE_DONE)
            rc = kc_sqlerr(store, src, "listing entries");
        sqlite3_reset(st);
    }
    return rc;
}

KCACHE_API int kcache_store_list(kcache_store *store, const kcache_filter *filter,
                                 kcache_entry_fn fn, void *userdata)
{
    static const kcache_filter all = KCACHE_FILTER_INIT;
    static const enum kc_stmt by_sort[] = {
        [KCACHE_SORT_ACCESSED] = KC_STMT_LIST_ACCESSED,
        [KCACHE_SORT_CREATED] = KC_STMT_LIST_CREATED,
        [KCACHE_SORT_SIZE] = KC_STMT_LIST_SIZE,         [KCACHE_SORT_HITS] = KC_STMT_LIST_HITS,
        [KCACHE_SORT_LRU] = KC_STMT_LIST_LRU,
    };
    KC_CHECK_ARG(store, store && fn);
    if (!filter)
        filter = &all;
    if (filter->version < 1 || filter->version > KCACHE_FILTER_VERSION ||
        (unsigned)filter->sort >= KC_ARRAY_SIZE(by_sort))
        return kc_err(store, KCACHE_EINVAL, "kcache_store_list: bad filter");
    pthread_mutex_lock(&store->lock);
    int rc = KCACHE_EIO, from_fn = 0;
    if (store->db) {
        rc = list_locked(store, filter, by_sort[filter->sort], fn, userdata, &from_fn);
        if (rc == KCACHE_ECORRUPT && !from_fn && !store->read_only && !store->newer_schema &&
            kc_db_recover(store, store->errmsg) == 0) {
            store->pending_corrupt++;
            rc = list_locked(store, filter, by_sort[filter->sort], fn, userdata, &from_fn);
        }
    } else {
        kc_err(store, rc, "no database");
    }
    pthread_mutex_unlock(&store->lock);
    return rc;
}

struct key_list {
    kcache_key *keys;
    size_t n, cap;
};

static int collect_key(void *userdata, const kcache_entry *e)
{
    struct key_list *l = userdata;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        kcache_key *p = kc_realloc(l->keys, cap * sizeof(*p));
        if (!p)
            return KCACHE_ENOMEM;
        l->keys = p;
        l->cap = cap;
    }
    l->keys[l->n++] = e->key;
    return 0;
}

KCACHE_API int kcache_store_list_keys(kcache_store *store, const kcache_filter *filter,
                                      kcache_key **out, size_t *n)
{
    KC_CHECK_ARG(store, store && out && n);
    struct key_list l = {NULL, 0, 0};
    *out = NULL;
    *n = 0;
    int rc = kcache_store_list(store, filter, collect_key, &l);
    if (rc) {
        free(l.keys);
        if (rc == KCACHE_ENOMEM) {
            pthread_mutex_lock(&store->lock);
            kc_err(store, rc, "out of memory listing entries");
            pthread_mutex_unlock(&store->lock);
        }
        return rc;
    }
    *out = l.keys;
    *n = l.n;
    return 0;
}

KCACHE_API void kcache_keys_free(kcache_key *keys)
{
    free(keys);
}
