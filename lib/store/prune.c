/*
 * Deleting entries, and keeping the cache bounded: an entry deleted with
 * what goes with it, eviction in least-recently-used order, clear, and
 * handing the freed pages back to the file system.
 *
 * The cost of a prune follows what it evicts, not the size of the cache: the
 * victims come off the accessed_at index in order, are deleted by a few
 * set-based statements per batch, incremental_vacuum moves only as many
 * pages as were freed, and the checkpoint copies only the pages those steps
 * wrote. What a prune costs, measured: benchmarks/PROFILE-writes.md.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "store/storeint.h"

/*
 * Entries deleted per transaction. Readers are never held off (WAL); other
 * writers wait for the lock, so a transaction stays well under their busy
 * timeout (5 s by default): what 1024 entries take is in doc/design.md,
 * The store.
 */
#define KC_EVICT_BATCH 128
/* Artifact bytes per transaction at most: deleting them is the cost. */
#define KC_EVICT_BATCH_BYTES (UINT64_C(8) << 20)

/* What an entry costs beyond its artifact bytes: rows, index entries, info. */
#define KC_ENTRY_OVERHEAD 512

/* A put that passes the cap evicts down to this share of it (low water mark). */
#define KC_LOW_WATER_PERCENT 90

static int64_t query_int(kcache_store *s, const char *sql, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    int src = sqlite3_prepare_v2(s->db.conn, sql, -1, &st, NULL);
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
        src = SQLITE_OK;
    }
    sqlite3_finalize(st);
    *rc = src == SQLITE_OK || src == SQLITE_DONE ? 0
                                                 : kc_sqlerr(&s->db, src, "measuring the database");
    return v;
}

static uint64_t disk_bytes(kcache_store *s)
{
    uint64_t file_bytes, wal_bytes;
    kc_db_disk_usage(&s->db, &file_bytes, &wal_bytes);
    return file_bytes + wal_bytes;
}

/*
 * Empties the WAL into the file. A TRUNCATE checkpoint holds the write lock
 * while it copies the frames and syncs the file; a PASSIVE one first copies
 * them with no lock that writers need, so that the TRUNCATE after has
 * (almost) nothing left to copy and holds the lock only to reset the WAL.
 * Returns the TRUNCATE's SQLite code.
 */
int kc_checkpoint(kcache_store *s)
{
    sqlite3_wal_checkpoint_v2(s->db.conn, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return kc_db_checkpoint(&s->db, KC_HOLD_NS / 1000000u);
}

/* Entries a tight prune deletes per transaction, pages it moves per step. */
#define KC_TIGHT_BATCH 32
#define KC_TIGHT_PAGES 64

/*
 * Hands the free pages back in steps, each its own transaction of at most
 * about KC_HOLD_NS (the step's page count adapts to what the last one
 * took), so that other writers wait for the lock no longer than that. On a
 * disk with no room (s->tight), a few pages a step, each step checkpointed
 * with the WAL truncated, so that no step needs more new space than its own
 * few pages (the reserve, db.h). The file shrinks with each step.
 */
int kc_vacuum_steps(kcache_store *s)
{
    int rc = 0;
    if (s->tight)
        kc_checkpoint(s);
    if (query_int(s, "PRAGMA auto_vacuum", &rc) != 2 || rc)
        return rc;
    int64_t pages = s->tight ? KC_TIGHT_PAGES : 256;
    for (int64_t left = query_int(s, "PRAGMA freelist_count", &rc); !rc && left > 0;) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA incremental_vacuum(%lld)", (long long)pages);
        uint64_t t0 = kc_mono_ns();
        if ((rc = kc_db_begin_write(&s->db)))
            break;
        if ((rc = kc_db_exec(&s->db, sql, "releasing free pages")) || (rc = kc_db_commit(&s->db))) {
            kc_db_rollback(&s->db);
            break;
        }
        uint64_t took = kc_mono_ns() - t0;
        if (s->tight)
            kc_checkpoint(s);
        else if (took < KC_HOLD_NS / 4 && pages < 16384)
            pages *= 2;
        else if (took > KC_HOLD_NS && pages > 16)
            pages /= 2;
        int64_t now = query_int(s, "PRAGMA freelist_count", &rc);
        if (now >= left)
            break; /* no progress: left for the next prune */
        left = now;
    }
    return rc;
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
    if (s->tight)
        return kc_vacuum_steps(s);
    if (query_int(s, "PRAGMA auto_vacuum", &rc) == 2 && !rc) {
        if ((rc = kc_vacuum_steps(s)))
            return rc;
    } else if (!rc && query_int(s, "PRAGMA freelist_count", &rc) > 0 && !rc) {
        if ((rc = kc_db_exec(&s->db, "VACUUM", "compacting the database")))
            return rc;
    }
    /* A checkpoint that found no room to grow the file is a full disk (a tight prune's cue). */
    int ck = kc_checkpoint(s);
    if (!rc && (ck & 0xff) == SQLITE_FULL)
        rc = kc_sqlerr(&s->db, ck, "emptying the WAL");
    return rc;
}

static int count_evictions(kcache_store *s, uint64_t n)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st, KC_STMT_COUNTER_ADD);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, "evictions", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)n);
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "counting evictions");
}

/*
 * Victims of one transaction, taken off the LRU end: how many, the bytes
 * they hold, and the last of them in LRU order (accessed_at, id), which is
 * where the set-based delete stops.
 */
struct batch {
    size_t n;
    uint64_t bytes;
    int64_t cut_at, cut_id;
};

/*
 * The victims of a batch, as one predicate over `entry` (parameters: ?1
 * arch or NULL, ?2 kind or 0, ?3 accessed_before or 0: the filter of
 * KC_STMT_LIST_LRU; ?4 and ?5 the cut). The LRU order is the entry_lru
 * index's, (accessed_at, rowid), so "at or before the cut" is exactly the
 * walk's victims: the filter keeps the others out.
 */
#define KC_VICTIMS                                                                                 \
    "SELECT id FROM entry WHERE (accessed_at < ?4 OR (accessed_at = ?4 AND id <= ?5))"            \
    " AND (?1 IS NULL OR arch = ?1) AND (?2 = 0 OR kind = ?2) AND (?3 = 0 OR accessed_at < ?3)"

/*
 * One statement per table instead of one DELETE per entry (kc_cascade_once, which
 * also keeps the totals and drops inputs and closures nothing refers to any
 * more). Measured (benchmarks/PROFILE-writes.md), set-based deletes alone
 * save only 4% of a prune's instructions: the pages are the cost, not the
 * statements. They stay for what they guarantee: the set chosen, deleted and
 * counted is one set, in one transaction.
 */
struct victims {
    const struct batch *b;
    const kcache_prune_options *o;
    int filtered;
};

static void bind_victims(sqlite3_stmt *st, const void *ctx)
{
    const struct victims *v = ctx;
    if (v->filtered && v->o->arch && *v->o->arch)
        sqlite3_bind_text(st, 1, v->o->arch, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, v->filtered ? (int)v->o->kind : 0);
    sqlite3_bind_int64(st, 3, v->filtered ? v->o->accessed_before : 0);
    sqlite3_bind_int64(st, 4, v->b->cut_at);
    sqlite3_bind_int64(st, 5, v->b->cut_id);
}

static int delete_victims(kcache_store *s, const struct batch *b, const kcache_prune_options *o,
                          int filtered, int64_t *deleted)
{
    const struct victims v = {b, o, filtered};
    return kc_cascade_once(s, KC_VICTIMS, NULL, bind_victims, &v, deleted);
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
    memset(b, 0, sizeof(*b));
    int rc = kc_db_stmt(&s->db, &st, filtered ? KC_STMT_LIST_LRU : KC_STMT_LRU_BATCH);
    if (rc)
        return rc;
    uint64_t want = KC_MIN(count, (uint64_t)(s->tight ? KC_TIGHT_BATCH : KC_EVICT_BATCH));
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
    int src = SQLITE_DONE;
    while (b->n < want && got < bytes && b->bytes < KC_EVICT_BATCH_BYTES &&
           (src = sqlite3_step(st)) == SQLITE_ROW) {
        if (seen++ < skip)
            continue;
        uint64_t n = (uint64_t)sqlite3_column_int64(st, filtered ? 6 : 1);
        b->cut_id = sqlite3_column_int64(st, 0);
        b->cut_at = sqlite3_column_int64(st, filtered ? 9 : 2);
        b->bytes += n;
        got += n + KC_ENTRY_OVERHEAD;
        b->n++;
    }
    sqlite3_reset(st);
    return src == SQLITE_ROW || src == SQLITE_DONE
               ? 0
               : kc_sqlerr(&s->db, src, "choosing what to evict");
}

/*
 * Chooses and deletes one batch in one write transaction, so that what was
 * chosen is what is deleted and counted (another process may put, touch or
 * evict between two transactions). *n is the number of entries deleted.
 */
static int evict_batch(kcache_store *s, const kcache_prune_options *o, int filtered,
                       uint64_t count, uint64_t bytes, uint64_t *n, uint64_t *n_bytes,
                       kcache_prune_result *r)
{
    struct batch b;
    int64_t deleted = 0;
    *n = *n_bytes = 0;
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    if ((rc = fill_batch(s, &b, o, filtered, count, bytes, 0)))
        goto fail;
    if (b.n == 0) {
        kc_db_rollback(&s->db);
        return 0;
    }
    if ((rc = delete_victims(s, &b, o, filtered, &deleted)))
        goto fail;
    /* The walk and the delete see the same rows (one transaction, the write lock held);
     * what is counted is what the delete removed, whatever a damaged index says. */
    /*
     * The freed pages go back afterwards, in steps (kc_vacuum_steps): moving
     * them in this transaction cost 23% fewer instructions
     * (benchmarks/PROFILE-writes.md) but held the lock for as long as the
     * whole batch's pages took to move, while other writers waited.
     */
    if ((rc = count_evictions(s, (uint64_t)deleted)) || (rc = kc_db_commit(&s->db)))
        goto fail;
    r->evicted += (uint64_t)deleted;
    r->evicted_bytes += b.bytes;
    *n = (uint64_t)deleted;
    *n_bytes = b.bytes;
    if (s->tight) /* the frames into the file, the WAL's space back for the next step */
        kc_checkpoint(s);
    return 0;
fail:
    kc_db_rollback(&s->db);
    return rc;
}

/*
 * Evicts until `count` entries or `bytes` bytes are gone or nothing is left.
 * A dry run walks the same order without deleting.
 */
static int evict(kcache_store *s, const kcache_prune_options *o, int filtered, uint64_t count,
                 uint64_t bytes, kcache_prune_result *r)
{
    uint64_t done_n = 0, done_bytes = 0;
    int rc = 0;
    /* Entries per transaction, adapted so that each holds the lock about KC_HOLD_NS at most. */
    uint64_t step = s->tight ? KC_TIGHT_BATCH : 32;
    while (done_n < count && done_bytes < bytes) {
        uint64_t n = 0, n_bytes = 0;
        uint64_t t0 = kc_mono_ns();
        if (o->dry_run) {
            struct batch b;
            if ((rc = fill_batch(s, &b, o, filtered, count - done_n, bytes - done_bytes, done_n)))
                break;
            n = b.n;
            n_bytes = b.bytes;
            r->evicted += n;
            r->evicted_bytes += n_bytes;
        } else if ((rc = evict_batch(s, o, filtered, KC_MIN(count - done_n, step),
                                     bytes - done_bytes, &n, &n_bytes, r))) {
            break;
        }
        uint64_t took = kc_mono_ns() - t0;
        if (!s->tight && took < KC_HOLD_NS / 4 && step < KC_EVICT_BATCH)
            step *= 2;
        else if (took > KC_HOLD_NS && step > 1)
            step /= 2;
        if (n == 0)
            break;
        done_n += n;
        done_bytes += n_bytes + n * KC_ENTRY_OVERHEAD;
    }
    return rc;
}

/* The bytes of the pages in use: what the file shrinks to once the free
 * pages and the WAL are handed back. */
static uint64_t live_bytes(kcache_store *s, int *rc)
{
    int64_t page_size = query_int(s, "PRAGMA page_size", rc);
    int64_t pages = *rc ? 0 : query_int(s, "PRAGMA page_count", rc);
    int64_t free_pages = *rc ? 0 : query_int(s, "PRAGMA freelist_count", rc);
    return *rc || pages < free_pages ? 0 : (uint64_t)((pages - free_pages) * page_size);
}

/* Evicts LRU entries until the files on disk fit in target bytes. */
static int fit_size(kcache_store *s, const kcache_prune_options *o, uint64_t target,
                    kcache_prune_result *r, int *released)
{
    int rc = 0;
    if (o->dry_run) {
        /*
         * As the real prune below: free pages and the WAL go back first, and
         * only what is still over the target is evicted. Measuring database +
         * WAL instead predicted evictions a prune then did not make.
         */
        if (disk_bytes(s) <= target)
            return 0;
        *released = 1;
        uint64_t live = live_bytes(s, &rc);
        uint64_t gone = r->evicted_bytes + r->evicted * KC_ENTRY_OVERHEAD;
        live = live > gone ? live - gone : 0;
        return rc || live <= target ? rc : evict(s, o, 0, UINT64_MAX, live - target, r);
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

/*
 * Deletes victims from the LRU end inside the caller's transaction until
 * `count` entries or `bytes` bytes are gone (a dry run, rolled back after).
 */
static int delete_in_txn(kcache_store *s, const kcache_prune_options *o, int filtered,
                         uint64_t count, uint64_t bytes, kcache_prune_result *r)
{
    uint64_t done_n = 0, done_bytes = 0;
    while (done_n < count && done_bytes < bytes) {
        struct batch b;
        int64_t deleted = 0;
        int rc = fill_batch(s, &b, o, filtered, count - done_n, bytes - done_bytes, 0);
        if (!rc && b.n)
            rc = delete_victims(s, &b, o, filtered, &deleted);
        if (rc)
            return rc;
        if (deleted <= 0)
            break;
        r->evicted += (uint64_t)deleted;
        r->evicted_bytes += b.bytes;
        done_n += (uint64_t)deleted;
        done_bytes += b.bytes + (uint64_t)deleted * KC_ENTRY_OVERHEAD;
    }
    return 0;
}

/*
 * A dry run does what the prune would, in one write transaction that is
 * rolled back: the same victims, and the pages they free measured rather
 * than estimated from their sizes (a leaf page half emptied frees nothing,
 * and a WAL or free pages go back before anything is evicted). Estimates
 * from sizes said "would evict 25" where the prune then evicted none.
 */
static int prune_dry_locked(kcache_store *s, const kcache_prune_options *o, kcache_prune_result *r)
{
    int rc;
    if ((rc = kc_db_begin_write(&s->db)))
        return rc;
    if (o->accessed_before && (rc = delete_in_txn(s, o, 1, UINT64_MAX, UINT64_MAX, r)))
        goto out;
    if (o->max_entries) {
        int64_t entries = query_int(s, "SELECT entries FROM totals", &rc);
        if (rc || (entries > 0 && (uint64_t)entries > o->max_entries &&
                   (rc = delete_in_txn(s, o, 0, (uint64_t)entries - o->max_entries, UINT64_MAX,
                                       r))))
            goto out;
    }
    uint64_t target = o->max_size ? o->max_size : s->max_size;
    int released = r->evicted > 0;
    if (target != UINT64_MAX && r->disk_before > target) {
        released = 1;
        for (int round = 0; round < 64; round++) {
            uint64_t live = live_bytes(s, &rc), before = r->evicted;
            if (rc || live <= target ||
                (rc = delete_in_txn(s, o, 0, UINT64_MAX, live - target, r)) ||
                r->evicted == before)
                break;
        }
    }
    r->disk_after = released ? live_bytes(s, &rc) : r->disk_before;
out:
    kc_db_rollback(&s->db);
    return rc;
}

static int prune_locked(kcache_store *s, const kcache_prune_options *o, kcache_prune_result *r)
{
    int rc;
    unsigned version = r->version;
    memset(r, 0, sizeof(*r));
    r->version = version;
    r->disk_before = disk_bytes(s);
    if (!o->dry_run && (rc = kc_db_writable(&s->db)))
        return rc;
    if ((rc = kc_flush_locked(s, !o->dry_run)))
        return rc;
    /* Where the store cannot take a write lock (read-only), an estimate from sizes. */
    if (o->dry_run && kc_db_writable(&s->db) == 0) {
        kcache_prune_result measured = *r;
        if ((rc = prune_dry_locked(s, o, &measured)) == 0) {
            *r = measured;
            return 0;
        }
        if (rc != KCACHE_EBUSY)
            return rc;
    }
    if (o->accessed_before && (rc = evict(s, o, 1, UINT64_MAX, UINT64_MAX, r)))
        return rc;
    if (o->max_entries) {
        int64_t entries = query_int(s, "SELECT entries FROM totals", &rc);
        if (rc)
            return rc;
        if (o->dry_run)
            entries -= (int64_t)r->evicted; /* the totals do not know about a dry run */
        if (entries > 0 && (uint64_t)entries > o->max_entries &&
            (rc = evict(s, o, 0, (uint64_t)entries - o->max_entries, UINT64_MAX, r)))
            return rc;
    }
    uint64_t target = o->max_size ? o->max_size : s->max_size;
    int released = 0;
    if (target != UINT64_MAX && (rc = fit_size(s, o, target, r, &released)))
        return rc;
    if (!o->dry_run && r->evicted && (rc = release_space(s)))
        return rc;
    if (o->dry_run) {
        /* An estimate from what the entries take: the pages they free are
         * handed back by a real prune, which this one does not do. */
        uint64_t freed = r->evicted_bytes + r->evicted * KC_ENTRY_OVERHEAD;
        uint64_t base = r->disk_before;
        if (r->evicted || released) /* a real prune hands back free pages and the WAL */
            base = live_bytes(s, &rc);
        if (rc)
            return rc;
        r->disk_after = freed < base ? base - freed : 0;
    } else {
        r->disk_after = disk_bytes(s);
    }
    return 0;
}

/*
 * A prune rewrites every page it moves; with SQLite's default cache (2 MB)
 * the transaction spills pages to the WAL before it commits and writes
 * some of them twice. A larger cache for the prune alone (given back after)
 * cost it 9% fewer instructions (benchmarks/PROFILE-writes.md).
 */
#define KC_PRUNE_CACHE_KIB 32768

int kc_prune_locked(kcache_store *s, const kcache_prune_options *o, kcache_prune_result *r)
{
    int rc;
    int64_t cache = query_int(s, "PRAGMA cache_size", &rc);
    char sql[64];
    if (!rc && !o->dry_run) {
        snprintf(sql, sizeof(sql), "PRAGMA cache_size = -%d", KC_PRUNE_CACHE_KIB);
        sqlite3_exec(s->db.conn, sql, NULL, NULL, NULL); /* only a speed-up: no message */
    }
    /*
     * SQLite as distributions build it zeroes every freed page (secure_delete
     * on), which writes each evicted artifact's pages to the WAL once more: a
     * full disk's 32-entry step of 64 KiB entries needed over 1 MiB of WAL,
     * 73 KiB with FAST, which zeroes only what costs no extra write.
     */
    int src;
    int secure = (int)query_int(s, "PRAGMA secure_delete", &src);
    if (!src && !o->dry_run)
        sqlite3_exec(s->db.conn, "PRAGMA secure_delete = FAST", NULL, NULL, NULL);
    int prc = prune_locked(s, o, r);
    if (!s->db.conn || o->dry_run)
        return prc; /* a recovery that could not reopen leaves no connection to restore */
    if (!rc) {
        snprintf(sql, sizeof(sql), "PRAGMA cache_size = %lld", (long long)cache);
        sqlite3_exec(s->db.conn, sql, NULL, NULL, NULL);
    }
    if (!src) {
        snprintf(sql, sizeof(sql), "PRAGMA secure_delete = %d", secure);
        sqlite3_exec(s->db.conn, sql, NULL, NULL, NULL);
    }
    return prc;
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
        kc_log(s, KCACHE_LOG_WARNING, "could not bring %s under its cap: %s", s->db.path,
               s->db.errmsg);
    /* The put itself succeeded; a prune that could not finish is retried by the next one. */
    return 0;
}

KCACHE_API int kcache_store_prune(kcache_prune_result *out, kcache_store *store,
                                  const kcache_prune_options *options)
{
    static const kcache_prune_options defaults = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result ignored = KCACHE_PRUNE_RESULT_INIT;
    if (!store ||
        kc_check_version(store, options, "kcache_prune_options", KCACHE_PRUNE_OPTIONS_VERSION) ||
        kc_check_version(store, out, "kcache_prune_result", KCACHE_PRUNE_RESULT_VERSION))
        return KCACHE_EINVAL;
    if (!options)
        options = &defaults;
    if (options->kind && !kcache_kind_name(options->kind))
        return kc_err_locking(store, KCACHE_EINVAL, "kcache_store_prune: bad kind %d",
                              (int)options->kind);
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, kc_prune_locked(store, options, out ? out : &ignored));
    /*
     * Evicting writes too (to the WAL, then the file): on a disk full to the
     * last byte, the store gives up its reserve (db.h) and prunes again in
     * steps small enough to fit in it, the WAL emptied between them.
     */
    if (rc == KCACHE_EFULL && !options->dry_run) {
        kc_db_reserve_release(&store->db);
        store->tight = 1;
        KC_WITH_RECOVERY(store, rc, kc_prune_locked(store, options, out ? out : &ignored));
        store->tight = 0;
    }
    if (rc == KCACHE_EFULL)
        kc_err(store, rc, "disk full while evicting from %s: recording an eviction needs free "
               "space too; free some on that disk (a few MiB), then prune again", store->db.path);
    kc_unlock(store);
    return rc;
}

/*
 * A file with incremental auto_vacuum (every file kcache made since it
 * existed) hands its free pages back in steps (kc_vacuum_steps): a VACUUM
 * rewrites the whole file in one transaction and held the write lock for
 * seconds (4.9 s on a busy cache) while every other writer waited. Only a
 * file without it is rebuilt, once, which turns it on.
 */
static int vacuum_locked(kcache_store *s)
{
    int rc = kc_flush_locked(s, 1);
    char why[KC_ERRMSG_SIZE];
    /* What a rebuild would have found on its way through every page (read, no lock held):
     * a damaged file is set aside and begun anew (KC_WITH_RECOVERY), nothing left to rm. */
    if (!rc && kc_db_quick_check(&s->db, why, sizeof(why)) == 0)
        return kc_db_err(&s->db, KCACHE_ECORRUPT, "%s is damaged: %s", s->db.path, why);
    if (!rc && query_int(s, "PRAGMA auto_vacuum", &rc) == 2 && !rc)
        rc = kc_vacuum_steps(s);
    else if (!rc)
        rc = kc_db_exec(&s->db, "VACUUM", "compacting the database");
    if (!rc)
        kc_checkpoint(s);
    return rc;
}

KCACHE_API int kcache_store_vacuum(kcache_store *store)
{
    if (!store)
        return KCACHE_EINVAL;
    pthread_mutex_lock(&store->lock);
    int rc = store->db.conn ? kc_db_writable(&store->db) : kc_err(store, KCACHE_EIO, "no database");
    /* A damaged file is set aside (recovery) and the new one compacted: nothing left to rm. */
    if (!rc)
        KC_WITH_RECOVERY(store, rc, vacuum_locked(store));
    kc_unlock(store);
    return rc;
}

/* SQLite's quick_check: whether the emptied file is sound, or why not. */
static int file_sound(kcache_store *s, char *why, size_t why_size)
{
    return kc_db_quick_check(&s->db, why, why_size) == 1;
}

/*
 * Clearing, in steps of about KC_HOLD_NS each, so that other writers wait
 * no longer than that whatever the size of the cache: the entries there
 * when the clear began (ids up to the largest then), a batch a
 * transaction, each with what goes with it (kc_cascade_run) and counted; then
 * what no entry holds any more (manifests and their closures, shared rows
 * left by damage, leases), a batch a statement. An entry another process
 * puts meanwhile may stay: it is newer than the clear.
 */
#define KC_CLEAR_VICTIMS "SELECT id FROM entry WHERE id <= ?1 ORDER BY id LIMIT ?2"

static const char *const clear_rest_sql[] = {
    "DELETE FROM manifest WHERE (base, key) IN (SELECT base, key FROM manifest LIMIT ?1)",
    "DELETE FROM closure WHERE id IN (SELECT id FROM closure c WHERE NOT EXISTS"
    " (SELECT 1 FROM manifest m WHERE m.closure_id = c.id) LIMIT ?1)",
    "DELETE FROM closure_part WHERE (closure_id, seq) IN (SELECT closure_id, seq FROM"
    " closure_part WHERE closure_id NOT IN (SELECT id FROM closure) LIMIT ?1)",
    "DELETE FROM closure_chunk WHERE id IN (SELECT id FROM closure_chunk WHERE id NOT IN"
    " (SELECT chunk_id FROM closure_part) LIMIT ?1)",
    "DELETE FROM input_list WHERE id IN (SELECT id FROM input_list WHERE id NOT IN"
    " (SELECT inputs_id FROM entry_info WHERE inputs_id NOT NULL) LIMIT ?1)",
    "DELETE FROM input_list_item WHERE (list_id, seq) IN (SELECT list_id, seq FROM"
    " input_list_item WHERE list_id NOT IN (SELECT id FROM input_list) LIMIT ?1)",
    "DELETE FROM header_list WHERE id IN (SELECT id FROM header_list WHERE id NOT IN"
    " (SELECT headers_id FROM entry_info WHERE headers_id NOT NULL) LIMIT ?1)",
    "DELETE FROM input WHERE id IN (SELECT id FROM input WHERE id NOT IN"
    " (SELECT input_id FROM entry_input) AND id NOT IN (SELECT input_id FROM input_list_item)"
    " LIMIT ?1)",
    "DELETE FROM entry_info WHERE id IN (SELECT id FROM entry_info WHERE id NOT IN"
    " (SELECT id FROM entry) LIMIT ?1)",
    "DELETE FROM artifact WHERE id IN (SELECT id FROM artifact WHERE id NOT IN"
    " (SELECT id FROM entry) LIMIT ?1)",
    "DELETE FROM entry_input WHERE (entry_id, seq) IN (SELECT entry_id, seq FROM entry_input"
    " WHERE entry_id NOT IN (SELECT id FROM entry) LIMIT ?1)",
    "DELETE FROM lease WHERE key IN (SELECT key FROM lease LIMIT ?1)",
};

struct clear_victims {
    int64_t upto, n;
};

static void bind_clear(sqlite3_stmt *st, const void *ctx)
{
    const struct clear_victims *v = ctx;
    sqlite3_bind_int64(st, 1, v->upto);
    sqlite3_bind_int64(st, 2, v->n);
}

/* Rows per step: doubled while a step takes under a quarter of KC_HOLD_NS, halved over it. */
static int64_t adapt_step(int64_t step, uint64_t took, int64_t most)
{
    if (took < KC_HOLD_NS / 4 && step < most)
        return step * 2;
    if (took > KC_HOLD_NS && step > 1)
        return step / 2;
    return step;
}

/* One step of the entries: *deleted of them, counted as cleared. */
static int clear_entries_step(kcache_store *s, struct kc_cascade *c, const struct clear_victims *v,
                              int64_t *deleted)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    if ((rc = kc_cascade_run(s, c, bind_clear, v, deleted)) ||
        (*deleted && (rc = kc_counter_write(s, "entries_cleared", (uint64_t)*deleted))) ||
        (rc = kc_db_commit(&s->db)))
        kc_db_rollback(&s->db);
    return rc;
}

/* One statement of clear_rest_sql over n rows at most, in a transaction; *changed: rows. */
static int clear_rest_step(kcache_store *s, const char *sql, int64_t n, int64_t *changed)
{
    sqlite3_stmt *st = NULL;
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    int src = sqlite3_prepare_v2(s->db.conn, sql, -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, n);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    *changed = src == SQLITE_DONE ? sqlite3_changes(s->db.conn) : 0;
    if (src != SQLITE_DONE)
        rc = kc_sqlerr(&s->db, src, "clearing the cache");
    if (rc || (rc = kc_db_commit(&s->db)))
        kc_db_rollback(&s->db);
    return rc;
}

static int clear_steps(kcache_store *s)
{
    int rc;
    struct clear_victims v = {query_int(s, "SELECT coalesce(max(id), 0) FROM entry", &rc), 16};
    if (rc)
        return rc;
    struct kc_cascade c;
    if ((rc = kc_cascade_prepare(s, &c, KC_CLEAR_VICTIMS, NULL)))
        return rc;
    for (int64_t deleted = 1; !rc && deleted > 0;) {
        uint64_t t0 = kc_mono_ns();
        rc = clear_entries_step(s, &c, &v, &deleted);
        v.n = adapt_step(v.n, kc_mono_ns() - t0, 4096);
    }
    kc_cascade_finalize(&c);
    for (size_t i = 0; !rc && i < KC_ARRAY_SIZE(clear_rest_sql); i++) {
        int64_t n = 256;
        for (int64_t changed = 1; !rc && changed > 0;) {
            uint64_t t0 = kc_mono_ns();
            rc = clear_rest_step(s, clear_rest_sql[i], n, &changed);
            n = adapt_step(n, kc_mono_ns() - t0, 65536);
        }
    }
    /* No entry left: the totals say so, whatever a damaged file said before. */
    if (!rc)
        rc = kc_db_write_sql(&s->db, "UPDATE totals SET entries = 0, raw_bytes = 0, stored_bytes = 0"
                             " WHERE NOT EXISTS (SELECT 1 FROM entry)", "clearing the cache");
    return rc;
}

KCACHE_API int kcache_store_clear(kcache_store *store)
{
    if (!store)
        return KCACHE_EINVAL;
    pthread_mutex_lock(&store->lock);
    /* Freed pages not zeroed one by one (kc_prune_locked() says why): the lock is held less. */
    if (store->db.conn)
        sqlite3_exec(store->db.conn, "PRAGMA secure_delete = FAST", NULL, NULL, NULL);
    int rc = store->db.conn ? kc_db_writable(&store->db)
                            : kc_err(store, KCACHE_EIO, "the cache could not be reopened");
    if (!rc)
        rc = kc_db_classify_failure(&store->db, clear_steps(store));
    /*
     * The user asked for an empty cache: a file found damaged on the way (or
     * still damaged once emptied) is replaced by a new one at once, even
     * while other processes use it (they keep the old file until they
     * reopen). No state is left that needs rm by hand.
     */
    char why[KC_ERRMSG_SIZE] = "";
    if (rc == KCACHE_ECORRUPT)
        snprintf(why, sizeof(why), "%s", store->db.errmsg);
    else if (!rc && !file_sound(store, why, sizeof(why)))
        rc = KCACHE_ECORRUPT;
    if (rc == KCACHE_ECORRUPT && !(rc = kc_db_replace(&store->db, why)))
        store->pending_corrupt++;
    /* No room for the deletes' WAL: the file is kcache's own, removed and begun anew. */
    if (rc == KCACHE_EFULL && !(rc = kc_db_start_over(&store->db)))
        kc_log(store, KCACHE_LOG_INFO, "%s had no room to record deletes; removed it and "
               "started an empty cache", store->db.path);
    if (!rc) {
        store->n_touches = 0;
        rc = release_space(store);
    }
    kc_unlock(store);
    return rc;
}

/*
 * Deleting entries. What goes with an entry, and the totals, are written by
 * the statement that deletes it rather than by triggers
 * (schema/006_no_triggers.sql).
 *
 * Every open parses every trigger of the schema, whatever the process does
 * next: the five triggers were half of the schema's parse, 0.54 M of the
 * 2.52 M instructions of a whole `kcache compile` hit (callgrind). So the
 * few statements that delete entries say themselves what goes with them, as
 * sets: the victims are one SELECT of entry ids (with its parameters), and
 * each statement below takes them by that SELECT, children first, the totals
 * before the rows they count are gone. An input, a shared list or a
 * closure goes with the last entry (or list, or manifest) that refers to
 * it. A put adds to the totals in kc_put_rows.
 */
/* The input lists only the victims refer to. */
#define GOING_LISTS                                                                                \
    "SELECT f.inputs_id FROM entry_info f WHERE f.id IN (@V) AND f.inputs_id NOT NULL"           \
    " AND NOT EXISTS (SELECT 1 FROM entry_info g WHERE g.inputs_id = f.inputs_id"                \
    " AND g.id NOT IN (@V))"

/* The closures only the victims' manifests refer to. */
#define GOING_CLOSURES                                                                             \
    "SELECT m.closure_id FROM manifest m WHERE m.key IN (SELECT key FROM entry WHERE id IN (@V))" \
    " AND NOT EXISTS (SELECT 1 FROM manifest x WHERE x.closure_id = m.closure_id"                \
    " AND x.key NOT IN (SELECT key FROM entry WHERE id IN (@V)))"

static const char *const cascade_sql[KC_CASCADE_STEPS] = {
    "UPDATE totals SET entries = entries - (SELECT count(*) FROM entry WHERE id IN (@V)),"
    " raw_bytes = raw_bytes - (SELECT coalesce(sum(raw_size), 0) FROM entry WHERE id IN (@V)),"
    " stored_bytes = stored_bytes -"
    " (SELECT coalesce(sum(stored_size), 0) FROM entry WHERE id IN (@V))",
    /* Every entry removed, whatever the reason, counted with the removal (the
     * stress run's books: tests/cli/test_busy.py). */
    "INSERT INTO counter (name, value) SELECT 'entries_removed', count(*) FROM entry"
    " WHERE id IN (@V) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    "DELETE FROM artifact WHERE id IN (@V)",
    /* An input goes when no entry left and no input list left refers to it. */
    "DELETE FROM input WHERE id IN (SELECT input_id FROM entry_input WHERE entry_id IN (@V)"
    " UNION SELECT input_id FROM input_list_item WHERE list_id IN (" GOING_LISTS "))"
    " AND NOT EXISTS (SELECT 1 FROM entry_input x WHERE x.input_id = input.id"
    " AND x.entry_id NOT IN (@V)) AND NOT EXISTS (SELECT 1 FROM input_list_item y"
    " WHERE y.input_id = input.id AND y.list_id NOT IN (" GOING_LISTS "))",
    "DELETE FROM input_list_item WHERE list_id IN (" GOING_LISTS ")",
    "DELETE FROM input_list WHERE id IN (" GOING_LISTS ")",
    "DELETE FROM header_list WHERE id IN (SELECT headers_id FROM entry_info WHERE id IN (@V))"
    " AND NOT EXISTS (SELECT 1 FROM entry_info g WHERE g.headers_id = header_list.id"
    " AND g.id NOT IN (@V))",
    /* After the lists: they are found through the victims' rows. */
    "DELETE FROM entry_info WHERE id IN (@V)",
    "DELETE FROM entry_input WHERE entry_id IN (@V)",
    /* A closure's chunks no other closure holds, its parts, then the closure itself. */
    "DELETE FROM closure_chunk WHERE id IN (SELECT chunk_id FROM closure_part WHERE closure_id IN"
    " (" GOING_CLOSURES ")) AND NOT EXISTS (SELECT 1 FROM closure_part p WHERE"
    " p.chunk_id = closure_chunk.id AND p.closure_id NOT IN (" GOING_CLOSURES "))",
    "DELETE FROM closure_part WHERE closure_id IN (" GOING_CLOSURES ")",
    "DELETE FROM closure WHERE id IN (" GOING_CLOSURES ")",
    "DELETE FROM manifest WHERE key IN (SELECT key FROM entry WHERE id IN (@V))",
    "DELETE FROM entry WHERE @D",
};

/* sql with every @V replaced by victims and @D by where (constant SQL of ours, never user
 * input). */
static char *expand(const char *sql, const char *victims, const char *where)
{
    size_t n = 0, vn = strlen(victims), wn = strlen(where);
    for (const char *p = sql; (p = strchr(p, '@')); p++)
        n++;
    char *out = kc_malloc(strlen(sql) + n * (vn + wn) + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = sql; *p;) {
        if (p[0] == '@' && (p[1] == 'V' || p[1] == 'D')) {
            const char *with = p[1] == 'V' ? victims : where;
            size_t wl = p[1] == 'V' ? vn : wn;
            memcpy(o, with, wl);
            o += wl;
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

int kc_cascade_prepare(kcache_store *s, struct kc_cascade *c, const char *victims,
                       const char *where)
{
    memset(c, 0, sizeof(*c));
    char in_victims[512];
    if (!where) {
        snprintf(in_victims, sizeof(in_victims), "id IN (%s)", victims);
        where = in_victims;
    }
    for (int i = 0; i < KC_CASCADE_STEPS; i++) {
        char *sql = expand(cascade_sql[i], victims, where);
        if (!sql) {
            kc_cascade_finalize(c);
            return kc_err(s, KCACHE_ENOMEM, "out of memory");
        }
        int src = sqlite3_prepare_v2(s->db.conn, sql, -1, &c->st[i], NULL);
        free(sql);
        if (src != SQLITE_OK) {
            kc_cascade_finalize(c);
            return kc_sqlerr(&s->db, src, "preparing a statement that deletes entries");
        }
    }
    return 0;
}

int kc_cascade_run(kcache_store *s, struct kc_cascade *c, kc_cascade_bind_fn bind,
                   const void *ctx, int64_t *deleted)
{
    for (int i = 0; i < KC_CASCADE_STEPS; i++) {
        sqlite3_stmt *st = c->st[i];
        bind(st, ctx);
        int src = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        if (src != SQLITE_DONE)
            return kc_sqlerr(&s->db, src, "deleting entries");
    }
    if (deleted)
        *deleted = sqlite3_changes(s->db.conn); /* the last statement's: entries */
    return 0;
}

void kc_cascade_finalize(struct kc_cascade *c)
{
    for (int i = 0; i < KC_CASCADE_STEPS; i++) {
        sqlite3_finalize(c->st[i]);
        c->st[i] = NULL;
    }
}

int kc_cascade_once(kcache_store *s, const char *victims, const char *where,
                    kc_cascade_bind_fn bind, const void *ctx, int64_t *deleted)
{
    struct kc_cascade c;
    int rc = kc_cascade_prepare(s, &c, victims, where);
    if (!rc)
        rc = kc_cascade_run(s, &c, bind, ctx, deleted);
    kc_cascade_finalize(&c);
    return rc;
}

static void bind_key(sqlite3_stmt *st, const void *ctx)
{
    sqlite3_bind_blob(st, 1, ctx, KCACHE_KEY_SIZE, SQLITE_STATIC);
}

int kc_delete_key(kcache_store *s, const kcache_key *key, int64_t *deleted)
{
    *deleted = 0;
    /* Most puts replace nothing: one lookup before preparing the whole cascade. */
    sqlite3_stmt *q;
    int src = kc_step_by_key(&q, s, "SELECT 1 FROM entry WHERE key = ?1", key);
    sqlite3_finalize(q);
    if (src == SQLITE_DONE)
        return 0;
    if (src != SQLITE_ROW)
        return kc_sqlerr(&s->db, src, "preparing a statement that deletes an entry");
    /* The row itself by its key, as the lookup found it: a damaged key index may
     * lead to a row of another key, which must go with it (store.c, get). */
    return kc_cascade_once(s, "SELECT id FROM entry WHERE key = ?1", "key = ?1", bind_key,
                           key->bytes, deleted);
}

int kc_closures_collect(kcache_store *s, const char *sql_ids, const kcache_key *base,
                        int64_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    size_t cap = 0;
    int src = sqlite3_prepare_v2(s->db.conn, sql_ids, -1, &q, NULL);
    if (src == SQLITE_OK)
        sqlite3_bind_blob(q, 1, base->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    while (src == SQLITE_OK && (src = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t *grown = kc_grow(*ids, &cap, *n, sizeof(*grown), 8);
        if (!grown) {
            sqlite3_finalize(q);
            return kc_err(s, KCACHE_ENOMEM, "out of memory");
        }
        *ids = grown;
        (*ids)[(*n)++] = sqlite3_column_int64(q, 0);
        src = SQLITE_OK;
    }
    sqlite3_finalize(q);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "reading include closures");
}

int kc_closures_drop_unused(kcache_store *s, const int64_t *ids, size_t n)
{
    if (!n)
        return 0;
    /* The closure if unused; then, if it went, its chunks no other closure holds, its parts. */
    static const char *const sql[] = {
        "DELETE FROM closure WHERE id = ?1 AND NOT EXISTS"
        " (SELECT 1 FROM manifest WHERE closure_id = ?1)",
        "DELETE FROM closure_chunk WHERE id IN (SELECT chunk_id FROM closure_part"
        " WHERE closure_id = ?1) AND NOT EXISTS (SELECT 1 FROM closure_part p"
        " WHERE p.chunk_id = closure_chunk.id AND p.closure_id <> ?1)",
        "DELETE FROM closure_part WHERE closure_id = ?1",
    };
    sqlite3_stmt *q[KC_ARRAY_SIZE(sql)] = {NULL};
    int src = SQLITE_OK;
    for (size_t k = 0; src == SQLITE_OK && k < KC_ARRAY_SIZE(sql); k++)
        src = sqlite3_prepare_v2(s->db.conn, sql[k], -1, &q[k], NULL);
    for (size_t i = 0; src == SQLITE_OK && i < n; i++) {
        for (size_t k = 0; src == SQLITE_OK && k < KC_ARRAY_SIZE(sql); k++) {
            sqlite3_bind_int64(q[k], 1, ids[i]);
            src = sqlite3_step(q[k]);
            sqlite3_reset(q[k]);
            if (src == SQLITE_DONE)
                src = k == 0 && sqlite3_changes(s->db.conn) == 0 ? SQLITE_DONE : SQLITE_OK;
        }
        if (src == SQLITE_DONE) /* still in use */
            src = SQLITE_OK;
    }
    for (size_t k = 0; k < KC_ARRAY_SIZE(sql); k++)
        sqlite3_finalize(q[k]);
    return src == SQLITE_OK ? 0 : kc_sqlerr(&s->db, src, "dropping include closures");
}
