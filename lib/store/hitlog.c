/*
 * Hits: pending in the handle, recorded in PATH-hits without a write
 * transaction, and taken into the database by the next one.
 *
 * Hits are recorded without a write transaction (doc/design.md, "A hit
 * writes nothing to the database").
 *
 * A process that opens the cache, hits and closes used to end with a write
 * transaction for its one touch: a WAL frame per page it changed, the write
 * lock, and a WAL index the next process rebuilt. Now a handle whose pending
 * work is only hits (touches, hit/miss counts and the named counts of the
 * layers above, such as a hit through a remembered closure) appends them, as
 * fixed-size records, to PATH-hits, and the next write transaction of any handle on the
 * cache (a put, a delete, a flush, a prune, a listing) takes them into the
 * database (kc_pending_write). So the LRU order in the database lags the
 * accesses by at most:
 *
 *   - in a handle's memory: KC_TOUCH_BATCH distinct keys or
 *     KC_TOUCH_INTERVAL_NS (below), or until it closes;
 *   - in PATH-hits: until the next write transaction on the cache, and never
 *     past KC_HITLOG_FOLD_AT bytes (about 800 records): the handle whose
 *     append finds the log that long writes it into the database itself, if
 *     the write lock is free at once (else the next writer does).
 *
 * Prune (and a put's eviction) folds the log in the transaction that picks
 * victims, so the eviction order sees every access a closed or flushed
 * handle recorded; stats and a namespace's stats add the log's counts.
 *
 * Records go in with O_APPEND under a shared lock (appends of several
 * processes do not interleave on a local file system); taking the log holds
 * the exclusive lock only while it reads and truncates it, never across a
 * transaction: what was taken waits in the handle's pending lists, which a
 * failed transaction keeps, so nothing is lost when it rolls back. A record
 * carries a check: a torn one (disk full) is skipped and the reader
 * resynchronises on the next. Beyond KC_HITLOG_MAX bytes (nobody has written
 * for a long time, and the lock was never free) appends are dropped: the LRU
 * order gets a little older, nothing else is lost. The log holds no bytes
 * of any artifact, only which keys were hit and when: it can make an entry
 * live longer or shorter in the cache, never change what a hit returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/storeint.h"
#include "util/strmap.h"

#define KC_HITLOG_REC 80
#define KC_HITLOG_MAGIC UINT32_C(0x3148434b) /* "KCH1" */
#define KC_HITLOG_TOUCH 1
#define KC_HITLOG_USAGE 2
#define KC_HITLOG_COUNTER 3
/* The log is written into the database by the appender past this size ... */
#define KC_HITLOG_FOLD_AT (64u * 1024u)
/* ... and appends are dropped past this one. */
#define KC_HITLOG_MAX (1024u * 1024u)

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* FNV-1a: a torn or foreign record, not tampering (the log decides no bytes). */
static uint32_t rec_check(const uint8_t *r)
{
    return (uint32_t)kc_fnv1a(r, 72);
}

/*
 * A record: magic, type, key, architecture or counter name (32 bytes), three
 * integers (touch: accessed_at, hits; usage: hits, misses, saved_ns; counter:
 * the delta), the kind, the check. Native byte order: the file never leaves this machine.
 */
static void rec_seal(uint8_t r[KC_HITLOG_REC], uint32_t type)
{
    put32(r, KC_HITLOG_MAGIC);
    put32(r + 4, type);
    put32(r + 72, rec_check(r));
}

static void path_of(char *out, size_t size, const kcache_store *s)
{
    snprintf(out, size, "%s" KC_DB_HITS, s->db.path);
}

/*
 * The lock is only tried, a few times over a few milliseconds: kcache holds it
 * for one append or one read and truncate, so a lock held longer is a stopped
 * process's, and a hit must not wait for it (what it would have logged goes
 * into the database instead, or is dropped: the stats and LRU order lag).
 */
static int lock_log(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    for (int tries = 0; tries < 50; tries++) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EINTR && errno != EAGAIN && errno != EACCES)
            return -1;
        usleep(200);
    }
    return -1;
}

/*
 * Opens the log only if it is a plain file of this user's: never through a
 * link (O_NOFOLLOW; nor a hard link, which a take would empty), never waiting
 * on a FIFO (O_NONBLOCK), and never a file
 * someone else put beside the cache (lib/db/owner.c: whoever could write it
 * would decide the cache's LRU order and its stats). -1 when it is not one.
 */
static int open_log(const char *path, int flags, struct stat *st)
{
    int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != geteuid() ||
        st->st_nlink != 1) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/*
 * A short write (a full disk) put the first `whole` records in the log whole,
 * and a torn one after them that no reader takes: the caller writes the rest
 * into the database, and those first ones must not go there a second time.
 */
static void forget_written(kcache_store *s, size_t whole)
{
    size_t t = KC_MIN(whole, s->n_touches), u = KC_MIN(whole - t, s->n_usage),
           c = KC_MIN(whole - t - u, s->n_counters);
    if (t) {
        memmove(s->touches, s->touches + t, (s->n_touches - t) * sizeof(*s->touches));
        s->n_touches -= t;
    }
    if (u) {
        memmove(s->usage, s->usage + u, (s->n_usage - u) * sizeof(*s->usage));
        s->n_usage -= u;
    }
    if (c) {
        memmove(s->counters, s->counters + c, (s->n_counters - c) * sizeof(*s->counters));
        s->n_counters -= c;
    }
}

int kc_hitlog_append(kcache_store *s, uint64_t *log_size)
{
    *log_size = 0;
    size_t n = s->n_touches + s->n_usage + s->n_counters;
    if (!n)
        return 0;
    uint8_t *buf = kc_calloc(n, KC_HITLOG_REC);
    if (!buf)
        return KCACHE_ENOMEM;
    uint8_t *r = buf;
    for (size_t i = 0; i < s->n_touches; i++, r += KC_HITLOG_REC) {
        memcpy(r + 8, s->touches[i].key.bytes, KCACHE_KEY_SIZE);
        put64(r + 40, (uint64_t)s->touches[i].accessed_at);
        put64(r + 48, s->touches[i].hits);
        rec_seal(r, KC_HITLOG_TOUCH);
    }
    for (size_t i = 0; i < s->n_usage; i++, r += KC_HITLOG_REC) {
        const kcache_usage *u = &s->usage[i];
        memcpy(r + 8, u->arch, strnlen(u->arch, sizeof(u->arch)));
        put64(r + 40, u->hits);
        put64(r + 48, u->misses);
        put64(r + 56, u->saved_ns);
        put32(r + 64, (uint32_t)u->kind);
        rec_seal(r, KC_HITLOG_USAGE);
    }
    for (size_t i = 0; i < s->n_counters; i++, r += KC_HITLOG_REC) {
        memcpy(r + 8, s->counters[i].name, strnlen(s->counters[i].name, 31));
        put64(r + 40, s->counters[i].value);
        rec_seal(r, KC_HITLOG_COUNTER);
    }
    char path[4200];
    path_of(path, sizeof(path), s);
    int rc = KCACHE_EIO;
    /* Read-write: a read lock needs a descriptor open for reading. */
    struct stat st;
    int fd = open_log(path, O_RDWR | O_APPEND | O_CREAT, &st);
    if (fd >= 0 && lock_log(fd, F_RDLCK) == 0 && fstat(fd, &st) == 0) {
        size_t bytes = n * KC_HITLOG_REC;
        if ((uint64_t)st.st_size + bytes > KC_HITLOG_MAX) {
            rc = 0; /* dropped: see above */
            *log_size = (uint64_t)st.st_size;
        } else {
            ssize_t got = write(fd, buf, bytes);
            if (got == (ssize_t)bytes) {
                rc = 0;
                *log_size = (uint64_t)st.st_size + bytes;
            } else if (got > 0) {
                forget_written(s, (size_t)got / KC_HITLOG_REC);
            }
        }
    }
    if (fd >= 0)
        close(fd); /* the only descriptor of its description: the lock goes with it */
    free(buf);
    return rc;
}

/* Where parse() puts the records: usage (v), named counts (c, when not NULL), touches (into s). */
struct taken {
    kcache_usage **v;
    size_t *n, *cap;
    struct kc_counter_delta **c;
    size_t *n_c, *cap_c;
};

/* Adds every sound record in buf to its list in to; touches only when s is not NULL. */
static int parse(const uint8_t *buf, size_t size, kcache_store *s, const struct taken *to)
{
    size_t i = 0;
    while (i + KC_HITLOG_REC <= size) {
        const uint8_t *r = buf + i;
        uint32_t type = get32(r + 4);
        if (get32(r) != KC_HITLOG_MAGIC || get32(r + 72) != rec_check(r) ||
            (type != KC_HITLOG_TOUCH && type != KC_HITLOG_USAGE && type != KC_HITLOG_COUNTER)) {
            i++; /* a torn record, of any length: look for the next one */
            continue;
        }
        i += KC_HITLOG_REC;
        if (type == KC_HITLOG_USAGE) {
            char arch[33];
            memcpy(arch, r + 8, 32);
            arch[32] = '\0';
            int rc = kc_usage_merge(to->v, to->n, to->cap, arch, (int)get32(r + 64), get64(r + 40),
                                    get64(r + 48), get64(r + 56));
            if (rc)
                return rc;
        } else if (type == KC_HITLOG_COUNTER) {
            char name[32];
            memcpy(name, r + 8, 31);
            name[31] = '\0';
            int rc = to->c && name[0]
                         ? kc_counter_merge(to->c, to->n_c, to->cap_c, name, get64(r + 40))
                         : 0;
            if (rc)
                return rc;
        } else if (s) {
            struct kc_touch *grown = kc_grow(s->touches, &s->cap_touches, s->n_touches,
                                             sizeof(*grown), 64);
            if (!grown)
                return KCACHE_ENOMEM;
            s->touches = grown;
            struct kc_touch *t = &s->touches[s->n_touches++];
            memcpy(t->key.bytes, r + 8, KCACHE_KEY_SIZE);
            t->accessed_at = (int64_t)get64(r + 40);
            t->hits = (uint32_t)get64(r + 48);
        }
    }
    return 0;
}

/* The log's bytes, read under a lock of `type`; *fd_out stays open (and locked) when asked. */
static int read_log(kcache_store *s, int writable, uint8_t **out, size_t *size, int *fd_out)
{
    *out = NULL;
    *size = 0;
    *fd_out = -1;
    char path[4200];
    path_of(path, sizeof(path), s);
    struct stat st;
    int fd = open_log(path, writable ? O_RDWR : O_RDONLY, &st);
    if (fd < 0)
        return errno == ENOENT ? 0 : KCACHE_EIO;
    if (lock_log(fd, writable ? F_WRLCK : F_RDLCK) != 0 || fstat(fd, &st) != 0) {
        close(fd);
        return KCACHE_EIO;
    }
    size_t want = (size_t)KC_MIN((uint64_t)st.st_size, 2ull * KC_HITLOG_MAX);
    uint8_t *buf = want ? kc_malloc(want) : NULL;
    if (want && !buf) {
        close(fd);
        return KCACHE_ENOMEM;
    }
    ssize_t got = want ? pread(fd, buf, want, 0) : 0;
    *out = buf;
    *size = got > 0 ? (size_t)got : 0;
    *fd_out = fd;
    return 0;
}

int kc_hitlog_take(kcache_store *s)
{
    uint8_t *buf;
    size_t size;
    int fd;
    int rc = read_log(s, 1, &buf, &size, &fd);
    if (rc || fd < 0)
        return rc == KCACHE_ENOMEM ? rc : 0; /* no log, or one we may not write: nothing taken */
    struct taken t = {&s->usage, &s->n_usage, &s->cap_usage,
                      &s->counters, &s->n_counters, &s->cap_counters};
    if (size)
        rc = parse(buf, size, s, &t);
    /* Taken (or not sound at all): emptied either way, so it cannot grow past its bound. */
    if (!rc && size && ftruncate(fd, 0) != 0)
        rc = KCACHE_EIO;
    close(fd);
    free(buf);
    return rc;
}

/* The log's records added to t's lists, the log left as it is. */
static int peek(kcache_store *s, const struct taken *t)
{
    uint8_t *buf;
    size_t size;
    int fd;
    int rc = read_log(s, 0, &buf, &size, &fd);
    if (fd >= 0)
        close(fd);
    if (!rc && size)
        rc = parse(buf, size, NULL, t);
    free(buf);
    return rc;
}

int kc_hitlog_usage(kcache_store *s, kcache_usage **v, size_t *n, size_t *cap)
{
    struct taken t = {v, n, cap, NULL, NULL, NULL};
    int rc = peek(s, &t);
    return rc == KCACHE_ENOMEM ? rc : 0;
}

uint64_t kc_hitlog_counter(kcache_store *s, const char *name)
{
    kcache_usage *v = NULL;
    struct kc_counter_delta *c = NULL;
    size_t n = 0, cap = 0, n_c = 0, cap_c = 0;
    struct taken t = {&v, &n, &cap, &c, &n_c, &cap_c};
    int rc = peek(s, &t);
    uint64_t value = 0;
    for (size_t i = 0; !rc && i < n_c; i++)
        if (!strcmp(c[i].name, name))
            value = c[i].value;
    free(v);
    free(c);
    return value;
}

int kc_hitlog_waiting(const kcache_store *s)
{
    char path[4200];
    struct stat st;
    path_of(path, sizeof(path), s);
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
           st.st_nlink == 1 && st.st_size > 0;
}

int kc_hitlog_fold_due(uint64_t log_size)
{
    return log_size >= KC_HITLOG_FOLD_AT;
}

/*
 * Hits and counters wait in memory and are written in batches: a hit must not
 * wait for the write lock (doc/design.md, the store). Hits alone never start a
 * write transaction: they go to PATH-hits (hitlog.c), which the next write
 * transaction takes in.
 */
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
    return !s->pending_corrupt && !s->pending_failures;
}

/*
 * Records what is pending: hits and counts alone are appended to PATH-hits (no write
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
