/*
 * The store's handle and what its files share: the entries' statements, the
 * hits and counts waiting to be written, the put and flush steps. The file
 * itself (connection, recovery, migration) is db/'s, behind db/db.h.
 */
#ifndef KC_STOREINT_H
#define KC_STOREINT_H

#include <pthread.h>
#include <sqlite3.h>
#include <sys/types.h>

#include "db/db.h"
#include "util/codec.h"
#include "util/common.h"
#include "kcache/store.h"
#include "store/storelib.h"

/* Named statements, prepared once per connection. */
enum kc_stmt {
    KC_STMT_GET,
    KC_STMT_GET_INPUTS,
    KC_STMT_DELETE,
    KC_STMT_INSERT_ENTRY,
    KC_STMT_INSERT_INFO,
    KC_STMT_INSERT_ARTIFACT,
    KC_STMT_FIND_INPUT,
    KC_STMT_INSERT_INPUT,
    KC_STMT_INSERT_ENTRY_INPUT,
    KC_STMT_TOUCH,
    KC_STMT_USAGE_ADD,
    KC_STMT_COUNTER_ADD,
    KC_STMT_FIND_PREFIX,
    KC_STMT_LIST_ACCESSED,
    KC_STMT_LIST_CREATED,
    KC_STMT_LIST_SIZE,
    KC_STMT_LIST_HITS,
    KC_STMT_LIST_LRU,
    KC_STMT_LRU_BATCH,
    KC_STMT_TOTALS,
    KC_STMT_COUNTERS,
    KC_STMT_COUNTER_GET,
    KC_STMT_USAGE,
    KC_STMT_MANIFEST_GET,
    KC_STMT_MANIFEST_DELETE,
    KC_STMT_MANIFEST_PUT,
    KC_STMT_MANIFEST_TRIM,
    KC_STMT_CLOSURE_FIND,
    KC_STMT_MANIFEST_GET_V8,
    KC_STMT_CLOSURE_PUT_PARTS,
    KC_STMT_CLOSURE_PART_PUT,
    KC_STMT_CLOSURE_PARTS,
    KC_STMT_CLOSURE_DIGEST,
    KC_STMT_CHUNK_FIND,
    KC_STMT_CHUNK_PUT,
    KC_STMT_GET_V7,
    KC_STMT_GET_INPUTS_V7,
    KC_STMT_HEADERS_FIND,
    KC_STMT_HEADERS_PUT,
    KC_STMT_INPUTS_FIND,
    KC_STMT_INPUTS_PUT,
    KC_STMT_INPUTS_PUT_ITEM,
    KC_STMT_COUNT,
};

/* A named counter's delta waiting to be written (stats.c). */
struct kc_counter_delta {
    char name[32];
    uint64_t value;
};

/* A hit waiting to be written: the entry's key, when, how many. */
struct kc_touch {
    kcache_key key;
    int64_t accessed_at;
    uint32_t hits;
};

/* The SQL of each named statement (store.c), prepared once per connection. */
extern const char *const kc_stmt_sql[KC_STMT_COUNT];

/*
 * A blob that entries share (an include closure, a header list), decoded,
 * by the digest of its bytes: a process that hits many kernels over a few
 * closures (CuPy: ~300 over ~40) decodes each once. The digest names the
 * bytes, so what is kept never goes stale; it is checked against them once,
 * before it first serves a second read (shared.c).
 */
#define KC_DECODED_MAX 64
#define KC_DECODED_BYTES ((size_t)16 << 20)
struct kc_decoded {
    uint8_t digest[KC_DIGEST_SIZE];
    uint8_t *data; /* NULL: a free slot */
    size_t size;
    uint64_t used; /* the store's decoded_tick when last read */
    int checked;   /* the digest was found to be the bytes' */
};

struct kcache_store {
    pthread_mutex_t lock;
    struct kc_db db; /* the file: connection, path, options, message (db/db.h) */
    sqlite3_stmt *stmts[KC_STMT_COUNT]; /* kc_stmt_sql, prepared on db.conn */
    uint64_t max_size;
    uint64_t spilled;   /* failures taken from PATH-lock, written with this flush */
    kc_codec_ctx *codec;
    int compression;    /* what puts encode with (util/codec.h); rows say what they hold */
    kc_buf scratch;
    uint8_t (*chunks_checked)[2][KC_DIGEST_SIZE]; /* closure chunks that held (manifest_store.c) */

    struct kc_touch *touches;
    size_t n_touches, cap_touches;
    kcache_usage *usage; /* counter deltas waiting to be written, per (architecture, kind) */
    size_t n_usage, cap_usage;
    uint64_t pending_corrupt, pending_failures;
    struct kc_counter_delta *counters; /* named counters of other layers (stats.c) */
    size_t n_counters, cap_counters;
    uint64_t last_flush_ns;
    int64_t last_use_ms; /* the latest time of use this handle stamped (kc_use_ms) */
    int hitlog_skip;               /* kc_pending_write leaves PATH-hits alone (hitlog.c) */
    int get_found_damage;          /* the last get deleted a damaged entry */
    int tight;                     /* a prune on a full disk: small steps (prune.c) */
    kcache_key other_host_key;     /* the lease of another host this handle waits for, */
    uint64_t other_host_since_ns;  /* and since when (lease.c) */
    struct kc_decoded decoded[KC_DECODED_MAX]; /* shared.c: what entries share, decoded */
    size_t decoded_bytes;
    uint64_t decoded_tick;
    uint64_t decoded_seen[KC_DECODED_MAX]; /* digests decoded once, not kept (a prefix) */
    size_t n_decoded_seen; /* ever noted: the ring's next slot, modulo */
};

/*
 * The store's message and log are its file's (db/dberr.c): one place for
 * both. kc_log() is said under s->lock and heard once kc_unlock() lets go;
 * kc_log_unlocked() says a line now, from a caller that holds nothing.
 */
#define kc_err(s, code, ...) kc_db_err(&(s)->db, (code), __VA_ARGS__)
#define kc_log(s, level, ...) kc_db_log(&(s)->db, (level), __VA_ARGS__)
void kc_log_unlocked(kcache_store *s, int level, const char *msg);
/*
 * Releases s->lock, then calls the log callback with what was said under
 * it: no callback runs under the lock (it may call the store), and every
 * message goes out from the call that said it. Every unlock of s->lock is
 * this one.
 */
void kc_unlock(kcache_store *s);
/*
 * store.c: prepares sql, binds key to ?1 and steps once, for a statement
 * that reads one row by key. Returns SQLite's code: SQLITE_ROW with the row
 * in *out, SQLITE_DONE when there is none, else the failure (of the prepare
 * or the step). The caller finalizes *out, whatever the code.
 */
int kc_step_by_key(sqlite3_stmt **out, kcache_store *s, const char *sql, const kcache_key *key);
/* kc_err() from a caller that does not hold s->lock: takes it around the write. */
int kc_err_locking(kcache_store *s, int code, const char *fmt, ...) KC_PRINTF(3, 4);
/*
 * The version check of an entry point's public struct (libgit2's
 * GIT_ERROR_CHECK_VERSION): KCACHE_EINVAL, with the message on s (taking the
 * lock), unless versioned, a struct whose first field is its version, is of
 * one this build knows; else 0. type names the struct; NULL passes (none
 * given: the defaults).
 */
int kc_check_version(kcache_store *s, const void *versioned, const char *type, unsigned known);

/*
 * shared.c: the id of the row that find (binding ?1 digest, selecting the id)
 * gives for digest: 1 with *id, 0 when there is none, or a negative code,
 * with finding naming what failed.
 */
int kc_id_by_digest(int64_t *id, kcache_store *s, enum kc_stmt find,
                    const uint8_t digest[KC_DIGEST_SIZE], const char *finding);

/*
 * The id of the row holding these bytes in a table addressed by
 * their digest (input, closure), inserted compressed (through enc) if there
 * was none. find binds ?1 digest; put ?1 digest, ?2 size, ?3 codec, ?4 data.
 * finding and storing name what failed, for the message.
 */
int kc_blob_id(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put, kc_buf *enc,
               const void *data, size_t size, const char *finding, const char *storing);
/*
 * kc_blob_id() stored as KC_CODEC_LZ4C whatever the store's compression:
 * its hash checks every read of the bytes, at a fraction of what their
 * digest costs (closure chunks: manifest_store.c).
 */
int kc_blob_id_checked(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put,
                       kc_buf *enc, const void *data, size_t size, const char *finding,
                       const char *storing);
/* kc_blob_id() for bytes whose digest the caller has. */
int kc_blob_id_of(int64_t *id, kcache_store *s, enum kc_stmt find, enum kc_stmt put, kc_buf *enc,
                  const uint8_t digest[KC_DIGEST_SIZE], const void *data, size_t size,
                  const char *finding, const char *storing);

/* kcache_store_open(), for a file that may be anyone's (a bundle, read-only). */
int kc_store_open_bundle(kcache_store **out, const char *path, char *errbuf, size_t errbuf_size);

/*
 * Runs an operation; if SQLite finds the file damaged, sets it aside, starts
 * a new one and runs the operation again, once. A cache may lose entries; a
 * caller never sees a damaged database as an error that does not go away.
 * With no connection (a reopen failed), rc is KCACHE_EIO.
 */
#define KC_WITH_RECOVERY(s, rc, call)                                                              \
    do {                                                                                           \
        if (!(s)->db.conn) { /* a recovery before could not open a new file */                     \
            (rc) = kc_err((s), KCACHE_EIO, "the cache could not be reopened");                    \
            break;                                                                                 \
        }                                                                                          \
        (rc) = kc_db_classify_failure(&(s)->db, (call));                                          \
        if ((rc) == KCACHE_ECORRUPT && !(s)->db.read_only && !(s)->db.newer_schema &&              \
            kc_db_recover(&(s)->db, (s)->db.errmsg) == 0) {                                        \
            (s)->pending_corrupt++;                                                                \
            (rc) = (call);                                                                         \
        }                                                                                          \
    } while (0)


/*
 * How long maintenance (prune, vacuum, recompress, clear, import) holds the
 * write lock in one transaction before it commits and lets others in: well
 * under the ~100 ms a user's command may wait on a busy cache, whatever the
 * size of the work.
 */
#define KC_HOLD_NS (UINT64_C(50) * 1000000u)

/* Bails out of a public entry point with KCACHE_EINVAL. */
#define KC_CHECK_ARG(s, cond)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return (s) ? kc_err((s), KCACHE_EINVAL, "%s: invalid argument: %s", __func__, #cond)   \
                       : KCACHE_EINVAL;                                                            \
    } while (0)

/* hitlog.c: hits pending in the handle, and the flush. */
void kc_touch(kcache_store *s, const kcache_key *key);
/* A time of use for a put or a hit, later than every one this handle stamped before. */
int64_t kc_use_ms(kcache_store *s);
/* Writes pending touches and counters inside the caller's write transaction. */
int kc_pending_write(kcache_store *s);
void kc_pending_clear(kcache_store *s);
void kc_maybe_flush_locked(kcache_store *s);
/* What is pending recorded now: hits to PATH-hits, anything else in a transaction. */
int kc_record_locked(kcache_store *s, int wait);

/* hitlog.c: hits kept in PATH-hits until the next write transaction takes them in. */
/* Appends the pending touches, usage and named counts; *log_size: the log's size after. */
int kc_hitlog_append(kcache_store *s, uint64_t *log_size);
/* Moves the log's records into s's pending lists and empties it (in a write transaction). */
int kc_hitlog_take(kcache_store *s);
/* Adds the log's hit and miss counts to a usage list, leaving the log as it is. */
int kc_hitlog_usage(kcache_store *s, kcache_usage **v, size_t *n, size_t *cap);
/* What the log holds of the named counter (0 when nothing, or when it cannot be read). */
uint64_t kc_hitlog_counter(kcache_store *s, const char *name);
/* Whether the log holds anything. */
int kc_hitlog_waiting(const kcache_store *s);
/* Whether a log of this size should be taken in now. */
int kc_hitlog_fold_due(uint64_t log_size);

/* entry.c */
struct kc_names {
    const uint8_t *p;
    size_t size, end; /* end: where the pairs end and the check starts (size: none) */
    uint32_t count;
};

struct kc_row {
    kcache_key key;
    int kind;
    const char *arch, *name, *toolchain, *log;
    size_t arch_n, name_n, toolchain_n, log_n;
    struct kc_names names;
    const void *key_material;
    size_t key_material_size;
    size_t raw_size;
    uint64_t stored_size, hits, compile_ns;
    int64_t created_at, accessed_at;
    const void *digest;
    /* the artifact, decoded into the block when present */
    int codec;
    const void *stored;
    size_t stored_n;
    /* decoded inputs, when asked for */
    size_t n_inputs;
    kcache_input *inputs;
    /* the whole key material, when rebuilt from a shared header list (owned) */
    void *material;
};

int kc_names_encode(kc_buf *b, const kcache_entry *e);
int kc_names_check(struct kc_names *v, const void *blob, size_t size);
/* 1 if the log and toolchain are those v's check was made with (or v has none), else 0. */
int kc_names_info_ok(const struct kc_names *v, const char *log, size_t log_n,
                     const char *toolchain, size_t toolchain_n);
/* A new entry (one allocation) from a row, its artifact decoded when present. */
int kc_entry_build(kcache_entry **out, const struct kc_row *r, kc_codec_ctx *codec);
size_t kc_col_text(sqlite3_stmt *st, int col, const char **out);
/* The columns 7 to 12 that get's and list's statements share (digest ... toolchain). */
void kc_row_columns_7_12(struct kc_row *r, sqlite3_stmt *st);
/* Reads the metadata columns shared by get and list (list's column order). */
void kc_row_from_list(struct kc_row *r, sqlite3_stmt *st);

/* stats.c: writes the named deltas inside the caller's write transaction; */
int kc_counters_write(kcache_store *s);
/* ... and one delta, not queued (the store's own counts, kept in its fields). */
int kc_counter_write(kcache_store *s, const char *name, uint64_t value);
/* The pending delta of a named counter (0 when none). */
uint64_t kc_counter_pending(const kcache_store *s, const char *name);
/* Adds delta to the counter name of a list of deltas (a new one when it has none). */
int kc_counter_merge(struct kc_counter_delta **v, size_t *n, size_t *cap, const char *name,
                     uint64_t delta);

/* store.c (damage found by a get), hitlog.c (counting now), put.c (the rest below) */
/* After a write failed for a full disk: the pending counters written alone, at once. */
void kc_count_now_locked(kcache_store *s);
/*
 * Whether the last kcache_store_get() on s missed because the entry was
 * damaged (and deleted), not because it was not there: an entry that
 * another process pruned or cleared meanwhile is not damage.
 */
int kc_store_get_found_damage(kcache_store *s);
/* The store's own put rules (what kcache_store_put() refuses with KCACHE_EINVAL). */
int kc_put_check(kcache_store *s, const kcache_entry *e);
/* kc_put_check(), and that this store takes writes now (message on s). */
int kc_put_allowed(kcache_store *s, const kcache_entry *e);

/* An entry ready to be written: its artifact encoded, its digests, its names. */
struct kc_put_ctx {
    const kcache_entry *e;
    const kc_buf *stored;
    int codec;
    uint8_t digest[KC_DIGEST_SIZE];
    uint8_t stored_digest[KC_DIGEST_SIZE];
    const kc_buf *names;
};

/*
 * Encodes e's artifact with codec and method (the store's `compression`)
 * into *stored, its names into *names, and hashes both (no lock needed:
 * nothing of the store is used). Returns 0, KCACHE_ENOMEM, or KCACHE_EINVAL
 * (names too large); no message.
 */
int kc_put_encode(struct kc_put_ctx *p, const kcache_entry *e, kc_codec_ctx *codec, int method,
                  kc_buf *stored, kc_buf *names);
/*
 * shared.c: the lists entries share. A put stores e's run of header records
 * (format/keyfmt.h) and its run of header inputs once, by digest, and says
 * where they were (*id 0: none); a get puts the header list back into r's
 * key material (columns 19-24 of KC_STMT_GET), checking its digest when
 * check is set. Returns 0, KCACHE_ECORRUPT, KCACHE_ENOTSUP (a codec this
 * build does not know) or KCACHE_ENOMEM.
 */
int kc_shared_headers_put(kcache_store *s, const kcache_entry *e, int64_t *id, size_t *at,
                          size_t *len);
int kc_shared_inputs_put(kcache_store *s, const kcache_entry *e, int64_t *id, size_t *at,
                         size_t *n);
int kc_shared_material(kcache_store *s, struct kc_row *r, sqlite3_stmt *st, int check);
/*
 * Under s->lock. kc_decoded_find(): the bytes of this digest and size as
 * decoded before, or NULL (also when they do not match their digest).
 * kc_decoded_keep(): keeps a copy of data, decoded now, for the next read
 * once the same digest is decoded a second time (a process that reads it
 * once, as the CLI does, copies nothing); best effort: nothing kept when out
 * of memory or too large.
 * kc_decoded_free(): at close.
 */
const uint8_t *kc_decoded_find(kcache_store *s, const uint8_t digest[KC_DIGEST_SIZE], size_t size);
void kc_decoded_keep(kcache_store *s, const uint8_t digest[KC_DIGEST_SIZE], const void *data,
                     size_t size, int checked);
void kc_decoded_free(kcache_store *s);
/*
 * Drops the shared rows no entry refers to: what damage leaves behind once
 * the entries it hit are deleted (verify --fix). Nothing on a store that
 * only reads. Takes the lock.
 */
int kc_shared_sweep(kcache_store *s);
/* The rows of one entry, inside a write transaction the caller holds. */
int kc_put_rows(kcache_store *s, const struct kc_put_ctx *p);
/*
 * Puts in one transaction, all or nothing (ingest.c): begin takes the
 * store's lock and the write lock; add puts one entry with the times given;
 * end commits (commit != 0) or rolls back, and releases both. After a
 * failed begin, nothing is held.
 */
int kc_put_batch_begin(kcache_store *s);
int kc_put_batch_add(kcache_store *s, const kcache_entry *e, int64_t created_at,
                     int64_t accessed_at);
/* kc_put_batch_add() of an entry kc_put_encode() made ready, with no lock held. */
int kc_put_batch_add_encoded(kcache_store *s, const struct kc_put_ctx *p, int64_t created_at,
                             int64_t accessed_at);
int kc_put_batch_end(kcache_store *s, int commit);
int kc_flush_locked(kcache_store *s, int wait);
int kc_usage_add(kcache_store *s, const char *arch, int kind, uint64_t hits, uint64_t misses,
                 uint64_t saved_ns);
/* stats.c: adds the counts to the row of (arch, kind) in the list v of *n, appended if new. */
int kc_usage_merge(kcache_usage **v, size_t *n, size_t *cap, const char *arch, int kind,
                   uint64_t hits, uint64_t misses, uint64_t saved_ns);

/* keyed.c: KCACHE_ECORRUPT, with why in `what`, unless e's kind and arch agree with
 * what its key material says (a caller's entry of that namespace, or not a caller's). */
int kc_keyed_check(const kcache_entry *e, char *what, size_t what_size);

/*
 * manifest_store.c: the closure of q's row, decoded into *out of raw_size
 * bytes: its codec in column codec_col, its data in col, its id in col + 1
 * and its parts in col + 2 (NULL for one stored whole). KCACHE_ECORRUPT
 * where it cannot be.
 */
int kc_closure_decode(kcache_store *s, void **out, sqlite3_stmt *q, int codec_col, int col,
                      size_t raw_size);

/* prune.c: deleting entries with what goes with them, and the totals (no triggers). */
#define KC_CASCADE_STEPS 14
struct kc_cascade {
    sqlite3_stmt *st[KC_CASCADE_STEPS];
};
/* Binds the victims' parameters (the same in every statement). */
typedef void (*kc_cascade_bind_fn)(sqlite3_stmt *st, const void *ctx);
/* Prepares the statements for the entries `victims` selects (SELECT id FROM entry ...);
 * where, the final DELETE's predicate over entry (NULL: id IN (victims)). */
int kc_cascade_prepare(kcache_store *s, struct kc_cascade *c, const char *victims,
                       const char *where);
/* Deletes them, inside the caller's write transaction; *deleted: how many entries. */
int kc_cascade_run(kcache_store *s, struct kc_cascade *c, kc_cascade_bind_fn bind,
                   const void *ctx, int64_t *deleted);
void kc_cascade_finalize(struct kc_cascade *c);
int kc_cascade_once(kcache_store *s, const char *victims, const char *where,
                    kc_cascade_bind_fn bind, const void *ctx, int64_t *deleted);
/* The entry of this key and what goes with it, if there is one. */
int kc_delete_key(kcache_store *s, const kcache_key *key, int64_t *deleted);
/* The closure ids sql_ids selects (?1: a base key), for kc_closures_drop_unused after. */
int kc_closures_collect(kcache_store *s, const char *sql_ids, const kcache_key *base,
                        int64_t **ids, size_t *n);
/* Those of ids that no manifest refers to any more. */
int kc_closures_drop_unused(kcache_store *s, const int64_t *ids, size_t n);

/* prune.c */
int kc_prune_locked(kcache_store *s, const kcache_prune_options *o, kcache_prune_result *r);
int kc_maybe_prune_locked(kcache_store *s);
/* Empties the WAL, holding the write lock only to reset it (prune.c). */
int kc_checkpoint(kcache_store *s);
/* Hands free pages back in transactions of about KC_HOLD_NS each (prune.c). */
int kc_vacuum_steps(kcache_store *s);

#endif
