/*
 * Upkeep of the stored artifacts: each one read back and checked (verify),
 * or re-encoded to the compression setting of now (recompress).
 *
 * Recompress. Each row records its codec, so a store holds a mix and nothing
 * ever has to be rewritten; this is for a user who changed the setting and
 * wants the space (or the read speed) of the new one for what is already
 * stored.
 *
 * A batch is chosen by id after the last one done and read, then decoded,
 * checked and re-encoded with no lock held, then written in one write
 * transaction that only writes (about KC_HOLD_NS at most), each row only if
 * it still holds the bytes that were read: another process may have
 * deleted or replaced it meanwhile. Killed at any moment, each entry is
 * whole in one codec or the other (the rollback keeps the old), and the
 * next run picks up what is left. Every artifact is decoded and checked
 * against its digest before re-encoding, so a damaged one is never given a
 * fresh stored digest that would make it look sound; it is left for get
 * and verify, which delete it.
 *
 * Verify: SQLite's integrity check, then every entry through the store's
 * own checks (get), each damaged one reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcache/verify.h"
#include "store/storeint.h"

/* Entries per batch at most; fewer when writing them takes longer than KC_HOLD_NS. */
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
        /* The totals: puts and deletes keep them (prune.c), a re-encode here. */
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

/* Stored bytes a batch reads at most (one larger artifact is a batch alone). */
#define KC_RECOMPRESS_BATCH_BYTES (UINT64_C(8) << 20)

/* A row of a batch: as read, then what re-encoding it made of it. */
struct rc_row {
    int64_t id, raw_size, stored_size;
    int codec, new_codec;
    uint8_t digest[KC_DIGEST_SIZE], stored_digest[KC_DIGEST_SIZE];
    int sound; /* its digests of the right size, its codec known */
    void *stored;
    kc_buf enc; /* the new bytes, when new_codec differs */
};

struct rc_batch {
    struct rc_row *rows;
    size_t n, cap;
};

static void rc_batch_clear(struct rc_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->rows[i].stored);
        kc_buf_free(&b->rows[i].enc);
    }
    b->n = 0;
}

/* Copies a row of the batch's query into b (one allocation for its bytes). */
static int read_row(struct rc_batch *b, sqlite3_stmt *q)
{
    struct rc_row *grown = kc_grow(b->rows, &b->cap, b->n, sizeof(*grown), 16);
    if (!grown)
        return KCACHE_ENOMEM;
    b->rows = grown;
    struct rc_row *r = &b->rows[b->n];
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(q, 0);
    r->codec = sqlite3_column_int(q, 1);
    r->raw_size = sqlite3_column_int64(q, 2);
    r->stored_size = sqlite3_column_int64(q, 3);
    const void *stored = sqlite3_column_blob(q, 6);
    size_t stored_n = (size_t)sqlite3_column_bytes(q, 6);
    r->sound = kc_codec_known(r->codec) && r->raw_size >= 0 &&
               (int64_t)stored_n == r->stored_size &&
               sqlite3_column_bytes(q, 4) == KC_DIGEST_SIZE &&
               sqlite3_column_bytes(q, 5) == KC_DIGEST_SIZE;
    if (r->sound) {
        memcpy(r->digest, sqlite3_column_blob(q, 4), KC_DIGEST_SIZE);
        memcpy(r->stored_digest, sqlite3_column_blob(q, 5), KC_DIGEST_SIZE);
        if (!(r->stored = kc_malloc(stored_n ? stored_n : 1)))
            return KCACHE_ENOMEM;
        memcpy(r->stored, stored_n ? stored : "", stored_n);
    }
    b->n++;
    return 0;
}

/*
 * Reads the next batch after id *last: up to `batch` rows or about
 * KC_RECOMPRESS_BATCH_BYTES, copied out, so that the work on them needs no
 * lock. *last moves past them; an empty batch is the end.
 */
static int read_batch(kcache_store *s, int target, size_t batch, int64_t *last,
                      struct rc_batch *b)
{
    sqlite3_stmt *q = NULL;
    uint64_t bytes = 0;
    int rc = 0;
    int src = sqlite3_prepare_v2(s->db.conn,
                                 "SELECT e.id, e.codec, e.raw_size, e.stored_size, e.digest,"
                                 " a.stored_digest, a.data FROM entry e JOIN artifact a ON a.id = e.id"
                                 " WHERE e.id > ?3 AND e.id IN (SELECT e.id" KC_TO_RECOMPRESS ")"
                                 " ORDER BY e.id LIMIT ?4",
                                 -1, &q, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int(q, 1, target);
        sqlite3_bind_int(q, 2, KC_RAW_BELOW);
        sqlite3_bind_int64(q, 3, *last);
        sqlite3_bind_int64(q, 4, (sqlite3_int64)batch);
    }
    while (!rc && bytes < KC_RECOMPRESS_BATCH_BYTES && src == SQLITE_OK &&
           (src = sqlite3_step(q)) == SQLITE_ROW) {
        src = SQLITE_OK;
        if ((rc = read_row(b, q)))
            break;
        *last = b->rows[b->n - 1].id;
        bytes += (uint64_t)sqlite3_column_bytes(q, 6);
    }
    sqlite3_finalize(q);
    if (rc)
        return kc_err(s, rc, "out of memory reading entries to re-encode");
    return src == SQLITE_ROW || src == SQLITE_DONE || src == SQLITE_OK
               ? 0
               : kc_sqlerr(&s->db, src, "choosing entries to re-encode");
}

/*
 * Checks, decodes and re-encodes one row with no lock held: a damaged
 * artifact is skipped (left for get and verify), one that comes out in its
 * own codec again is kept. r->new_codec says which (-1: skipped).
 */
static int encode_row(struct rc_row *r, kc_codec_ctx *codec, int target)
{
    r->new_codec = -1;
    if (!r->sound || !kc_stored_digest_ok(r->stored_digest, r->stored, (size_t)r->stored_size) ||
        !kc_decode_plausible(r->codec, r->stored, (size_t)r->stored_size, (size_t)r->raw_size))
        return 0;
    void *raw = NULL;
    int rc = kc_decode(codec, &raw, r->codec, r->stored, (size_t)r->stored_size,
                       (size_t)r->raw_size);
    if (rc == KCACHE_ECORRUPT)
        return 0;
    if (rc)
        return rc;
    uint8_t check[KC_DIGEST_SIZE];
    kc_digest(check, raw, (size_t)r->raw_size);
    if (memcmp(check, r->digest, KC_DIGEST_SIZE) == 0)
        rc = kc_encode(codec, &r->enc, &r->new_codec, target, raw, (size_t)r->raw_size);
    free(raw);
    return rc;
}

/* Whether the row of r's id still holds the bytes r read (nobody deleted or replaced it). */
static int row_unchanged(kcache_store *s, const struct rc_row *r, int *same)
{
    sqlite3_stmt *q = NULL;
    *same = 0;
    int src = sqlite3_prepare_v2(s->db.conn,
                                 "SELECT e.codec, e.stored_size, e.digest, a.stored_digest"
                                 " FROM entry e JOIN artifact a ON a.id = e.id WHERE e.id = ?1",
                                 -1, &q, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, r->id);
        src = sqlite3_step(q);
    }
    if (src == SQLITE_ROW) {
        *same = sqlite3_column_int(q, 0) == r->codec &&
                sqlite3_column_int64(q, 1) == r->stored_size &&
                sqlite3_column_bytes(q, 2) == KC_DIGEST_SIZE &&
                sqlite3_column_bytes(q, 3) == KC_DIGEST_SIZE &&
                !memcmp(sqlite3_column_blob(q, 2), r->digest, KC_DIGEST_SIZE) &&
                !memcmp(sqlite3_column_blob(q, 3), r->stored_digest, KC_DIGEST_SIZE);
        src = SQLITE_DONE;
    }
    sqlite3_finalize(q);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "reading an entry to re-encode");
}

/*
 * Writes the batch's new bytes in one write transaction, each row only if it
 * is still what was read; the counts only once it commits.
 */
static int write_batch(kcache_store *s, const struct rc_batch *b, kcache_recompress_result *r)
{
    kcache_recompress_result counts = *r;
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    for (size_t i = 0; !rc && i < b->n; i++) {
        const struct rc_row *row = &b->rows[i];
        int same = 0;
        if (row->new_codec < 0) {
            counts.skipped++;
        } else if (row->new_codec == row->codec) {
            counts.kept++;
        } else if (!(rc = row_unchanged(s, row, &same)) && same) {
            uint8_t new_digest[KC_DIGEST_SIZE];
            kc_stored_digest(new_digest, row->enc.data ? row->enc.data : (const void *)"",
                             row->enc.size);
            if (!(rc = write_row(s, row->id, row->new_codec, &row->enc, new_digest,
                                 row->stored_size))) {
                counts.recompressed++;
                counts.stored_before += (uint64_t)row->stored_size;
                counts.stored_after += row->enc.size;
            }
        }
    }
    if (rc || (rc = kc_db_commit(&s->db))) {
        kc_db_rollback(&s->db);
        return rc;
    }
    *r = counts;
    return 0;
}

/*
 * One batch: read under the store's lock, re-encoded with none held (the
 * costly part, with a codec of its own), written under it in one
 * transaction that only writes. *n: rows read; *hold_ns: the write's time.
 */
static int recompress_batch(kcache_store *s, kc_codec_ctx *codec, size_t batch, int64_t *last,
                            size_t *n, uint64_t *hold_ns, struct rc_batch *b,
                            kcache_recompress_result *r)
{
    int rc;
    rc_batch_clear(b);
    pthread_mutex_lock(&s->lock);
    int target = s->compression;
    KC_WITH_RECOVERY(s, rc, read_batch(s, target, batch, last, b));
    kc_unlock(s);
    *n = b->n;
    for (size_t i = 0; !rc && i < b->n; i++)
        if ((rc = encode_row(&b->rows[i], codec, target)))
            rc = kc_err_locking(s, rc, "out of memory re-encoding an entry");
    if (rc || !b->n)
        return rc;
    pthread_mutex_lock(&s->lock);
    uint64_t t0 = kc_mono_ns();
    KC_WITH_RECOVERY(s, rc, write_batch(s, b, r));
    *hold_ns = kc_mono_ns() - t0;
    kc_unlock(s);
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

static void recompress_progress(const kcache_recompress_options *o, uint64_t done, uint64_t total)
{
    if (o->progress)
        o->progress(o->userdata, "recompressing", KC_MIN(done, total), total);
}

/*
 * The survey, then a batch at a time (recompress_batch). Progress is said between batches with no lock held: the
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
    size_t most = o->batch ? o->batch : KC_RECOMPRESS_BATCH, batch = KC_MIN(most, 8);
    int64_t last = 0;
    uint64_t done = 0;
    struct rc_batch b = {0};
    kc_codec_ctx *codec = NULL;
    if (kc_codec_new(&codec))
        return kc_err_locking(s, KCACHE_ENOMEM, "out of memory");
    for (;;) {
        size_t n = 0;
        uint64_t hold = 0;
        recompress_progress(o, done, r->to_recompress);
        if ((rc = recompress_batch(s, codec, batch, &last, &n, &hold, &b, r)) || n == 0)
            break;
        done += n;
        /* Rows per batch: as many as the write takes about KC_HOLD_NS for. */
        if (hold < KC_HOLD_NS / 4 && batch < most)
            batch = KC_MIN(most, batch * 2);
        else if (hold > KC_HOLD_NS && batch > 1)
            batch /= 2;
    }
    rc_batch_clear(&b);
    free(b.rows);
    kc_codec_free(codec);
    if (rc)
        return rc;
    recompress_progress(o, r->to_recompress, r->to_recompress);
    /* The pages the smaller artifacts left go back, as after a prune. */
    if (r->stored_after < r->stored_before) {
        pthread_mutex_lock(&s->lock);
        if (s->db.conn)
            kc_checkpoint(s);
        kc_unlock(s);
    }
    return 0;
}

KCACHE_API int kcache_store_recompress(kcache_recompress_result *out, kcache_store *store,
                                       const kcache_recompress_options *options)
{
    static const kcache_recompress_options defaults = KCACHE_RECOMPRESS_OPTIONS_INIT;
    kcache_recompress_result ignored = KCACHE_RECOMPRESS_RESULT_INIT;
    if (!store ||
        kc_check_version(store, options, "kcache_recompress_options",
                         KCACHE_RECOMPRESS_OPTIONS_VERSION) ||
        kc_check_version(store, out, "kcache_recompress_result", KCACHE_RECOMPRESS_RESULT_VERSION))
        return KCACHE_EINVAL;
    return recompress(store, options ? options : &defaults, out ? out : &ignored);
}

/* Verify. SQLite's integrity check, its answer on one line in r. */
static int integrity(kcache_store *s, kcache_verify_result *r)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    int src = s->db.conn
                  ? sqlite3_prepare_v2(s->db.conn, "PRAGMA integrity_check(20)", -1, &st, NULL)
                  : SQLITE_MISUSE;
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(st, 0);
        /* One line: SQLite may put several into this row. */
        static const char banner[] = "*** in database main ***";
        const char *t = first ? first : "?";
        if (!strncmp(t, banner, sizeof(banner) - 1))
            t += sizeof(banner) - 1;
        while (*t == '\n' || *t == ' ')
            t++;
        size_t n = 0;
        for (; *t && n + 1 < sizeof(r->integrity); t++)
            r->integrity[n++] = *t == '\n' || *t == '\r' ? ' ' : *t;
        r->integrity[n] = '\0';
        r->integrity_ok = first && !strcmp(first, "ok") && sqlite3_step(st) == SQLITE_DONE;
    } else if ((src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB) {
        snprintf(r->integrity, sizeof(r->integrity), "%s", sqlite3_errstr(src));
        r->integrity_ok = 0;
    } else {
        rc = kc_sqlerr(&s->db, src, "checking the database");
    }
    sqlite3_finalize(st);
    kc_unlock(s);
    return rc;
}


KCACHE_API int kcache_store_verify(kcache_verify_result *out, kcache_store *store,
                                   kcache_progress_fn progress, kcache_damaged_fn on_damaged,
                                   void *userdata)
{
    kcache_verify_result r = KCACHE_VERIFY_RESULT_INIT;
    memset(&r, 0, sizeof(r));
    kcache_key *keys = NULL;
    size_t n_keys = 0;
    if (!store ||
        kc_check_version(store, out, "kcache_verify_result", KCACHE_VERIFY_RESULT_VERSION))
        return KCACHE_EINVAL;
    int rc = integrity(store, &r);
    if (rc)
        goto out;
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_CREATED;
    rc = kcache_store_list_keys(&keys, &n_keys, store, &f);
    if (rc)
        goto out;
    for (size_t i = 0; i < n_keys; i++) {
        if (progress)
            progress(userdata, "verifying", i, n_keys);
        kcache_entry *e = NULL;
        rc = kcache_store_get(&e, store, &keys[i], KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        /* Gone since it was listed (pruned or cleared by another process): not damage. */
        if (rc == KCACHE_ENOTFOUND && !kc_store_get_found_damage(store)) {
            rc = 0;
            continue;
        }
        r.entries++;
        if (rc == KCACHE_ENOTFOUND || rc == KCACHE_ECORRUPT) {
            r.damaged++;
            if (on_damaged)
                on_damaged(userdata, &keys[i], kcache_store_errmsg(store));
            rc = 0;
            continue;
        }
        if (rc)
            goto out;
        r.bytes += e->size;
        kcache_entry_free(e);
    }
    if (progress)
        progress(userdata, "verifying", n_keys, n_keys);
    /* Writable (verify --fix): what the damaged entries' deletes could not reach goes too. */
    if (r.damaged)
        rc = kc_shared_sweep(store);
out:
    kcache_keys_free(keys);
    if (out) {
        r.version = out->version;
        *out = r;
    }
    return rc;
}
