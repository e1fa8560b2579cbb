/*
 * The shared tier: a Redis server behind the local store, shared by a fleet.
 *
 * Settings (flag > environment > kcache.conf > default; see <kcache/config.h>):
 *   remote                  redis://[user:password@]host:port[/db]   KCACHE_REMOTE
 *   remote_read_only        take entries, never push                 KCACHE_REMOTE_READ_ONLY
 *   remote_connect_timeout  ms (500)                                 KCACHE_REMOTE_CONNECT_TIMEOUT
 *   remote_timeout          ms per operation (2000)                  KCACHE_REMOTE_TIMEOUT
 *   remote_prefix           prefix of the Redis keys ("kcache:")     KCACHE_REMOTE_PREFIX
 *   remote_secret           sign pushes, take only signed entries    KCACHE_REMOTE_SECRET
 *
 * A compiler (<kcache/compile.h>) uses the remote on its own when one is set:
 * a local miss asks it, a compile pushes to it. This header is for tools:
 * checking the connection, pushing and pulling many entries.
 *
 * The remote never makes a compile fail or stall: after a failure (refused,
 * timed out, wrong password) it is left alone for KCACHE_REMOTE_BACKOFF_S
 * seconds by every process of the machine (a small file in the cache
 * directory says until when).
 *
 * Counters (kcache_store_counter() on the local store): "remote_hits",
 * "remote_misses", "remote_pushes", "remote_errors", "remote_rejected" (values
 * that failed the checks), "remote_skipped" (operations not tried while the
 * remote was left alone), "remote_bytes_in", "remote_bytes_out",
 * "remote_saved_ns" (compile time the remote hits saved).
 *
 * Thread safety: a kcache_remote may be shared by threads; its calls are
 * serialised by a lock it owns.
 */
#ifndef KCACHE_REMOTE_H
#define KCACHE_REMOTE_H

#include <kcache/store.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KCACHE_REMOTE_BACKOFF_S 30

typedef struct kcache_remote kcache_remote;

/*
 * Opens the remote set for store (which it borrows: the store must outlive
 * it). url: a flag's value, NULL for the settings. Connects lazily. Returns
 * 0 with a new remote in *out; otherwise *out is NULL and errbuf holds a
 * one-line message: KCACHE_ENOTFOUND when no remote is set (the usual case,
 * not a failure: go on without one), KCACHE_EINVAL for a setting that
 * cannot be used.
 */
KCACHE_API int kcache_remote_open(kcache_remote **out, kcache_store *store, const char *url,
                                  char *errbuf, size_t errbuf_size);
KCACHE_API void kcache_remote_close(kcache_remote *remote);

/*
 * The message of the calling thread's last failure on remote, one line, never
 * NULL. Thread-local: valid until this thread's next call on remote.
 */
KCACHE_API const char *kcache_remote_errmsg(const kcache_remote *remote);

/* The URL with its password hidden ("redis://ci:***@host:6379/0"). Owned by remote. */
KCACHE_API const char *kcache_remote_url(const kcache_remote *remote);

/* Whether pushes are off (remote_read_only). */
KCACHE_API int kcache_remote_read_only(const kcache_remote *remote);

#define KCACHE_REMOTE_INFO_VERSION 1

typedef struct kcache_remote_info {
    unsigned version;        /* KCACHE_REMOTE_INFO_VERSION */
    uint64_t latency_ns;     /* one round trip (PING) */
    char server_version[32]; /* the server's */
    char policy[32];         /* maxmemory-policy: "allkeys-lru", "noeviction", ... */
    uint64_t maxmemory;      /* 0: none */
    uint64_t used_memory;
    uint64_t entries;        /* kcache entries under the prefix (from the index) */
    int authenticated;       /* a user or password was given and accepted */
    int refuses_writes;      /* full with noeviction: pushes will fail */
    int down_for_s;          /* seconds a back-off had left to go (lifted by the check) */
} kcache_remote_info;

KCACHE_API int kcache_remote_info_init(kcache_remote_info *out, unsigned version);
#define KCACHE_REMOTE_INFO_INIT                                                                    \
    KCACHE_VERSIONED_INIT(kcache_remote_info, KCACHE_REMOTE_INFO_VERSION)

/*
 * Connects now (ignoring a back-off in place: this is the way to test a
 * fix) and fills *out; when the server answers, a back-off in place is
 * lifted for every process of the machine. Returns 0 or an error with the
 * message on remote.
 */
KCACHE_API int kcache_remote_check(kcache_remote_info *out, kcache_remote *remote);

/*
 * One entry at a time, for callers that keep their own entries (a caller's
 * key in a namespace, <kcache/store.h>): what a compiler does on its own.
 *
 * kcache_remote_get() looks key up on the remote after a local miss; on a
 * hit the entry, checked as every remote entry is (key recomputed from its
 * key material, digest, sizes), is stored locally and *out is the local copy
 * (kcache_entry_free()). Returns 0, or KCACHE_ENOTFOUND on a miss and also
 * when the remote cannot be used or held a value that failed the checks
 * (counted in the remote counters and logged): the remote never makes a
 * lookup fail.
 *
 * kcache_remote_put() pushes a local entry (as kcache_store_get() gives it,
 * with its key material). Waits at most the operation timeout; a failure is
 * counted and logged, not returned. Returns 0, or KCACHE_EINVAL.
 */
KCACHE_API int kcache_remote_get(kcache_entry **out, kcache_remote *remote, const kcache_key *key);
KCACHE_API int kcache_remote_put(kcache_remote *remote, const kcache_entry *entry);

#define KCACHE_TRANSFER_VERSION 2

/* What a push or a pull did. */
typedef struct kcache_transfer {
    unsigned version;  /* KCACHE_TRANSFER_VERSION */
    uint64_t entries;  /* moved */
    uint64_t present;  /* already there (pull) */
    uint64_t rejected; /* failed the checks (pull) */
    uint64_t bytes;    /* on the wire */
    /* Version 2: keys the local store got meanwhile with other bytes (its own kept). */
    uint64_t conflicts;
} kcache_transfer;

KCACHE_API int kcache_transfer_init(kcache_transfer *out, unsigned version);
#define KCACHE_TRANSFER_INIT KCACHE_VERSIONED_INIT(kcache_transfer, KCACHE_TRANSFER_VERSION)

/*
 * progress (<kcache/core.h>) is called after each entry with the phase
 * "pushing" or "pulling", with no lock held: it may call this remote and its
 * store (a pull asks the store for each key when its turn comes).
 * Pushes the local entries selected by filter (arch, created_since; NULL:
 * all) to the remote, or pulls the remote's (by its index: the arch and
 * creation time each push recorded) into the store, each checked as a
 * compile's remote hit is. Stops at the first remote failure. out and
 * progress may be NULL.
 */
KCACHE_API int kcache_remote_push(kcache_transfer *out, kcache_remote *remote,
                                  const kcache_filter *filter, kcache_progress_fn progress,
                                  void *userdata);
KCACHE_API int kcache_remote_pull(kcache_transfer *out, kcache_remote *remote,
                                  const kcache_filter *filter, kcache_progress_fn progress,
                                  void *userdata);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_REMOTE_H */
