/*
 * The artifact store: compiled kernels in one SQLite database file.
 *
 * Thread safety: a kcache_store may be shared by any number of threads; calls
 * on one store are serialised by a lock it owns. Any number of processes may
 * open the same file at once. A kcache_entry belongs to the caller that got it
 * and is not tied to the store: it stays valid after kcache_store_close().
 *
 * Durability: the database runs in WAL mode with synchronous=NORMAL. A put
 * that returned 0 survives a crash of the process; a power loss may undo the
 * last few puts, never corrupt the file. Hits do not write: the time of last
 * use and the hit counters are kept in memory and written in batches (when the
 * batch is full, every few seconds of activity, before a prune, and on close).
 * A crash therefore loses at most one batch of those touches, never an entry.
 */
#ifndef KCACHE_STORE_H
#define KCACHE_STORE_H

#include <kcache/config.h>
#include <kcache/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kcache_store kcache_store;

/* Bumped when fields are appended to kcache_store_options. */
#define KCACHE_STORE_OPTIONS_VERSION 3

typedef struct kcache_store_options {
    unsigned version; /* KCACHE_STORE_OPTIONS_VERSION */
    /*
     * Database file. NULL: $KCACHE_PATH, else $KCACHE_DIR/kcache.db, else
     * $XDG_CACHE_HOME/kcache/kcache.db, else ~/.cache/kcache/kcache.db.
     * Directories kcache creates are 0700, the files 0600.
     */
    const char *path;
    /*
     * Size cap in bytes for the database plus its WAL. 0: $KCACHE_MAX_SIZE,
     * else the default (KCACHE_DEFAULT_MAX_SIZE). UINT64_MAX: no cap.
     */
    uint64_t max_size;
    /* Open read-only: gets work, anything that writes returns KCACHE_EREADONLY. */
    int read_only;
    /* How long to wait for another process's lock. 0: KCACHE_DEFAULT_BUSY_TIMEOUT_MS. */
    unsigned busy_timeout_ms;
    /* Optional: where warnings go (the library never prints); called with no
     * lock held, so it may call this store (<kcache/core.h>). */
    kcache_log_fn log;
    void *log_userdata;
    /*
     * Version 2. Open only a cache that exists: when there is no database at
     * the path (or only an empty file), return KCACHE_ENOTFOUND ("no cache yet
     * at PATH") and create nothing, not even the directory. For tools that
     * only look.
     */
    int no_create;
    /*
     * Version 3. How this handle stores what it writes: "lz4" (LZ4 blocks:
     * the fastest hits and puts of the two), "zstd" (zstd frames: a third
     * fewer bytes than lz4, for caches where disk is short), "none". NULL:
     * $KCACHE_COMPRESSION, else compression in kcache.conf, else "lz4".
     * Every entry records its own
     * codec, so a store holds a mix and any handle reads them all; anything
     * else is KCACHE_EINVAL at open, with a message naming the valid ones.
     */
    const char *compression;
} kcache_store_options;

KCACHE_API int kcache_store_options_init(kcache_store_options *out, unsigned version);
#define KCACHE_STORE_OPTIONS_INIT                                                                  \
    KCACHE_VERSIONED_INIT(kcache_store_options, KCACHE_STORE_OPTIONS_VERSION)

/*
 * Opens (creating if needed) the store. On success *out is a new store to be
 * released with kcache_store_close(). On failure *out is NULL and a one-line
 * message saying what to do is written into errbuf (when not NULL): there is
 * no handle yet to keep it.
 *
 * What opening does with what it finds at the path:
 *   - nothing, or an empty file: a new database;
 *   - a kcache database of an older schema: migrated in one transaction;
 *   - a kcache database of a newer schema: opened read-only; writes return
 *     KCACHE_EVERSION ("upgrade kcache");
 *   - a file that is not SQLite, or that SQLite finds corrupt: renamed to
 *     PATH.corrupt-TIMESTAMP (the newest few are kept) and a new database
 *     started; reported through the log callback;
 *   - another application's SQLite database: KCACHE_EFOREIGN, file untouched;
 *   - a directory on a network file system: KCACHE_ENOTSUP (WAL needs one host).
 */
KCACHE_API int kcache_store_open(kcache_store **out, const kcache_store_options *options,
                                 char *errbuf, size_t errbuf_size);

/* Writes pending touches and closes. Accepts NULL. */
KCACHE_API void kcache_store_close(kcache_store *store);

/*
 * The message of the calling thread's last failure on this store, one line,
 * never NULL: threads sharing a store each read their own. Thread-local: the
 * pointer stays valid until this thread's next call on the store.
 */
KCACHE_API const char *kcache_store_errmsg(const kcache_store *store);

/* The database file's path. Owned by the store. */
KCACHE_API const char *kcache_store_path(const kcache_store *store);

/* The cap in bytes (UINT64_MAX: none). */
KCACHE_API uint64_t kcache_store_max_size(const kcache_store *store);

/* Whether writes are refused (read-only open, or a newer schema). */
KCACHE_API int kcache_store_read_only(const kcache_store *store);

/* Schema version of the database file. */
KCACHE_API int kcache_store_schema_version(const kcache_store *store);

/* An input the compile read (a source or a header), kept for recompiling. */
typedef enum kcache_input_role {
    KCACHE_INPUT_SOURCE = 1, /* the main source, named as given to the compiler */
    KCACHE_INPUT_HEADER = 2, /* a header, named by its include spelling */
    KCACHE_INPUT_LINK = 3,   /* an input of a link step (PTX, LTO-IR, CUBIN) */
} kcache_input_role;

typedef struct kcache_input {
    int role;         /* kcache_input_role */
    const char *name; /* NUL-terminated */
    const void *data;
    size_t size;
} kcache_input;

/*
 * One cache entry. kcache_store_put() reads the fields marked "put"; the
 * others are filled in by the store on get and ignored on put. Strings are
 * NUL-terminated UTF-8; a NULL string is read as "".
 */
typedef struct kcache_entry {
    unsigned version;        /* put: KCACHE_ENTRY_VERSION */
    kcache_key key;          /* put */
    kcache_kind kind;        /* put */
    const char *arch;        /* put: normalised target ("sm_90", "compute_90a") */
    const char *name;        /* put: source name as given to the compiler */
    const void *data;        /* put: the artifact */
    size_t size;             /* put */
    const char *log;         /* put: compiler log (warnings) */
    const char *toolchain;   /* put: compiler identity ("nvrtc 13.0 ...") */
    uint64_t compile_ns;     /* put: time the compile took */
    const void *key_material; /* put: the encoded inputs the key was derived from */
    size_t key_material_size;
    size_t n_names;                    /* put: name expressions and their */
    const char *const *name_exprs;     /*      lowered (mangled) names, */
    const char *const *lowered_names;  /*      pairwise */
    size_t n_inputs;                   /* put: optional; get: only with */
    const kcache_input *inputs;        /*      KCACHE_GET_INPUTS */

    uint64_t stored_size;    /* get: bytes the artifact takes in the database */
    uint8_t digest[32];      /* get: BLAKE2b-256 of the artifact */
    int64_t created_at;      /* get: milliseconds since the Unix epoch */
    int64_t accessed_at;     /* get: milliseconds since the Unix epoch */
    uint64_t hits;           /* get: hits recorded so far */
} kcache_entry;

#define KCACHE_ENTRY_VERSION 1
KCACHE_API int kcache_entry_init(kcache_entry *out, unsigned version);
#define KCACHE_ENTRY_INIT KCACHE_VERSIONED_INIT(kcache_entry, KCACHE_ENTRY_VERSION)

/* Flags for kcache_store_get(). */
enum kcache_get_flags {
    KCACHE_GET_DEFAULT = 0,
    KCACHE_GET_NO_TOUCH = 1 << 0, /* do not count a hit or a miss (inspect, export) */
    KCACHE_GET_INPUTS = 1 << 1,   /* also load the stored inputs */
    KCACHE_GET_NO_DATA = 1 << 2,  /* metadata only: data is NULL, size the raw size */
    /* record the use (LRU) but count no hit: a lookup made beside another
     * that the caller counts (KCACHE_COMPILE_UNCOUNTED) */
    KCACHE_GET_NO_COUNT = 1 << 3,
};

/*
 * Looks up a key. On a hit, *out is a new entry owned by the caller, released
 * with kcache_entry_free(); its artifact has been checked against its digest,
 * and its data is followed by a NUL byte not counted in size (PTX is text).
 * A hit is counted unless KCACHE_GET_NO_TOUCH.
 * Returns 0, KCACHE_ENOTFOUND on a miss (also when a damaged artifact was
 * found: it is deleted and counted), or another error.
 */
KCACHE_API int kcache_store_get(kcache_entry **out, kcache_store *store, const kcache_key *key,
                                unsigned flags);

/* Releases an entry from kcache_store_get() or kcache_store_list(). Accepts NULL. */
KCACHE_API void kcache_entry_free(kcache_entry *entry);

/*
 * Stores an entry, replacing one with the same key. The store copies what it
 * needs; the caller keeps ownership of everything in entry. When the cap is
 * passed, least recently used entries are evicted before this returns.
 */
KCACHE_API int kcache_store_put(kcache_store *store, const kcache_entry *entry);

/*
 * Batches: many puts in few transactions, for callers that have many entries
 * at once (a bulk import, a build that warms a cache). A put alone commits a
 * transaction of its own; a batch writes up to max_entries in one.
 *
 * kcache_batch_put() checks and compresses the entry at once (the caller may
 * reuse its buffers when it returns) and keeps it in memory; the batch is
 * written in one transaction when max_entries wait, or about 64 MiB are
 * held (compressed artifacts, key material and the entries' inputs), and by
 * kcache_batch_commit(). Each transaction is all
 * or nothing: a failure (a full disk) loses the entries of that transaction
 * only, never half an entry, and what was committed before stays.
 * kcache_batch_free() drops what was not committed.
 *
 * Entries are not visible to gets until committed. Between calls nothing of
 * the store is held: the store can be used meanwhile, from this thread or
 * others. A batch is used by one thread at a time; several batches on one
 * store are fine. Errors: 0 or a negative code, the message on the store
 * (kcache_store_errmsg()).
 */
typedef struct kcache_batch kcache_batch;

#define KCACHE_BATCH_OPTIONS_VERSION 1

typedef struct kcache_batch_options {
    unsigned version;   /* KCACHE_BATCH_OPTIONS_VERSION */
    size_t max_entries; /* entries per transaction; 0: 64 */
} kcache_batch_options;

KCACHE_API int kcache_batch_options_init(kcache_batch_options *out, unsigned version);
#define KCACHE_BATCH_OPTIONS_INIT                                                                  \
    KCACHE_VERSIONED_INIT(kcache_batch_options, KCACHE_BATCH_OPTIONS_VERSION)

/*
 * A new batch on store (options may be NULL), released with
 * kcache_batch_free(); the store must outlive it.
 */
KCACHE_API int kcache_batch_new(kcache_batch **out, kcache_store *store,
                                const kcache_batch_options *options);

/*
 * Adds an entry, as kcache_store_put() would store it. Returns 0, the put's
 * KCACHE_EINVAL (the entry is not added; the batch goes on), or the error
 * of the transaction this call wrote (its entries are lost).
 */
KCACHE_API int kcache_batch_put(kcache_batch *batch, const kcache_entry *entry);

/* Writes what waits in one transaction. Returns 0 or its error (those entries are lost). */
KCACHE_API int kcache_batch_commit(kcache_batch *batch);

/* Entries put and not yet committed. */
KCACHE_API size_t kcache_batch_pending(const kcache_batch *batch);

/* Drops what was not committed and releases the batch. Accepts NULL. */
KCACHE_API void kcache_batch_free(kcache_batch *batch);

/* Deletes one entry. Returns 0 or KCACHE_ENOTFOUND. */
KCACHE_API int kcache_store_delete(kcache_store *store, const kcache_key *key);

/*
 * Entries keyed by a caller. Besides the compiles kcache keys itself, a
 * caller (cuda.core's program cache, Triton, a tool of its own) may store
 * bytes under its own key, of any bytes, in a namespace: a name of 1 to
 * KCACHE_NAMESPACE_MAX letters, digits, '.', '_' or '-' ("cuda.core",
 * "triton"). The store's key is derived from both (kcache_key_caller()), so
 * namespaces never see each other's entries nor kcache's compiles.
 *
 * Such an entry is an entry like any other: kind KCACHE_KIND_DATA, its
 * namespace as arch (so list, prune and stats select a namespace as they
 * select an architecture: kind = KCACHE_KIND_DATA, arch = namespace), the
 * same LRU and cap, the same digest check on every get, export, import and
 * the remote. Errors: 0 or a negative code, the message on the store.
 */
#define KCACHE_NAMESPACE_MAX 31
#define KCACHE_CALLER_KEY_MAX 65536

/*
 * The store's key of (ns, key): BLAKE2b-256 of an encoding of both that no
 * compile's inputs can have. Returns 0, KCACHE_EINVAL (a bad namespace, a
 * key over KCACHE_CALLER_KEY_MAX bytes) or KCACHE_ENOMEM.
 */
KCACHE_API int kcache_key_caller(kcache_key *out, const char *ns, const void *key,
                                 size_t key_size);

/* Stores size bytes of data under (ns, key), replacing what was there. */
KCACHE_API int kcache_store_put_keyed(kcache_store *store, const char *ns, const void *key,
                                      size_t key_size, const void *data, size_t size);

/*
 * Looks (ns, key) up: as kcache_store_get() (the bytes checked against their
 * digest, followed by a NUL not counted in size; flags alike), and a miss is
 * counted for the namespace unless KCACHE_GET_NO_TOUCH. Returns 0 or
 * KCACHE_ENOTFOUND on a miss, or another error.
 */
KCACHE_API int kcache_store_get_keyed(kcache_entry **out, kcache_store *store, const char *ns,
                                      const void *key, size_t key_size, unsigned flags);

/* Deletes (ns, key). Returns 0 or KCACHE_ENOTFOUND. */
KCACHE_API int kcache_store_delete_keyed(kcache_store *store, const char *ns, const void *key,
                                         size_t key_size);

/*
 * Evicts a namespace's entries, least recently used first, until their bytes
 * (as handed out) are at most max_bytes: a cap of the caller's own inside the
 * store's. Counted as evictions; *evicted (may be NULL) says how many.
 */
KCACHE_API int kcache_store_trim_namespace(uint64_t *evicted, kcache_store *store, const char *ns,
                                           uint64_t max_bytes);

/* Deletes every entry of a namespace; *deleted (may be NULL) says how many. */
KCACHE_API int kcache_store_clear_namespace(uint64_t *deleted, kcache_store *store,
                                            const char *ns);

#define KCACHE_NAMESPACE_STATS_VERSION 1

/* One namespace's entries and counters; the caller sets version. */
typedef struct kcache_namespace_stats {
    unsigned version;      /* KCACHE_NAMESPACE_STATS_VERSION */
    uint64_t entries;
    uint64_t raw_bytes;    /* as handed out */
    uint64_t stored_bytes; /* as stored (compressed) */
    uint64_t hits;         /* counters include this process's batch not yet written */
    uint64_t misses;
} kcache_namespace_stats;

KCACHE_API int kcache_namespace_stats_init(kcache_namespace_stats *out, unsigned version);
#define KCACHE_NAMESPACE_STATS_INIT                                                                \
    KCACHE_VERSIONED_INIT(kcache_namespace_stats, KCACHE_NAMESPACE_STATS_VERSION)

KCACHE_API int kcache_store_namespace_stats(kcache_namespace_stats *out, kcache_store *store,
                                            const char *ns);

/* Zeroes one namespace's hits and misses; its entries and every other counter stay. */
KCACHE_API int kcache_store_zero_namespace_stats(kcache_store *store, const char *ns);

/*
 * Finds the single key that starts with a hex prefix (at least 4 digits).
 * Returns 0, KCACHE_ENOTFOUND, KCACHE_EAMBIGUOUS or KCACHE_EINVAL.
 */
KCACHE_API int kcache_store_find(kcache_key *out, kcache_store *store, const char *hex_prefix);

/* Order of kcache_store_list(). */
typedef enum kcache_sort {
    KCACHE_SORT_ACCESSED = 0, /* most recently used first */
    KCACHE_SORT_CREATED = 1,  /* newest first */
    KCACHE_SORT_SIZE = 2,     /* largest first (raw size) */
    KCACHE_SORT_HITS = 3,     /* most hits first */
    KCACHE_SORT_LRU = 4,      /* least recently used first: eviction order */
} kcache_sort;

#define KCACHE_FILTER_VERSION 1

/* Selects entries. Zero or NULL fields select everything. */
typedef struct kcache_filter {
    unsigned version;        /* KCACHE_FILTER_VERSION */
    const char *arch;        /* exact normalised architecture */
    kcache_kind kind;        /* 0: any */
    int64_t accessed_before; /* ms since epoch: only entries last used before this */
    int64_t created_since;   /* ms since epoch: only entries created at or after this */
    kcache_sort sort;
    uint64_t limit;          /* 0: no limit */
} kcache_filter;

KCACHE_API int kcache_filter_init(kcache_filter *out, unsigned version);
#define KCACHE_FILTER_INIT KCACHE_VERSIONED_INIT(kcache_filter, KCACHE_FILTER_VERSION)

/*
 * Calls fn for each selected entry's metadata (data is NULL, size the raw
 * size). The entry is valid only during the call. fn returns 0 to go on, or a
 * non-zero value that stops the walk and is returned. The selection is read
 * first (one read transaction, the metadata held in memory: about 200 bytes
 * an entry) and fn is called with no lock held, so fn may call the store,
 * from this thread or another; what it changes does not alter the walk.
 */
typedef int (*kcache_entry_fn)(void *userdata, const kcache_entry *entry);
KCACHE_API int kcache_store_list(kcache_store *store, const kcache_filter *filter,
                                 kcache_entry_fn fn, void *userdata);

/*
 * The keys of the selected entries, in the filter's order: *out is a new
 * array of *n keys (NULL when none), released with kcache_keys_free().
 */
KCACHE_API int kcache_store_list_keys(kcache_key **out, size_t *n,
                                      kcache_store *store, const kcache_filter *filter);
KCACHE_API void kcache_keys_free(kcache_key *keys);

/* Hit and miss counters of one (architecture, kind). */
typedef struct kcache_usage {
    char arch[32];
    kcache_kind kind;
    uint64_t hits;
    uint64_t misses;
    uint64_t saved_ns; /* compile time the hits saved */
} kcache_usage;

/* 2: the uncacheable counts were added. */
#define KCACHE_STATS_VERSION 2

/* A count under a short reason name. */
typedef struct kcache_reason_count {
    char reason[40];
    uint64_t count;
} kcache_reason_count;

typedef struct kcache_stats {
    unsigned version;       /* KCACHE_STATS_VERSION of the library that made it */
    uint64_t entries;
    uint64_t raw_bytes;     /* artifacts as handed out */
    uint64_t stored_bytes;  /* artifacts as stored (compressed) */
    uint64_t file_bytes;    /* database file on disk */
    uint64_t wal_bytes;     /* its WAL on disk */
    uint64_t max_size;      /* the cap (UINT64_MAX: none) */
    uint64_t hits;
    uint64_t misses;
    uint64_t saved_ns;
    uint64_t evictions;
    uint64_t corrupt;        /* damaged artifacts or databases found */
    uint64_t store_failures; /* puts that could not be written */
    int64_t since;           /* ms since epoch: when counters were last zeroed */
    int schema_version;
    size_t n_usage;          /* per (architecture, kind), most hits first */
    kcache_usage *usage;
    /*
     * Version 2: compiles served without the cache, by reason
     * ("include_next", "computed_include", "hermetic_failed", ...), most first.
     */
    uint64_t uncacheable;
    size_t n_uncacheable;
    kcache_reason_count *uncacheable_reasons;
} kcache_stats;

/*
 * Fills *out with a new stats object (counters include this process's batch
 * not yet written), released with kcache_stats_free().
 */
KCACHE_API int kcache_store_stats(kcache_stats **out, kcache_store *store);
KCACHE_API void kcache_stats_free(kcache_stats *stats);

/*
 * A named counter of the store (0 when it was never counted), including this
 * process's pending batch. Other parts of kcache keep their counts here: the
 * shared tier's are listed in <kcache/remote.h>.
 */
KCACHE_API int kcache_store_counter(uint64_t *out, kcache_store *store, const char *name);

/* Zeroes the hit, miss, eviction and failure counters (not the entries). */
KCACHE_API int kcache_store_zero_stats(kcache_store *store);

#define KCACHE_PRUNE_OPTIONS_VERSION 1

typedef struct kcache_prune_options {
    unsigned version;       /* KCACHE_PRUNE_OPTIONS_VERSION */
    uint64_t max_size;      /* evict LRU entries until database + WAL fit; 0: the store's cap */
    uint64_t max_entries;   /* 0: no limit */
    int64_t accessed_before; /* ms since epoch: evict entries last used before; 0: none */
    const char *arch;       /* only entries of this architecture (with accessed_before) */
    kcache_kind kind;       /* only entries of this kind (with accessed_before) */
    int dry_run;            /* count what would go, change nothing */
} kcache_prune_options;

KCACHE_API int kcache_prune_options_init(kcache_prune_options *out, unsigned version);
#define KCACHE_PRUNE_OPTIONS_INIT                                                                  \
    KCACHE_VERSIONED_INIT(kcache_prune_options, KCACHE_PRUNE_OPTIONS_VERSION)

#define KCACHE_PRUNE_RESULT_VERSION 1

/* Filled by kcache_store_prune(); the caller sets version (KCACHE_PRUNE_RESULT_INIT). */
typedef struct kcache_prune_result {
    unsigned version;        /* KCACHE_PRUNE_RESULT_VERSION */
    uint64_t evicted;        /* entries */
    uint64_t evicted_bytes;  /* stored bytes of those entries */
    uint64_t disk_before;    /* database + WAL on disk before */
    uint64_t disk_after;     /* and after (a dry run: an estimate) */
} kcache_prune_result;

KCACHE_API int kcache_prune_result_init(kcache_prune_result *out, unsigned version);
#define KCACHE_PRUNE_RESULT_INIT                                                                   \
    KCACHE_VERSIONED_INIT(kcache_prune_result, KCACHE_PRUNE_RESULT_VERSION)

/*
 * Evicts entries, least recently used first, and hands the freed pages back
 * to the file system. With a size, database + WAL end at or under it once no
 * other process is writing. out may be NULL.
 */
KCACHE_API int kcache_store_prune(kcache_prune_result *out, kcache_store *store,
                                  const kcache_prune_options *options);

/* One codec's share of the stored entries (kcache_store_recompress()). */
typedef struct kcache_codec_usage {
    char codec[16];          /* "none", "zstd", "lz4", or "unknown" (a newer kcache's) */
    uint64_t entries;
    uint64_t raw_bytes;
    uint64_t stored_bytes;
} kcache_codec_usage;

#define KCACHE_RECOMPRESS_OPTIONS_VERSION 1

typedef struct kcache_recompress_options {
    unsigned version;            /* KCACHE_RECOMPRESS_OPTIONS_VERSION */
    size_t batch;                /* entries per transaction; 0: a default */
    int dry_run;                 /* count what would be re-encoded; change nothing */
    /* optional: ("recompressing", done, total), called between batches with
     * no lock held, so it may use this store */
    kcache_progress_fn progress;
    void *userdata;
} kcache_recompress_options;

KCACHE_API int kcache_recompress_options_init(kcache_recompress_options *out, unsigned version);
#define KCACHE_RECOMPRESS_OPTIONS_INIT                                                             \
    KCACHE_VERSIONED_INIT(kcache_recompress_options, KCACHE_RECOMPRESS_OPTIONS_VERSION)

#define KCACHE_RECOMPRESS_RESULT_VERSION 1

/* Filled by kcache_store_recompress(); the caller sets version (KCACHE_RECOMPRESS_RESULT_INIT). */
typedef struct kcache_recompress_result {
    unsigned version;                  /* KCACHE_RECOMPRESS_RESULT_VERSION */
    char codec[16];                    /* what entries are re-encoded to: the store's setting */
    kcache_codec_usage before[4];      /* per codec, before (none, zstd, lz4, unknown) */
    uint64_t to_recompress;            /* entries in another codec than the setting */
    uint64_t recompressed;             /* re-encoded and written */
    uint64_t kept;                     /* left as they are: compressing them does not pay */
    uint64_t skipped;                  /* damaged or in a codec this build cannot read */
    uint64_t stored_before;            /* stored bytes of the entries re-encoded, before */
    uint64_t stored_after;             /* and after */
} kcache_recompress_result;

KCACHE_API int kcache_recompress_result_init(kcache_recompress_result *out, unsigned version);
#define KCACHE_RECOMPRESS_RESULT_INIT                                                              \
    KCACHE_VERSIONED_INIT(kcache_recompress_result, KCACHE_RECOMPRESS_RESULT_VERSION)

/*
 * Re-encodes stored artifacts to the store's compression setting, a batch
 * per write transaction: stopped at any moment (a kill, a full disk), every
 * entry is whole in its old codec or its new one, and the next run goes on.
 * Each artifact is decoded and checked against its digest before it is
 * re-encoded; one that fails is left for get and verify to deal with
 * (counted in skipped). Entries are served the same bytes before and after.
 * out may be NULL; options NULL means the defaults.
 */
KCACHE_API int kcache_store_recompress(kcache_recompress_result *out, kcache_store *store,
                                       const kcache_recompress_options *options);

/* Rebuilds the file (VACUUM) and truncates the WAL. */
KCACHE_API int kcache_store_vacuum(kcache_store *store);

/* Deletes every entry and hands the space back. */
KCACHE_API int kcache_store_clear(kcache_store *store);

/*
 * Writes this process's pending touches now and, if this handle wrote to the
 * file, empties the WAL into it (when no other process is using it; never
 * waits), as kcache_store_close() does: for a process that keeps its handle
 * until it exits, so that the processes after it have no WAL to replay.
 */
KCACHE_API int kcache_store_flush(kcache_store *store);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_STORE_H */
