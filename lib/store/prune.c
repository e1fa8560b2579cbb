/*
 * Keeping the cache bounded: eviction in least-recently-used order, and
 * handing the freed pages back to the file system.
 *
 * The cost of a prune follows what it evicts, not the size of the cache: the
 * victims come off the accessed_at index in order, each delete frees its own
 * pages, incremental_vacuum moves only as many pages as were freed, and the
 * checkpoint copies only the pages those steps wrote.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "store/storeint.h"

/* Entries deleted per transaction, so that readers are never held off long. */
#define KC_EVICT_BATCH 256

/* What an entry costs beyond its artifact bytes: rows, index entries, info. */
#define KC_ENTRY_OVERHEAD 512

/* A put that passes the cap evicts down to this share of it (low water mark). */
#define KC_LOW_WATER_PERCENT 90

static int64_t query_int(kcache_store *s, const char *sql, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    int src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
        src = SQLITE_OK;
    }
    sqlite3_finalize(st);
    *rc = src == SQLITE_OK || src == SQLITE_DONE ? 0 : kc_sqlerr(s, src, "measuring the database");
    return v;
}

static uint64_t disk_bytes(kcache_store *s)
{
    uint64_t file_bytes, wal_bytes;
    kc_db_disk_usage(s, &file_bytes, &wal_bytes);
    return file_bytes + wal_bytes;
}

/*
 * Returns free pages to the file system and empties the WAL. A reader in
 * another process can keep the checkpoint from finishing; the WAL is then
 * truncated by a later prune or the last close, never left to grow unbounded
 * (journal_size_limit).
 */
static int release_space(kcache_store *s)
{
    int rc;
    if (query_int(s, "PRAGMA auto_vacuum", &rc) == 2 && !rc) {
        if ((rc = kc_db_begin_write(s)))
            return rc;
        if ((rc = kc_db_exec(s, "PRAGMA incremental_vacuum", "releasing free pages")) ||
            (rc = kc_db_commit(s))) {
            kc_db_rollback(s);
            return rc;
        }
    } else if (!rc && query_int(s, "PRAGMA freelist_count", &rc) > 0 && !rc) {
        if ((rc = kc_db_exec(s, "VACUUM", "compacting the database")))
            return rc;
    }
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    return rc;
}

static int count_evictions(kcache_store *s, uint64_t n)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(s, &st, KC_STMT_COUNTER_ADD);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, "evictions", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)n);
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(s, src, "counting evictions");
}

/* Victims of one batch: ids and the bytes they hold. */
struct batch {
    int64_t ids[KC_EVICT_BATCH];
    uint64_t bytes[KC_EVICT_BATCH];
    size_t n;
};

/* Deletes one batch in one transaction. */
static int delete_batch(kcache_store *s, const struct batch *b, kcache_prune_result *r)
{
    int rc = kc_db_begin_write(s);
    if (rc)
        return rc;
    for (size_t i = 0; i < b->n; i++) {
        sqlite3_stmt *st;
        if ((rc = kc_db_stmt(s, &st, KC_STMT_DELETE_ID)))
            goto fail;
        sqlite3_bind_int64(st, 1, b->ids[i]);
        int src = sqlite3_step(st);
        sqlite3_reset(st);
        if (src != SQLITE_DONE) {
            rc = kc_sqlerr(s, src, "evicting");
            goto fail;
        }
    }
    if ((rc = count_evictions(s, b->n)) || (rc = kc_db_commit(s)))
        goto fail;
    for (size_t i = 0; i < b->n; i++) {
        r->evicted++;
        r->evicted_bytes += b->bytes[i];
    }
    return 0;
fail:
    kc_db_rollback(s);
    return rc;
}

/*
 * Fills a batch from the LRU end, up to `count` entries or `bytes` bytes of
 * estimated space, whichever comes first. With a filter, only matching
 * entries (list statement columns); without, the plain LRU index walk.
 */
static int fill_batch(kcache_store *s, struct batch *b, const kcache_prune_options *o,
                      int filtered, uint64_t count, uint64_t bytes, uint64_t skip)
{
    sqlite3_stmt *st;
    b->n = 0;
    int rc = kc_db_stmt(s, &st, filtered ? KC_STMT_LIST_LRU : KC_STMT_LRU_BATCH);
    if (rc)
        return rc;
    uint64_t want = KC_MIN(count, (uint64_t)KC_EVICT_BATCH);
    if (filtered) {
        if (o->arch && *o->arch)
            sqlite3_bind_text(st, 1, o->arch, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, (int)o->kind);
        sqlite3_bind_int64(st, 3, o->accessed_before);
        sqlite3_bind_int64(st, 4, 0);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)(want + skip));
    } else {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)(want + skip));
    }
    uint64_t got = 0, seen = 0;
    int src;
    while (b->n < want && got < bytes && (src = sqlite3_step(st)) == SQLITE_ROW) {
        if (seen++ < skip)
            continue;
        b->ids[b->n] = sqlite3_column_int64(st, 0);
        b->bytes[b->n] = (uint64_t)sqlite3_column_int64(st, filtered ? 6 : 1);
        got += b->bytes[b->n] + KC_ENTRY_OVERHEAD;
        b->n++;
    }
    sqlite3_reset(st);
    return 0;
}

/*
 * Evicts until `count` entries or `bytes` bytes are gone or nothing is left.
 * A dry run walks the same order without deleting.
 */
static int evict(kcache_store *s, const kcache_prune_options *o, int filtered, uint64_t count,
                 uint64_t bytes, kcache_prune_result *r)
{
    uint64_t done_n = 0, done_bytes = 0;
    struct batch *b = kc_malloc(sizeof(*b));
    if (!b)
        return kc_err(s, KCACHE_ENOMEM, "out of memory");
    int rc = 0;
    while (done_n < count && done_bytes < bytes) {
        if ((rc = fill_batch(s, b, o, filtered, count - done_n, bytes - done_bytes,
                             o->dry_run ? done_n : 0)))
            break;
        if (b->n == 0)
            break;
        if (o->dry_run) {
            for (size_t i = 0; i < b->n; i++) {
                r->evicted++;
                r->evicted_bytes += b->bytes[i];
            }
        } else if ((rc = delete_batch(s, b, r))) {
            break;
        }
        done_n += b->n;
        for (size_t i = 0; i < b->n; i++)
            done_bytes += b->bytes[i] + KC_ENTRY_OVERHEAD;
    }
    free(b);
    return rc;
}

/* Evicts LRU entries until the files on disk fit in target bytes. */
static int fit_size(kcache_store *s, const kcache_prune_options *o, uint64_t target,
                    kcache_prune_result *r)
{
    int rc = 0;
    if (o->dry_run) {
        uint64_t used = disk_bytes(s);
        return used > target ? evict(s, o, 0, UINT64_MAX, used - target, r) : 0;
    }
    /* Each round measures the real files, so an estimate that was off is
     * corrected by the next round rather than trusted. */
    for (int round = 0; round < 64; round++) {
        uint64_t used = disk_bytes(s);
        if (used <= target)
            return 0;
        int64_t page_size = query_int(s, "PRAGMA page_size", &rc);
        int64_t pages = rc ? 0 : query_int(s, "PRAGMA page_count", &rc);
        int64_t free_pages = rc ? 0 : query_int(s, "PRAGMA freelist_count", &rc);
        if (rc)
            return rc;
        uint64_t live = (uint64_t)((pages - free_pages) * page_size);
        if (free_pages > 0 || live <= target) {
            /* Space is free inside the file or in the WAL: release it first. */
            if ((rc = release_space(s)))
                return rc;
            if (disk_bytes(s) <= target || live <= target)
                return 0;
        }
        uint64_t before = r->evicted;
        if ((rc = evict(s, o, 0, UINT64_MAX, live - target, r)))
            return rc;
        if ((rc = release_space(s)))
            return rc;
        if (r->evicted == before)
            return 0; /* nothing left to evict: what remains is the empty schema */
    }
    return 0;
}

int kc_prune_locked(kcache_store *s, const kcache_prune_options *o, kcache_prune_result *r)
{
    int rc;
    unsigned version = r->version;
    memset(r, 0, sizeof(*r));
    r->version = version;
    r->disk_before = disk_bytes(s);
    if (!o->dry_run && (rc = kc_db_writable(s)))
        return rc;
    if ((rc = kc_flush_locked(s, !o->dry_run)))
        return rc;
    if (o->accessed_before && (rc = evict(s, o, 1, UINT64_MAX, UINT64_MAX, r)))
        return rc;
    if (o->max_entries) {
        int64_t entries = query_int(s, "SELECT entries FROM totals", &rc);
        if (rc)
            return rc;
        if (o->dry_run)
            entries -= (int64_t)r->evicted; /* the totals do not know about a dry run */
        if (entries > (int64_t)o->max_entries &&
            (rc = evict(s, o, 0, (uint64_t)entries - o->max_entries, UINT64_MAX, r)))
            return rc;
    }
    uint64_t target = o->max_size ? o->max_size : s->max_size;
    if (target != UINT64_MAX && (rc = fit_size(s, o, target, r)))
        return rc;
    if (!o->dry_run && r->evicted && (rc = release_space(s)))
        return rc;
    if (o->dry_run) {
        /* An estimate from what the entries take: the pages they free are
         * handed back by a real prune, which this one does not do. */
        uint64_t freed = r->evicted_bytes + r->evicted * KC_ENTRY_OVERHEAD;
        r->disk_after = freed < r->disk_before ? r->disk_before - freed : 0;
    } else {
        r->disk_after = disk_bytes(s);
    }
    return 0;
}

int kc_maybe_prune_locked(kcache_store *s)
{
    if (s->max_size == UINT64_MAX || disk_bytes(s) <= s->max_size)
        return 0;
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    o.max_size = s->max_size / 100 * KC_LOW_WATER_PERCENT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    int rc = kc_prune_locked(s, &o, &r);
    if (rc)
        kc_log(s, KCACHE_LOG_WARNING, "could not bring %s under its cap: %s", s->path, s->errmsg);
    /* The put itself succeeded; a prune that could not finish is retried by the next one. */
    return 0;
}

KCACHE_API int kcache_store_prune(kcache_prune_result *out, kcache_store *store,
                                  const kcache_prune_options *options)
{
    static const kcache_prune_options defaults = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result ignored = KCACHE_PRUNE_RESULT_INIT;
    if (!store)
        return KCACHE_EINVAL;
    if (!options)
        options = &defaults;
    if (options->version < 1 || options->version > KCACHE_PRUNE_VERSION)
        return kc_err(store, KCACHE_EINVAL, "kcache_store_prune: options version %u unsupported",
                      options->version);
    if (!KC_RESULT_VERSION_OK(out, KCACHE_PRUNE_RESULT_VERSION))
        return kc_err(store, KCACHE_EINVAL, "kcache_store_prune: result version %u is not "
                      "supported (KCACHE_PRUNE_RESULT_INIT)", out->version);
    if (options->kind && !kcache_kind_name(options->kind))
        return kc_err(store, KCACHE_EINVAL, "kcache_store_prune: bad kind %d", (int)options->kind);
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, kc_prune_locked(store, options, out ? out : &ignored));
    /*
     * Evicting writes too (to the WAL, then the file): on a disk that is full
     * to the last byte, "lower the cap" cannot be done until there is room.
     */
    if (rc == KCACHE_EFULL)
        kc_err(store, rc, "disk full while evicting from %s: recording an eviction needs free "
               "space too; free some on that disk (a few MiB), then prune again", store->path);
    pthread_mutex_unlock(&store->lock);
    return rc;
}

static int vacuum_locked(kcache_store *s)
{
    int rc = kc_flush_locked(s, 1);
    if (!rc)
        rc = kc_db_exec(s, "VACUUM", "compacting the database");
    if (!rc)
        sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    return rc;
}

KCACHE_API int kcache_store_vacuum(kcache_store *store)
{
    if (!store)
        return KCACHE_EINVAL;
    pthread_mutex_lock(&store->lock);
    int rc = store->db ? kc_db_writable(store) : kc_err(store, KCACHE_EIO, "no database");
    /* A damaged file is set aside (recovery) and the new one compacted: nothing left to rm. */
    if (!rc)
        KC_WITH_RECOVERY(store, rc, vacuum_locked(store));
    pthread_mutex_unlock(&store->lock);
    return rc;
}

/* SQLite's quick_check: whether the emptied file is sound, or why not. */
static int file_sound(kcache_store *s, char *why, size_t why_size)
{
    return kc_db_quick_check(s, why, why_size) == 1;
}

KCACHE_API int kcache_store_clear(kcache_store *store)
{
    if (!store)
        return KCACHE_EINVAL;
    pthread_mutex_lock(&store->lock);
    /* Children first, so that the per-row trigger finds nothing left to do. Leases
     * too: a row of one that a lost -shm left broken would otherwise stay for good. */
    int rc = kc_db_classify_failure(store, kc_db_write_sql(store,
                             "DELETE FROM entry_input; DELETE FROM input; DELETE FROM artifact;"
                             " DELETE FROM entry_info; DELETE FROM entry; DELETE FROM lease",
                             "clearing the cache"));
    /*
     * The user asked for an empty cache: a file found damaged on the way (or
     * still damaged once emptied) is replaced by a new one at once, even
     * while other processes use it (they keep the old file until they
     * reopen). No state is left that needs rm by hand.
     */
    char why[KC_ERRMSG_SIZE] = "";
    if (rc == KCACHE_ECORRUPT)
        snprintf(why, sizeof(why), "%s", store->errmsg);
    else if (!rc && !file_sound(store, why, sizeof(why)))
        rc = KCACHE_ECORRUPT;
    if (rc == KCACHE_ECORRUPT && !(rc = kc_db_replace(store, why)))
        store->pending_corrupt++;
    if (!rc) {
        store->n_touches = 0;
        rc = release_space(store);
    }
    pthread_mutex_unlock(&store->lock);
    return rc;
}
