/* Entries handed to callers (one allocation each, built from a row), found by prefix, walked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

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

/*
 * What a hit hands out beside the artifact and that no other digest covers:
 * the lowered names (the drop-in hands them to cuModuleGetFunction: one bit
 * makes f<int>'s name f<unsigned char>'s), the log and the toolchain (what
 * the drop-in answers nvrtcVersion from). Their check is the names column's
 * tail: "KCI1" and the XXH3-128 of the three digests below. A kcache that
 * does not know it reads the names and stops there.
 */
#define INFO_MAGIC "KCI1"
#define INFO_SIZE (4 + 16)

static void info_digest(uint8_t out[16], const void *pairs, size_t pairs_n, const char *log,
                        size_t log_n, const char *toolchain, size_t toolchain_n)
{
    uint8_t three[3 * KC_DIGEST_SIZE], d[KC_DIGEST_SIZE];
    kc_stored_digest(three, pairs, pairs_n);
    kc_stored_digest(three + KC_DIGEST_SIZE, log, log_n);
    kc_stored_digest(three + 2 * KC_DIGEST_SIZE, toolchain, toolchain_n);
    kc_stored_digest(d, three, sizeof(three));
    memcpy(out, d, 16);
}

/* Name expressions are stored as u32 count, then (u32 length, bytes) pairs, then the check. */
int kc_names_encode(kc_buf *b, const kcache_entry *e)
{
    size_t start = b->size;
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
    uint8_t d[16];
    const char *log = e->log ? e->log : "", *toolchain = e->toolchain ? e->toolchain : "";
    if (!rc)
        info_digest(d, b->data + start, b->size - start, log, strlen(log), toolchain,
                    strlen(toolchain));
    if (!rc)
        rc = kc_buf_append(b, INFO_MAGIC, 4);
    return rc ? rc : kc_buf_append(b, d, sizeof(d));
}

int kc_names_check(struct kc_names *v, const void *blob, size_t size)
{
    v->p = blob;
    v->size = v->end = size;
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
    /* Nothing after the pairs (written before the check), or the check. */
    if (off != size && (size - off != INFO_SIZE || memcmp(v->p + off, INFO_MAGIC, 4) != 0))
        return KCACHE_ECORRUPT;
    v->count = n;
    v->end = off;
    return 0;
}

int kc_names_info_ok(const struct kc_names *v, const char *log, size_t log_n,
                     const char *toolchain, size_t toolchain_n)
{
    uint8_t d[16];
    if (v->end == v->size)
        return 1; /* stored before the check */
    info_digest(d, v->p, v->end, log ? log : "", log ? log_n : 0, toolchain ? toolchain : "",
                toolchain ? toolchain_n : 0);
    return !memcmp(d, v->p + v->end + 4, sizeof(d));
}

/* Lays out (or, on the second pass, fills) the entry for a row. */
static kcache_entry *layout_entry(struct layout *l, const struct kc_row *r, kc_codec_ctx *codec,
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
        *rc = kc_decode_into(codec, data, r->codec, r->stored, r->stored_n, r->raw_size);
        data[r->raw_size] = '\0';
        e->data = data;
    }
    return e;
}

int kc_entry_build(kcache_entry **out, const struct kc_row *r, kc_codec_ctx *codec)
{
    struct layout l = {NULL, 0};
    int rc = 0;
    /* The size a damaged row claims is not allocated (util/codec.c). */
    if (r->stored && !kc_decode_plausible(r->codec, r->stored, r->stored_n, r->raw_size))
        return KCACHE_ECORRUPT;
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

size_t kc_col_text(sqlite3_stmt *st, int col, const char **out)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    *out = t ? (const char *)t : "";
    return t ? (size_t)sqlite3_column_bytes(st, col) : 0;
}

void kc_row_columns_7_12(struct kc_row *r, sqlite3_stmt *st)
{
    r->digest = sqlite3_column_bytes(st, 7) == KC_DIGEST_SIZE ? sqlite3_column_blob(st, 7) : NULL;
    r->created_at = sqlite3_column_int64(st, 8);
    r->accessed_at = sqlite3_column_int64(st, 9);
    r->hits = (uint64_t)sqlite3_column_int64(st, 10);
    r->compile_ns = (uint64_t)sqlite3_column_int64(st, 11);
    r->toolchain_n = kc_col_text(st, 12, &r->toolchain);
}

/* Reads the metadata columns shared by get and list (list's column order). */
void kc_row_from_list(struct kc_row *r, sqlite3_stmt *st)
{
    memset(r, 0, sizeof(*r));
    const void *key = sqlite3_column_blob(st, 1);
    if (key && sqlite3_column_bytes(st, 1) == KCACHE_KEY_SIZE)
        memcpy(r->key.bytes, key, KCACHE_KEY_SIZE);
    r->kind = sqlite3_column_int(st, 2);
    r->arch_n = kc_col_text(st, 3, &r->arch);
    r->name_n = kc_col_text(st, 4, &r->name);
    r->raw_size = (size_t)sqlite3_column_int64(st, 5);
    r->stored_size = (uint64_t)sqlite3_column_int64(st, 6);
    kc_row_columns_7_12(r, st);
    r->log = "";
}

/* Finding a key by prefix, and walking entries. */
KCACHE_API int kcache_store_find(kcache_key *out, kcache_store *store, const char *hex_prefix)
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
    int rc = store->db.conn ? kc_db_stmt(&store->db, &st, KC_STMT_FIND_PREFIX)
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
            rc = kc_sqlerr(&store->db, src, "looking up a key");
        else if (found == 0)
            rc = kc_err(store, KCACHE_ENOTFOUND, "no entry starts with %s (see 'kcache ls')",
                        hex_prefix);
        else if (found > 1)
            rc = kc_err(store, KCACHE_EAMBIGUOUS,
                        "more than one entry starts with %s: give more digits", hex_prefix);
    }
    kc_unlock(store);
    return rc;
}

/*
 * The selected entries' metadata, read under the store's lock into a list of
 * their own, so that the caller's function runs with no lock held (it may
 * call the store: a callback under a non-recursive lock would deadlock).
 */
struct entry_list {
    kcache_entry **v;
    size_t n, cap;
};

static void entry_list_free(struct entry_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        kcache_entry_free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static int list_locked(kcache_store *store, const kcache_filter *filter, enum kc_stmt which,
                       struct entry_list *out)
{
    sqlite3_stmt *st;
    kc_flush_locked(store, 0);
    int rc = kc_db_stmt(&store->db, &st, which);
    if (!rc) {
        if (filter->arch && *filter->arch)
            sqlite3_bind_text(st, 1, filter->arch, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, (int)filter->kind);
        sqlite3_bind_int64(st, 3, filter->accessed_before);
        sqlite3_bind_int64(st, 4, filter->created_since);
        sqlite3_bind_int64(st, 5, filter->limit ? (sqlite3_int64)filter->limit : -1);
        int src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            struct kc_row r;
            kc_row_from_list(&r, st);
            kcache_entry **grown = kc_grow(out->v, &out->cap, out->n, sizeof(*grown), 64);
            if (!grown) {
                rc = kc_err(store, KCACHE_ENOMEM, "out of memory listing entries");
                break;
            }
            out->v = grown;
            /* Metadata only (no artifact in the row): nothing to decode, nothing damaged. */
            if ((rc = kc_entry_build(&out->v[out->n], &r, store->codec))) {
                kc_err(store, rc, "out of memory listing entries");
                break;
            }
            out->n++;
        }
        if (!rc && src != SQLITE_DONE)
            rc = kc_sqlerr(&store->db, src, "listing entries");
        sqlite3_reset(st);
    }
    if (rc)
        entry_list_free(out);
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
    if (kc_check_version(store, filter, "kcache_filter", KCACHE_FILTER_VERSION))
        return KCACHE_EINVAL;
    if ((unsigned)filter->sort >= KC_ARRAY_SIZE(by_sort))
        return kc_err_locking(store, KCACHE_EINVAL, "kcache_store_list: sort %d is not a kcache_sort",
                              (int)filter->sort);
    struct entry_list l = {NULL, 0, 0};
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, list_locked(store, filter, by_sort[filter->sort], &l));
    kc_unlock(store);
    for (size_t i = 0; !rc && i < l.n; i++)
        rc = fn(userdata, l.v[i]);
    entry_list_free(&l);
    return rc;
}

struct key_list {
    kcache_key *keys;
    size_t n, cap;
};

static int collect_key(void *userdata, const kcache_entry *e)
{
    struct key_list *l = userdata;
    kcache_key *grown = kc_grow(l->keys, &l->cap, l->n, sizeof(*grown), 256);
    if (!grown)
        return KCACHE_ENOMEM;
    l->keys = grown;
    l->keys[l->n++] = e->key;
    return 0;
}

KCACHE_API int kcache_store_list_keys(kcache_key **out, size_t *n,
                                      kcache_store *store, const kcache_filter *filter)
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
            kc_unlock(store);
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
