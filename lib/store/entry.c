/* Entries handed to callers: one allocation each, built from a row. */
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

/* Name expressions are stored as u32 count, then (u32 length, bytes) pairs. */
int kc_names_encode(kc_buf *b, const kcache_entry *e)
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


int kc_names_check(struct kc_names *v, const void *blob, size_t size)
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
    r->digest = sqlite3_column_bytes(st, 7) == KC_DIGEST_SIZE ? sqlite3_column_blob(st, 7) : NULL;
    r->created_at = sqlite3_column_int64(st, 8);
    r->accessed_at = sqlite3_column_int64(st, 9);
    r->hits = (uint64_t)sqlite3_column_int64(st, 10);
    r->compile_ns = (uint64_t)sqlite3_column_int64(st, 11);
    r->toolchain_n = kc_col_text(st, 12, &r->toolchain);
    r->log = "";
}
