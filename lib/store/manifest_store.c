/*
 * Closures (manifests) in the database, and the counters of compiles served
 * without the cache. A closure only saves work: every failure here is
 * returned for the caller to ignore, never turned into a failed compile.
 */
#include <assert.h>
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

/*
 * Whether a chunk decoded to the bytes it is stored by (its digest): a
 * damaged closure may name other paths than the compile looked at, so that
 * it holds where the one recorded would not (a stale kernel, not a miss). A
 * hashed LZ4 block (what chunks are written as) or a zstd frame with a
 * checksum (written before) was checked by its decode (checked: nothing
 * more to do); an LZ4 block or raw bytes carry none. The digest (BLAKE2b) costs 30-45 times the fast one (xxh3, 192 KiB),
 * so a chunk that held is remembered on the handle by it, with the fast
 * digest of its bytes: read again, the same bytes cost only the fast one.
 */
#define CHUNKS_CHECKED 1024

static int chunk_holds(kcache_store *s, int checked, const void *digest, const void *data,
                       size_t size)
{
    if (checked)
        return 0;
    uint8_t fast[KC_DIGEST_SIZE], d[KC_DIGEST_SIZE];
    kc_stored_digest(fast, data, size);
    if (!s->chunks_checked &&
        !(s->chunks_checked = kc_calloc(CHUNKS_CHECKED, sizeof(*s->chunks_checked))))
        return KCACHE_ENOMEM;
    uint8_t(*slot)[KC_DIGEST_SIZE] =
        s->chunks_checked[(((const uint8_t *)digest)[0] | ((const uint8_t *)digest)[1] << 8) %
                          CHUNKS_CHECKED];
    if (!memcmp(slot[0], digest, KC_DIGEST_SIZE) && !memcmp(slot[1], fast, KC_DIGEST_SIZE))
        return 0;
    kc_digest(d, data, size);
    if (memcmp(d, digest, KC_DIGEST_SIZE) != 0)
        return KCACHE_ECORRUPT;
    memcpy(slot[0], d, KC_DIGEST_SIZE);
    memcpy(slot[1], fast, KC_DIGEST_SIZE);
    return 0;
}

/* A closure stored whole (before schema 9), decoded: chunk_holds() by the closure's digest. */
static int whole_holds(kcache_store *s, int64_t id, const void *data, size_t size)
{
    sqlite3_stmt *q;
    int rc = kc_db_stmt(&s->db, &q, KC_STMT_CLOSURE_DIGEST);
    if (rc)
        return rc;
    sqlite3_bind_int64(q, 1, id);
    int src = sqlite3_step(q);
    if (src == SQLITE_ROW && sqlite3_column_bytes(q, 0) == KC_DIGEST_SIZE)
        rc = chunk_holds(s, 0, sqlite3_column_blob(q, 0), data, size);
    else
        rc = src == SQLITE_ROW || src == SQLITE_DONE
                 ? KCACHE_ECORRUPT
                 : kc_sqlerr(&s->db, src, "reading include closures");
    sqlite3_reset(q);
    return rc;
}

/* A closure stored in parts (schema/009_closure_chunks.sql): its chunks decoded in order into
 * out, which holds exactly size bytes, each checked against its digest. 0, or KCACHE_ECORRUPT
 * where they do not add up. */
static int closure_parts(kcache_store *s, void *out, size_t size, int64_t id, int64_t parts)
{
    sqlite3_stmt *q;
    int rc = kc_db_stmt(&s->db, &q, KC_STMT_CLOSURE_PARTS);
    if (rc)
        return rc;
    sqlite3_bind_int64(q, 1, id);
    size_t at = 0;
    int64_t n = 0;
    int src = SQLITE_DONE;
    while (!rc && (src = sqlite3_step(q)) == SQLITE_ROW) {
        int codec = sqlite3_column_int(q, 0);
        sqlite3_int64 len = sqlite3_column_int64(q, 1);
        const void *blob = sqlite3_column_blob(q, 2);
        int stored = sqlite3_column_bytes(q, 2);
        const void *digest = sqlite3_column_blob(q, 3);
        if (len <= 0 || (uint64_t)len > size - at || (!blob && stored) || !digest ||
            sqlite3_column_bytes(q, 3) != KC_DIGEST_SIZE)
            rc = KCACHE_ECORRUPT;
        else
            rc = kc_decode_into(s->codec, (uint8_t *)out + at, codec, blob, (size_t)stored,
                                (size_t)len);
        if (!rc)
            rc = chunk_holds(s, kc_stored_checks_itself(codec, blob, (size_t)stored), digest,
                             (uint8_t *)out + at, (size_t)len);
        at += rc ? 0 : (size_t)len;
        n++;
    }
    if (!rc && src != SQLITE_DONE)
        rc = kc_sqlerr(&s->db, src, "reading include closures");
    sqlite3_reset(q);
    if (!rc && (at != size || n != parts))
        rc = KCACHE_ECORRUPT;
    return rc;
}

int kc_closure_decode(kcache_store *s, void **out, sqlite3_stmt *q, int codec_col, int col,
                      size_t raw_size)
{
    int codec = sqlite3_column_int(q, codec_col);
    const void *blob = sqlite3_column_blob(q, col);
    int size = sqlite3_column_bytes(q, col);
    if (sqlite3_column_type(q, col + 2) == SQLITE_NULL) {
        if (!blob || size <= 0)
            return KCACHE_ECORRUPT;
        int rc = kc_decode(s->codec, out, codec, blob, (size_t)size, raw_size);
        if (!rc)
            rc = whole_holds(s, sqlite3_column_int64(q, col + 1), *out, raw_size);
        if (rc) {
            free(*out);
            *out = NULL;
        }
        return rc;
    }
    int64_t parts = sqlite3_column_int64(q, col + 2);
    if (size != 0 || parts <= 0 || (uint64_t)parts > raw_size)
        return KCACHE_ECORRUPT;
    if (!(*out = kc_malloc(raw_size)))
        return KCACHE_ENOMEM;
    int rc = closure_parts(s, *out, raw_size, sqlite3_column_int64(q, col + 1), parts);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/*
 * One closure of a KC_STMT_MANIFEST_GET row into *out, decoded, or as this
 * handle decoded the same bytes before (shared.c: CuPy's kernels share a
 * few closures): KCACHE_ECORRUPT where it cannot be (a damaged closure is
 * no closure: the long way finds the key).
 */
static int closure_row(kcache_store *s, void **out, sqlite3_stmt *q, size_t raw_size)
{
    /* Columns: key, recorded_at, codec, raw_size, data, id, parts, digest. */
    assert(sqlite3_column_count(q) == 8);
    const uint8_t *digest = sqlite3_column_blob(q, 7);
    if (sqlite3_column_bytes(q, 7) != KC_DIGEST_SIZE)
        digest = NULL;
    const uint8_t *known = digest ? kc_decoded_find(s, digest, raw_size) : NULL;
    if (known)
        return (*out = kc_memdup(known, raw_size)) ? 0 : KCACHE_ENOMEM;
    int rc = kc_closure_decode(s, out, q, 2, 4, raw_size);
    if (!rc && digest)
        kc_decoded_keep(s, digest, *out, raw_size, 0);
    return rc;
}

static int manifest_get_locked(kc_manifest_row **out, size_t *n, kcache_store *s,
                               const kcache_key *base)
{
    sqlite3_stmt *q;
    int rc = kc_db_stmt(&s->db, &q,
                        s->db.schema_version >= 9 ? KC_STMT_MANIFEST_GET : KC_STMT_MANIFEST_GET_V8);
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
        sqlite3_int64 raw_size = sqlite3_column_int64(q, 3);
        if (!key || sqlite3_column_bytes(q, 0) != KCACHE_KEY_SIZE || raw_size <= 0 ||
            raw_size > (64 << 20))
            continue;
        memcpy(rows[k].key.bytes, key, KCACHE_KEY_SIZE);
        int drc = closure_row(s, &rows[k].closure, q, (size_t)raw_size);
        if (drc == KCACHE_ENOMEM) {
            rc = kc_err(s, KCACHE_ENOMEM, "out of memory");
            break;
        }
        if (drc)
            continue; /* a damaged closure is no closure: the long way finds the key */
        rows[k].recorded_at = sqlite3_column_int64(q, 1);
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

/* Runs a statement of three integers to its end. */
static int step_ints(kcache_store *s, enum kc_stmt which, int64_t a, int64_t b, int64_t c,
                     const char *what)
{
    sqlite3_stmt *q;
    int rc = kc_db_stmt(&s->db, &q, which);
    if (rc)
        return rc;
    sqlite3_bind_int64(q, 1, a);
    sqlite3_bind_int64(q, 2, b);
    sqlite3_bind_int64(q, 3, c);
    int src = sqlite3_step(q);
    sqlite3_reset(q);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, what);
}

/*
 * The id of the closure with these bytes, stored now if it was not: in
 * chunks (kc_chunk_size()), each stored once by its digest as a hashed LZ4
 * block (KC_CODEC_LZ4C: its hash is the chunk's check on every read,
 * chunk_holds(); zstd's decode cost four times LZ4's on closures).
 */
static int closure_id(int64_t *id, kcache_store *s, const void *closure, size_t size)
{
    static const char *const storing = "storing an include closure";
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, closure, size);
    int rc = kc_id_by_digest(id, s, KC_STMT_CLOSURE_FIND, digest, "finding an include closure");
    if (rc)
        return rc > 0 ? 0 : rc;
    int64_t parts = 0;
    for (size_t at = 0; at < size; parts++)
        at += kc_chunk_size((const uint8_t *)closure + at, size - at);
    sqlite3_stmt *q;
    if ((rc = kc_db_stmt(&s->db, &q, KC_STMT_CLOSURE_PUT_PARTS)))
        return rc;
    sqlite3_bind_blob(q, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)size);
    sqlite3_bind_int64(q, 3, parts);
    int src = sqlite3_step(q);
    sqlite3_reset(q);
    if (src != SQLITE_DONE)
        return kc_sqlerr(&s->db, src, storing);
    *id = sqlite3_last_insert_rowid(s->db.conn);
    size_t at = 0;
    for (int64_t seq = 0; !rc && seq < parts; seq++) {
        size_t len = kc_chunk_size((const uint8_t *)closure + at, size - at);
        int64_t chunk = 0;
        rc = kc_blob_id_checked(&chunk, s, KC_STMT_CHUNK_FIND, KC_STMT_CHUNK_PUT, &s->scratch,
                                (const uint8_t *)closure + at, len, "finding an include closure",
                                storing);
        if (!rc)
            rc = step_ints(s, KC_STMT_CLOSURE_PART_PUT, *id, seq, chunk, storing);
        at += len;
    }
    return rc;
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
                               int64_t recorded_at, int64_t created_at, const void *closure,
                               size_t size)
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
        sqlite3_bind_int64(q, 5, created_at);
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

static int manifest_put(kcache_store *s, const kcache_key *base, const kcache_key *key,
                        int64_t recorded_at, int64_t created_at, const void *closure, size_t size)
{
    pthread_mutex_lock(&s->lock);
    int rc = s->db.conn
                 ? manifest_put_locked(s, base, key, recorded_at, created_at, closure, size)
                 : KCACHE_EIO;
    kc_unlock(s);
    return rc;
}

int kc_store_manifest_put(kcache_store *s, const kcache_key *base, const kcache_key *key,
                          int64_t recorded_at, const void *closure, size_t size)
{
    return manifest_put(s, base, key, recorded_at, kc_now_ms(), closure, size);
}

int kc_store_manifest_put_carried(kcache_store *s, const kcache_key *base, const kcache_key *key,
                                  int64_t recorded_at, const void *closure, size_t size)
{
    /* Made at time 0: read after every closure made here (KC_STMT_MANIFEST_GET's order). */
    return manifest_put(s, base, key, recorded_at, 0, closure, size);
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
