/*
 * Hits and counters wait in memory and are written in batches: a hit must not
 * wait for the write lock (doc/design.md, the store). Hits alone never start a
 * write transaction: they go to PATH-hits (hitlog.c), which the next write
 * transaction takes in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

/* A hit's touch waits in memory until this many are pending ... */
#define KC_TOUCH_BATCH 64
/* ... or this much time has passed since the last write of them. */
#define KC_TOUCH_INTERVAL_NS (2ull * 1000000000ull)
/* Touches beyond this while the lock stays taken are dropped, not queued. */
#define KC_TOUCH_MAX 4096

int kc_usage_add(kcache_store *s, const char *arch, int kind, uint64_t hits, uint64_t misses,
                 uint64_t saved_ns)
{
    return kc_usage_merge(&s->usage, &s->n_usage, &s->cap_usage, arch, kind, hits, misses,
                          saved_ns);
}

/*
 * Times of use are milliseconds, and the LRU evicts the oldest: a read in the
 * same millisecond as a write before it would tie with it, and the tie goes to
 * the older row, so "read a, write b, trim" could evict a, which was used
 * last. Within one handle the stamps are therefore strictly increasing: a
 * stamp in a millisecond already used is the last one plus one. They run ahead
 * of the clock only while a handle stamps more than one use a millisecond, and
 * by as many milliseconds as it stamped beyond that; the clock catches up after.
 */
int64_t kc_use_ms(kcache_store *s)
{
    int64_t now = kc_now_ms();
    s->last_use_ms = now > s->last_use_ms ? now : s->last_use_ms + 1;
    return s->last_use_ms;
}

static void add_touch(kcache_store *s, const kcache_key *key)
{
    if (s->n_touches >= KC_TOUCH_MAX)
        return; /* LRU order gets a little older; nothing else is lost */
    struct kc_touch *grown =
        kc_grow(s->touches, &s->cap_touches, s->n_touches, sizeof(*grown), KC_TOUCH_BATCH);
    if (!grown)
        return;
    s->touches = grown;
    struct kc_touch *t = &s->touches[s->n_touches++];
    t->key = *key;
    t->accessed_at = kc_use_ms(s);
    t->hits = 1;
}

/*
 * Records a hit. Hits on a key already pending merge into its touch, so a hot
 * kernel costs one UPDATE per flush however often it is hit, and the batch
 * fills (forcing a flush into some hit's path) only with distinct keys.
 */
void kc_touch(kcache_store *s, const kcache_key *key)
{
    for (size_t i = s->n_touches; i-- > 0;) {
        if (memcmp(s->touches[i].key.bytes, key->bytes, KCACHE_KEY_SIZE) == 0) {
            s->touches[i].accessed_at = kc_use_ms(s);
            s->touches[i].hits++;
            return;
        }
    }
    add_touch(s, key);
}

static int by_key(const void *a, const void *b)
{
    return memcmp(((const struct kc_touch *)a)->key.bytes, ((const struct kc_touch *)b)->key.bytes,
                  KCACHE_KEY_SIZE);
}

/*
 * One touch per key, as kc_touch keeps them in memory. The log holds a record
 * per key per append, so a hot key comes back from it once for every append
 * since the last fold, and each would be an UPDATE of its row. The UPDATE
 * takes the later time and adds the hits, so touches of one key merged the
 * same way leave the row as they would have one by one (a sum that would not
 * fit stays two touches).
 */
static void merge_touches(kcache_store *s)
{
    if (s->n_touches < 2)
        return;
    qsort(s->touches, s->n_touches, sizeof(*s->touches), by_key);
    size_t n = 0;
    for (size_t i = 1; i < s->n_touches; i++) {
        struct kc_touch *last = &s->touches[n], *t = &s->touches[i];
        if (by_key(last, t) == 0 && t->hits <= UINT32_MAX - last->hits) {
            last->accessed_at = KC_MAX(last->accessed_at, t->accessed_at);
            last->hits += t->hits;
        } else {
            s->touches[++n] = *t;
        }
    }
    s->n_touches = n + 1;
}

/* Writes what is pending, and the hits other handles logged, inside the caller's write
 * transaction. */
int kc_pending_write(kcache_store *s)
{
    sqlite3_stmt *st;
    int rc;
    size_t own = s->n_touches;
    if (!s->hitlog_skip && (rc = kc_hitlog_take(s)))
        return kc_err(s, rc, "out of memory");
    if (s->n_touches > own)
        merge_touches(s);
    for (size_t i = 0; i < s->n_touches; i++) {
        if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_TOUCH)))
            return rc;
        sqlite3_bind_blob(st, 1, s->touches[i].key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, s->touches[i].accessed_at);
        sqlite3_bind_int64(st, 3, s->touches[i].hits);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE)
            return kc_sqlerr(&s->db, rc, "recording hits");
    }
    for (size_t i = 0; i < s->n_usage; i++) {
        const kcache_usage *u = &s->usage[i];
        if ((rc = kc_db_stmt(&s->db, &st, KC_STMT_USAGE_ADD)))
            return rc;
        sqlite3_bind_text(st, 1, u->arch, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, u->kind);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)u->hits);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)u->misses);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)u->saved_ns);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE)
            return kc_sqlerr(&s->db, rc, "recording hits");
    }
    if (s->pending_corrupt && (rc = kc_counter_write(s, "corrupt", s->pending_corrupt)))
        return rc;
    uint64_t failures = s->pending_failures + s->spilled;
    if (failures && (rc = kc_counter_write(s, "store_failures", failures)))
        return rc;
    return kc_counters_write(s);
}

void kc_pending_clear(kcache_store *s)
{
    s->n_touches = 0;
    s->n_usage = 0;
    s->pending_corrupt = 0;
    s->pending_failures = 0;
    s->n_counters = 0;
    s->last_flush_ns = kc_mono_ns();
}

static int has_pending(const kcache_store *s)
{
    return s->n_touches || s->n_usage || s->pending_corrupt || s->pending_failures ||
           s->n_counters;
}

/*
 * Writes pending touches. With wait == 0 it only tries: if another process
 * holds the write lock, the touches stay pending and the caller (a hit) goes
 * on without waiting.
 */
int kc_flush_locked(kcache_store *s, int wait)
{
    if (!has_pending(s) && (s->db.read_only || s->db.newer_schema || !kc_hitlog_waiting(s)))
        return 0;
    if (s->db.read_only || s->db.newer_schema) {
        kc_pending_clear(s);
        return 0;
    }
    int rc;
    if (wait) {
        rc = kc_db_begin_write(&s->db);
    } else {
        kc_db_busy(&s->db, 0);
        int src = sqlite3_exec(s->db.conn, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        kc_db_busy(&s->db, s->db.busy_timeout_ms);
        if ((src & 0xff) == SQLITE_BUSY)
            return 0;
        rc = src == SQLITE_OK ? 0 : kc_sqlerr(&s->db, src, "recording hits");
    }
    if (rc)
        return rc;
    /* Failures that found no room before (db/alone.c) go in with these. */
    s->spilled = kc_spill_take_begin(&s->db);
    if ((rc = kc_pending_write(s)) || (rc = kc_db_commit(&s->db))) {
        kc_db_rollback(&s->db);
        s->spilled = 0;
        kc_spill_take_end(&s->db, 0);
        return rc;
    }
    s->spilled = 0;
    kc_spill_take_end(&s->db, 1);
    kc_pending_clear(s);
    return 0;
}

static int hits_only(const kcache_store *s)
{
    return !s->pending_corrupt && !s->pending_failures && !s->n_counters;
}

/*
 * Records what is pending: hits alone are appended to PATH-hits (no write
 * lock, nothing in the WAL), anything else, or hits the log could not take,
 * in a write transaction (waiting for the lock or not, as kc_flush_locked).
 */
int kc_record_locked(kcache_store *s, int wait)
{
    if (!has_pending(s))
        return 0;
    if (s->db.read_only || s->db.newer_schema)
        return kc_flush_locked(s, wait);
    uint64_t log_size;
    if (hits_only(s) && kc_hitlog_append(s, &log_size) == 0) {
        kc_pending_clear(s);
        if (kc_hitlog_fold_due(log_size))
            kc_flush_locked(s, 0); /* keeps the log within its bound when the lock is free */
        return 0;
    }
    return kc_flush_locked(s, wait);
}

void kc_maybe_flush_locked(kcache_store *s)
{
    if (s->n_touches >= KC_TOUCH_BATCH || kc_mono_ns() - s->last_flush_ns >= KC_TOUCH_INTERVAL_NS)
        kc_record_locked(s, 0);
}

KCACHE_API int kcache_store_flush(kcache_store *store)
{
    KC_CHECK_ARG(store, store);
    pthread_mutex_lock(&store->lock);
    int rc = kc_flush_locked(store, 1);
    kc_db_settle(&store->db);
    kc_unlock(store);
    return rc;
}

void kc_store_count_miss(kcache_store *store, const char *arch, kcache_kind kind)
{
    if (!store)
        return;
    pthread_mutex_lock(&store->lock);
    kc_usage_add(store, arch ? arch : "", (int)kind, 0, 1, 0);
    kc_maybe_flush_locked(store);
    kc_unlock(store);
}

/*
 * Writes the counters alone, at once, after a write failed for a full disk.
 * The failed transaction's frames are still in the WAL file, past its last
 * commit, and a few bytes of counters go there without asking the disk for
 * more; by the time the process closes, other writers may have taken that
 * room, and the failure would go uncounted (stats saying 0 after as many
 * warnings). Hits and usage stay pending for a later flush.
 */
void kc_count_now_locked(kcache_store *s)
{
    size_t touches = s->n_touches, usage = s->n_usage;
    s->n_touches = s->n_usage = 0;
    uint64_t since = s->last_flush_ns;
    s->hitlog_skip = 1; /* the log's hits would land in the lists set aside here */
    if (kc_flush_locked(s, 0) == 0)
        s->last_flush_ns = since; /* hits keep their own schedule */
    s->hitlog_skip = 0;
    s->n_touches = touches;
    s->n_usage = usage;
}

void kc_store_count_failure(kcache_store *store)
{
    if (!store)
        return;
    pthread_mutex_lock(&store->lock);
    store->pending_failures++;
    kc_unlock(store);
}
