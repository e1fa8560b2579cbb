/*
 * Re-encoding stored artifacts to the compression setting of now.
 *
 * Each row records its codec, so a store holds a mix and nothing ever has to
 * be rewritten; this is for a user who changed the setting and wants the
 * space (or the read speed) of the new one for what is already stored.
 *
 * A batch is one write transaction, chosen by id after the last one done:
 * killed at any moment, each entry is whole in one codec or the other (the
 * rollback keeps the old), and the next run picks up what is left. Every
 * artifact is decoded and checked against its digest before re-encoding, so
 * a damaged one is never given a fresh stored digest that would make it look
 * sound; it is left for get and verify, which delete it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

/* Entries per transaction at most; fewer when they take longer than KC_HOLD_NS. */
#define KC_RECOMPRESS_BATCH 64

/*
 * Rows whose codec is not the setting's. Raw rows too small to compress are
 * left out: they stay raw whatever the setting (util/codec.h).
 */
#define KC_TO_RECOMPRESS                                                                           \
    " FROM entry e WHERE e.codec != ?1 AND NOT (e.codec = 0 AND ?1 != 0 AND e.raw_size < ?2)"

static const char *usage_name(int codec)
{
    if (codec == KC_CODEC_RAW)
        return "none";
    if (!kc_codec_known(codec))
        return "unknown";
    return kc_compression_name(codec);
}

static int usage_slot(int codec)
{
    if (codec == KC_CODEC_LZ4B) /* the public counts have one lz4, whether frame or block */
        return KC_CODEC_LZ4;
    return codec == KC_CODEC_RAW || codec == KC_CODEC_ZSTD || codec == KC_CODEC_LZ4 ? codec : 3;
}

/* Per-codec counts, and how many rows are to be re-encoded. */
static int survey(kcache_store *s, kcache_recompress_result *r, int target)
{
    static const char *const names[4] = {"none", "zstd", "lz4", "unknown"};
    sqlite3_stmt *st = NULL;
    for (int i = 0; i < 4; i++)
        snprintf(r->before[i].codec, sizeof(r->before[i].codec), "%s", names[i]);
    int src = sqlite3_prepare_v2(s->db.conn,
                                 "SELECT codec, count(*), total(raw_size), total(stored_size)"
                                 " FROM entry GROUP BY codec", -1, &st, NULL);
    while (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        src = SQLITE_OK;
        kcache_codec_usage *u = &r->before[usage_slot(sqlite3_column_int(st, 0))];
        u->entries += (uint64_t)sqlite3_column_int64(st, 1);
        u->raw_bytes += (uint64_t)sqlite3_column_double(st, 2);
        u->stored_bytes += (uint64_t)sqlite3_column_double(st, 3);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (src == SQLITE_DONE || src == SQLITE_OK)
        src = sqlite3_prepare_v2(s->db.conn, "SELECT count(*)" KC_TO_RECOMPRESS, -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int(st, 1, target);
        sqlite3_bind_int(st, 2, KC_RAW_BELOW);
        if ((src = sqlite3_step(st)) == SQLITE_ROW)
            r->to_recompress = (uint64_t)sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return src == SQLITE_ROW || src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "counting codecs");
}

/* The new bytes of one row, and the totals, in the caller's transaction. */
static int write_row(kcache_store *s, int64_t id, int codec, const kc_buf *enc,
                     const uint8_t digest[KC_DIGEST_SIZE], int64_t old_size)
{
    static const char *const sql[] = {
        "UPDATE artifact SET data = ?2, stored_digest = ?3 WHERE id = ?1",
        "UPDATE entry SET codec = ?4, stored_size = ?5 WHERE id = ?1",
        /* The totals: puts and deletes keep them (cascade.c), a re-encode here. */
        "UPDATE totals SET stored_bytes = stored_bytes + ?6",
    };
    int rc = 0;
    for (size_t i = 0; !rc && i < KC_ARRAY_SIZE(sql); i++) {
        sqlite3_stmt *st = NULL;
        int src = sqlite3_prepare_v2(s->db.conn, sql[i], -1, &st, NULL);
        if (src == SQLITE_OK) {
            int n = sqlite3_bind_parameter_count(st);
            for (int k = 1; k <= n; k++) {
                const char *name = sqlite3_bind_parameter_name(st, k);
                int which = name ? atoi(name + 1) : 0;
                if (which == 1)
                    sqlite3_bind_int64(st, k, id);
                else if (which == 2)
                    sqlite3_bind_blob(st, k, enc->size ? enc->data : (const void *)"",
                                      (int)enc->size, SQLITE_STATIC);
                else if (which == 3)
                    sqlite3_bind_blob(st, k, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
                else if (which == 4)
                    sqlite3_bind_int(st, k, codec);
                else if (which == 5)
                    sqlite3_bind_int64(st, k, (sqlite3_int64)enc->size);
                else if (which == 6)
                    sqlite3_bind_int64(st, k, (sqlite3_int64)enc->size - old_size);
            }
            src = sqlite3_step(st);
        }
        if (src != SQLITE_DONE)
            rc = kc_sqlerr(&s->db, src, "re-encoding an entry");
        sqlite3_finalize(st);
    }
    return rc;
}

/*
 * One row: checked, decoded, re-encoded and written in the caller's
 * transaction, or counted as kept or skipped.
 */
static int recompress_row(kcache_store *s, sqlite3_stmt *q, int target, kc_buf *enc,
                          kcache_recompress_result *r)
{
    int64_t id = sqlite3_column_int64(q, 0);
    int codec = sqlite3_column_int(q, 1);
    int64_t raw_size = sqlite3_column_int64(q, 2);
    int64_t stored_size = sqlite3_column_int64(q, 3);
    const void *digest = sqlite3_column_blob(q, 4);
    int digest_n = sqlite3_column_bytes(q, 4);
    const void *stored_digest = sqlite3_column_blob(q, 5);
    int stored_digest_n = sqlite3_column_bytes(q, 5);
    const void *stored = sqlite3_column_blob(q, 6);
    size_t stored_n = (size_t)sqlite3_column_bytes(q, 6);
    if (!stored && stored_n == 0)
        stored = "";
    uint8_t check[KC_DIGEST_SIZE];
    if (!kc_codec_known(codec) || raw_size < 0 || (int64_t)stored_n != stored_size ||
        digest_n != KC_DIGEST_SIZE || stored_digest_n != KC_DIGEST_SIZE ||
        !kc_stored_digest_ok(stored_digest, stored, stored_n) ||
        !kc_decode_plausible(codec, stored, stored_n, (size_t)raw_size)) {
        r->skipped++;
        return 0;
    }
    void *raw = NULL;
    int rc = kc_decode(s->codec, &raw, codec, stored, stored_n, (size_t)raw_size);
    if (rc == KCACHE_ECORRUPT) {
        r->skipped++;
        return 0;
    }
    if (rc)
        return kc_err(s, rc, "out of memory decoding an entry");
    kc_digest(check, raw, (size_t)raw_size);
    if (memcmp(check, digest, KC_DIGEST_SIZE) != 0) {
        free(raw);
        r->skipped++;
        return 0;
    }
    int new_codec;
    rc = kc_encode(s->codec, enc, &new_codec, target, raw, (size_t)raw_size);
    free(raw);
    if (rc)
        return kc_err(s, rc, "out of memory encoding an entry");
    if (new_codec == codec) {
        r->kept++;
        return 0;
    }
    uint8_t new_digest[KC_DIGEST_SIZE];
    kc_stored_digest(new_digest, enc->data ? enc->data : (const void *)"", enc->size);
    if ((rc = write_row(s, id, new_codec, enc, new_digest, stored_size)))
        return rc;
    r->recompressed++;
    r->stored_before += (uint64_t)stored_size;
    r->stored_after += enc->size;
    return 0;
}

/*
 * One batch after id *last, in one write transaction. *n: rows looked at.
 * On failure nothing of it happened: *last and the counts are as before.
 */
static int recompress_batch(kcache_store *s, int target, size_t batch, int64_t *last, size_t *n,
                            kc_buf *enc, kcache_recompress_result *r)
{
    sqlite3_stmt *q = NULL;
    kcache_recompress_result undo = *r;
    int64_t from = *last;
    *n = 0;
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    int src = sqlite3_prepare_v2(s->db.conn,
                                 "SELECT e.id, e.codec, e.raw_size, e.stored_size, e.digest,"
                                 " a.stored_digest, a.data FROM entry e JOIN artifact a ON a.id = e.id"
                                 " WHERE e.id > ?3 AND e.id IN (SELECT e.id" KC_TO_RECOMPRESS ")"
                                 " ORDER BY e.id LIMIT ?4",
                                 -1, &q, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int(q, 1, target);
        sqlite3_bind_int(q, 2, KC_RAW_BELOW);
        sqlite3_bind_int64(q, 3, from);
        sqlite3_bind_int64(q, 4, (sqlite3_int64)batch);
    }
    uint64_t t0 = kc_mono_ns();
    while (!rc && src == SQLITE_OK && (src = sqlite3_step(q)) == SQLITE_ROW) {
        uint64_t row_t0 = kc_mono_ns();
        *last = sqlite3_column_int64(q, 0);
        (*n)++;
        rc = recompress_row(s, q, target, enc, r);
        src = SQLITE_OK;
        /* The rest in the next transaction once another row as long would pass KC_HOLD_NS. */
        uint64_t now = kc_mono_ns();
        if (2 * now - t0 - row_t0 > KC_HOLD_NS)
            break;
    }
    sqlite3_finalize(q);
    if (!rc && src != SQLITE_DONE && src != SQLITE_OK)
        rc = kc_sqlerr(&s->db, src, "choosing entries to re-encode");
    if (!rc)
        rc = kc_db_commit(&s->db);
    if (rc) {
        kc_db_rollback(&s->db);
        *r = undo; /* nothing of this batch happened */
        *last = from;
        *n = 0;
    }
    return rc;
}

/* The counts before any re-encoding, after writing what is pending. */
static int survey_locked(kcache_store *s, const kcache_recompress_options *o,
                         kcache_recompress_result *r)
{
    int target = s->compression;
    unsigned version = r->version;
    memset(r, 0, sizeof(*r));
    r->version = version;
    snprintf(r->codec, sizeof(r->codec), "%s", usage_name(target));
    int rc;
    if ((rc = kc_flush_locked(s, !o->dry_run)) || (rc = survey(s, r, target)) || o->dry_run)
        return rc;
    return kc_db_writable(&s->db);
}

static void progress(const kcache_recompress_options *o, uint64_t done, uint64_t total)
{
    if (o->progress)
        o->progress(o->userdata, "recompressing", KC_MIN(done, total), total);
}

/*
 * The survey, then a batch at a time, each under the lock in a transaction
 * of its own. Progress is said between batches with no lock held: the
 * callback may use the store, even delete or put entries. What the loop
 * carries across is only the last id done and the counts, which stay right
 * whatever happened meanwhile: the next batch starts after the last id done
 * and sees the store as it is then (an entry deleted is not visited, one put
 * since is in the new codec already). Ids are rowids, which SQLite may hand
 * out again below the last one done after deletes; an entry another process
 * puts there in the old codec waits for the next run (bytes stay right).
 */
static int recompress(kcache_store *s, const kcache_recompress_options *o,
                      kcache_recompress_result *r)
{
    int rc;
    pthread_mutex_lock(&s->lock);
    KC_WITH_RECOVERY(s, rc, survey_locked(s, o, r));
    kc_unlock(s);
    if (rc || o->dry_run)
        return rc;
    size_t batch = o->batch ? o->batch : KC_RECOMPRESS_BATCH;
    int64_t last = 0;
    uint64_t done = 0;
    kc_buf enc = {0};
    for (;;) {
        size_t n = 0;
        progress(o, done, r->to_recompress);
        pthread_mutex_lock(&s->lock);
        int target = s->compression;
        KC_WITH_RECOVERY(s, rc, recompress_batch(s, target, batch, &last, &n, &enc, r));
        kc_unlock(s);
        if (rc || n == 0)
            break;
        done += n;
    }
    kc_buf_free(&enc);
    if (rc)
        return rc;
    progress(o, r->to_recompress, r->to_recompress);
    /* The pages the smaller artifacts left go back, as after a prune. */
    if (r->stored_after < r->stored_before) {
        pthread_mutex_lock(&s->lock);
        if (s->db.conn)
            kc_db_checkpoint(&s->db, KC_HOLD_NS / 1000000u);
        kc_unlock(s);
    }
    return 0;
}

KCACHE_API int kcache_store_recompress(kcache_recompress_result *out, kcache_store *store,
                                       const kcache_recompress_options *options)
{
    static const kcache_recompress_options defaults = KCACHE_RECOMPRESS_OPTIONS_INIT;
    kcache_recompress_result ignored = KCACHE_RECOMPRESS_RESULT_INIT;
    if (!store)
        return KCACHE_EINVAL;
    if (!options)
        options = &defaults;
    char msg[KC_ERRMSG_SIZE];
    if (kc_version_check(msg, sizeof(msg), "kcache_recompress_options", options->version,
                         KCACHE_RECOMPRESS_OPTIONS_VERSION) ||
        (out && kc_version_check(msg, sizeof(msg), "kcache_recompress_result", out->version,
                                 KCACHE_RECOMPRESS_RESULT_VERSION)))
        return kc_err_locking(store, KCACHE_EINVAL, "%s", msg);
    return recompress(store, options, out ? out : &ignored);
}
