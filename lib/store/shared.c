/*
 * What entries share, stored once by digest: inputs, include closures
 * (kc_blob_id), and the lists of schema/008_shared_lists.sql. A put stores
 * the run of header records of an entry's key material and the run of its
 * header inputs once, by their digests; a get puts them back, so that
 * everything above the store (hits, bundles, the shared tier, verify,
 * explain) sees each entry's whole key material and every input as put.
 * A list goes with the last entry that refers to it (prune.c).
 */
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"
#include "format/keyfmt.h"


int kc_id_by_digest(int64_t *id, kcache_store *s, enum kc_stmt find,
                    const uint8_t digest[KC_DIGEST_SIZE], const char *finding)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st, find);
    if (rc)
        return rc;
    sqlite3_bind_blob(st, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (src == SQLITE_ROW)
        return 1;
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, finding);
}

static int blob_id(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put, kc_buf *enc,
                   int method, const uint8_t digest[KC_DIGEST_SIZE], const void *data,
                   size_t size, const char *finding, const char *storing)
{
    int rc = kc_id_by_digest(id, s, find, digest, finding);
    if (rc)
        return rc > 0 ? 0 : rc;
    /* Compressed only when new. */
    int codec;
    sqlite3_stmt *st;
    if ((rc = kc_encode(s->codec, enc, &codec, method, data, size)))
        return kc_err(s, rc, "out of memory");
    if ((rc = kc_db_stmt(&s->db, &st, put)))
        return rc;
    sqlite3_bind_blob(st, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)size);
    sqlite3_bind_int(st, 3, codec);
    sqlite3_bind_blob64(st, 4, enc->data ? (const void *)enc->data : "", enc->size, SQLITE_STATIC);
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    if (src != SQLITE_DONE)
        return kc_sqlerr(&s->db, src, storing);
    *id = sqlite3_last_insert_rowid(s->db.conn);
    return 0;
}

int kc_blob_id_of(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put, kc_buf *enc,
                  const uint8_t digest[KC_DIGEST_SIZE], const void *data, size_t size,
                  const char *finding, const char *storing)
{
    return blob_id(id, s, find, put, enc, s->compression, digest, data, size, finding, storing);
}

int kc_blob_id(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put, kc_buf *enc,
               const void *data, size_t size, const char *finding, const char *storing)
{
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, data, size);
    return blob_id(id, s, find, put, enc, s->compression, digest, data, size, finding, storing);
}

int kc_blob_id_checked(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put,
                       kc_buf *enc, const void *data, size_t size, const char *finding,
                       const char *storing)
{
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, data, size);
    return blob_id(id, s, find, put, enc, KC_CODEC_LZ4C, digest, data, size, finding, storing);
}

int kc_shared_headers_put(kcache_store *s, const kcache_entry *e, int64_t *id, size_t *at,
                          size_t *len)
{
    *id = 0;
    *at = *len = 0;
    if (!e->key_material_size ||
        kc_key_header_run(e->key_material, e->key_material_size, at, len) != 1)
        return 0; /* nothing to share, or not kcache's format: stored whole */
    /* Not s->scratch: that holds the entry's own encoded bytes during a put. */
    kc_buf enc = {0};
    int rc = kc_blob_id(id, s, KC_STMT_HEADERS_FIND, KC_STMT_HEADERS_PUT, &enc,
                        (const uint8_t *)e->key_material + *at, *len, "finding a header list",
                        "storing a header list");
    kc_buf_free(&enc);
    return rc;
}

/* The first run of header inputs of e: [*at, *at + *n). */
static void input_run(const kcache_entry *e, size_t *at, size_t *n)
{
    size_t i = 0;
    while (i < e->n_inputs && e->inputs[i].role != KCACHE_INPUT_HEADER)
        i++;
    *at = i;
    while (i < e->n_inputs && e->inputs[i].role == KCACHE_INPUT_HEADER)
        i++;
    *n = i - *at;
}

static int put_list(kcache_store *s, int64_t *id, const kcache_entry *e, size_t at, size_t n,
                    const uint8_t *digests, const uint8_t list_digest[KC_DIGEST_SIZE])
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st, KC_STMT_INPUTS_PUT);
    if (rc)
        return rc;
    sqlite3_bind_blob(st, 1, list_digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)n);
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    if (src != SQLITE_DONE)
        return kc_sqlerr(&s->db, src, "storing an input list");
    *id = sqlite3_last_insert_rowid(s->db.conn);
    kc_buf enc = {0};
    for (size_t i = 0; i < n && !rc; i++) {
        const kcache_input *in = &e->inputs[at + i];
        int64_t input_id;
        if ((rc = kc_blob_id_of(&input_id, s, KC_STMT_FIND_INPUT, KC_STMT_INSERT_INPUT, &enc,
                                digests + i * KC_DIGEST_SIZE, in->data, in->size, "storing inputs",
                                "storing inputs")) ||
            (rc = kc_db_stmt(&s->db, &st, KC_STMT_INPUTS_PUT_ITEM)))
            break;
        sqlite3_bind_int64(st, 1, *id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)i);
        sqlite3_bind_int(st, 3, in->role);
        sqlite3_bind_text(st, 4, in->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, input_id);
        src = sqlite3_step(st);
        sqlite3_reset(st);
        if (src != SQLITE_DONE)
            rc = kc_sqlerr(&s->db, src, "storing an input list");
    }
    kc_buf_free(&enc);
    return rc;
}

int kc_shared_inputs_put(kcache_store *s, const kcache_entry *e, int64_t *id, size_t *at, size_t *n)
{
    *id = 0;
    input_run(e, at, n);
    if (!*n)
        return 0;
    uint8_t *digests = kc_malloc(*n * KC_DIGEST_SIZE), list_digest[KC_DIGEST_SIZE];
    kc_buf rec = {0};
    int rc = digests ? 0 : KCACHE_ENOMEM;
    for (size_t i = 0; i < *n && !rc; i++) {
        const kcache_input *in = &e->inputs[*at + i];
        kc_digest(digests + i * KC_DIGEST_SIZE, in->data, in->size);
        rc = kc_share_input_record(&rec, in->role, in->name, strlen(in->name),
                                   digests + i * KC_DIGEST_SIZE);
    }
    if (rc) {
        rc = kc_err(s, rc, rc == KCACHE_ENOMEM ? "out of memory" : "an input's name is too long");
        goto out;
    }
    kc_digest(list_digest, rec.data, rec.size);
    rc = kc_id_by_digest(id, s, KC_STMT_INPUTS_FIND, list_digest, "finding an input list");
    if (rc == 0)
        rc = put_list(s, id, e, *at, *n, digests, list_digest);
    else if (rc > 0)
        rc = 0;
out:
    free(digests);
    kc_buf_free(&rec);
    return rc;
}

int kc_shared_material(kcache_store *s, struct kc_row *r, sqlite3_stmt *st, int check)
{
    if (sqlite3_column_type(st, 19) == SQLITE_NULL)
        return 0; /* nothing shared: the row's material is whole */
    int64_t at = sqlite3_column_int64(st, 20), size = sqlite3_column_int64(st, 21);
    int list_codec = sqlite3_column_int(st, 22);
    const void *stored = sqlite3_column_blob(st, 23);
    size_t stored_n = (size_t)sqlite3_column_bytes(st, 23);
    const uint8_t *digest = sqlite3_column_blob(st, 24);
    /* A list that is gone, or a row that does not fit it: damage. */
    if (sqlite3_column_type(st, 21) == SQLITE_NULL || at < 0 ||
        (uint64_t)at > r->key_material_size || size <= 0 ||
        sqlite3_column_bytes(st, 24) != KC_DIGEST_SIZE || !stored)
        return KCACHE_ECORRUPT;
    if (!kc_codec_known(list_codec))
        return KCACHE_ENOTSUP;
    if (!kc_decode_plausible(list_codec, stored, stored_n, (size_t)size))
        return KCACHE_ECORRUPT;
    size_t total = r->key_material_size + (size_t)size;
    uint8_t *m = kc_malloc(total + 1);
    if (!m)
        return KCACHE_ENOMEM;
    /* Read whole (verify, export), the row itself is checked: no memo. */
    const uint8_t *known = check ? NULL : kc_decoded_find(s, digest, (size_t)size);
    if (known) {
        memcpy(m + at, known, (size_t)size);
    } else {
        int rc = kc_decode_into(s->codec, m + at, list_codec, stored, stored_n, (size_t)size);
        if (rc) {
            free(m);
            return rc == KCACHE_ENOMEM ? rc : KCACHE_ECORRUPT;
        }
        /*
         * Checked whole where it is asked for (verify, export, a recompile):
         * a hit needs only the artifact, which has its own check, and zstd's
         * frame checksum already guards the list in most rows.
         */
        uint8_t d[KC_DIGEST_SIZE];
        if (check) {
            kc_digest(d, m + at, (size_t)size);
            if (memcmp(d, digest, KC_DIGEST_SIZE) != 0) {
                free(m);
                return KCACHE_ECORRUPT;
            }
        }
        kc_decoded_keep(s, digest, m + at, (size_t)size, check);
    }
    memcpy(m, r->key_material, (size_t)at);
    memcpy(m + at + size, (const uint8_t *)r->key_material + at, r->key_material_size - (size_t)at);
    r->material = m;
    r->key_material = m;
    r->key_material_size = total;
    return 0;
}

const uint8_t *kc_decoded_find(kcache_store *s, const uint8_t digest[KC_DIGEST_SIZE], size_t size)
{
    for (size_t i = 0; i < KC_DECODED_MAX; i++) {
        struct kc_decoded *d = &s->decoded[i];
        if (!d->data || d->size != size || memcmp(d->digest, digest, KC_DIGEST_SIZE) != 0)
            continue;
        if (!d->checked) {
            uint8_t now[KC_DIGEST_SIZE];
            kc_digest(now, d->data, d->size);
            if (memcmp(now, digest, KC_DIGEST_SIZE) != 0)
                return NULL; /* the row that gave it was damaged: decoded again, as it comes */
            d->checked = 1;
        }
        d->used = ++s->decoded_tick;
        return d->data;
    }
    return NULL;
}

static void decoded_drop(kcache_store *s, struct kc_decoded *d)
{
    s->decoded_bytes -= d->size;
    free(d->data);
    memset(d, 0, sizeof(*d));
}

void kc_decoded_keep(kcache_store *s, const uint8_t digest[KC_DIGEST_SIZE], const void *data,
                     size_t size, int checked)
{
    if (size > KC_DECODED_BYTES / 4)
        return;
    uint64_t prefix;
    memcpy(&prefix, digest, sizeof(prefix));
    size_t n = KC_MIN(s->n_decoded_seen, (size_t)KC_DECODED_MAX), seen = 0;
    while (seen < n && s->decoded_seen[seen] != prefix)
        seen++;
    if (seen == n) {
        s->decoded_seen[s->n_decoded_seen++ % KC_DECODED_MAX] = prefix;
        return; /* the first decode of these bytes: kept when they come again */
    }
    /* The least recently read go first, until the copy fits in a free slot. */
    for (;;) {
        struct kc_decoded *free_slot = NULL, *oldest = NULL;
        for (size_t i = 0; i < KC_DECODED_MAX; i++) {
            struct kc_decoded *d = &s->decoded[i];
            if (!d->data)
                free_slot = free_slot ? free_slot : d;
            else if (!oldest || d->used < oldest->used)
                oldest = d;
        }
        if (free_slot && s->decoded_bytes + size <= KC_DECODED_BYTES) {
            if (!(free_slot->data = (uint8_t *)kc_memdup(data, size)))
                return;
            memcpy(free_slot->digest, digest, KC_DIGEST_SIZE);
            free_slot->size = size;
            free_slot->used = ++s->decoded_tick;
            free_slot->checked = checked;
            s->decoded_bytes += size;
            return;
        }
        decoded_drop(s, oldest);
    }
}

void kc_decoded_free(kcache_store *s)
{
    for (size_t i = 0; i < KC_DECODED_MAX; i++)
        if (s->decoded[i].data)
            decoded_drop(s, &s->decoded[i]);
}

int kc_shared_sweep(kcache_store *s)
{
    pthread_mutex_lock(&s->lock);
    int rc = s->db.conn ? kc_db_writable(&s->db) : KCACHE_EIO;
    if (!rc)
        rc = kc_db_write_sql(
            &s->db,
            "DELETE FROM input_list WHERE id NOT IN"
            " (SELECT inputs_id FROM entry_info WHERE inputs_id NOT NULL);"
            "DELETE FROM input_list_item WHERE list_id NOT IN (SELECT id FROM input_list);"
            "DELETE FROM header_list WHERE id NOT IN"
            " (SELECT headers_id FROM entry_info WHERE headers_id NOT NULL);"
            "DELETE FROM input WHERE id NOT IN (SELECT input_id FROM entry_input)"
            " AND id NOT IN (SELECT input_id FROM input_list_item)",
            "dropping shared rows no entry refers to");
    kc_unlock(s);
    return rc == KCACHE_EREADONLY || rc == KCACHE_EVERSION || rc == KCACHE_EIO ? 0 : rc;
}
