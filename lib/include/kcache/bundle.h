/*
 * kcache: bundles, to carry a warm cache from one machine to another (CI).
 *
 * A bundle is itself a kcache database (same application id, same schema),
 * holding a selection of a store's entries with their inputs, in a single
 * file (rollback journal, no WAL). Importing checks the whole bundle before
 * it merges anything: the application id, the schema version, the schema's
 * exact objects (no foreign triggers or views), SQLite's integrity check,
 * plausible sizes and every artifact's and input's digest. A bundle that
 * fails any check changes nothing.
 *
 * Thread safety: as for the store the functions are given.
 */
#ifndef KCACHE_BUNDLE_H
#define KCACHE_BUNDLE_H

#include <kcache/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bundles larger than these per artifact or input are refused as damaged. */
#define KCACHE_BUNDLE_MAX_ARTIFACT (UINT64_C(1) << 30)

/*
 * An arriving entry whose key the store holds with other artifact bytes: a
 * conflict. The store's entry is kept; kept and refused are the BLAKE2b-256
 * digests of the two artifacts. Only a rebuild can say which is right
 * (kcache_compiler_recompile(), which the caller may run: kcache import
 * --resolve-conflicts does).
 */
typedef void (*kcache_conflict_fn)(void *userdata, const kcache_key *key, const uint8_t kept[32],
                                   const uint8_t refused[32]);

#define KCACHE_BUNDLE_OPTIONS_VERSION 2

typedef struct kcache_bundle_options {
    unsigned version;      /* KCACHE_BUNDLE_OPTIONS_VERSION */
    /* export: which entries (as in kcache_filter; zero selects all) */
    const char *arch;
    kcache_kind kind;
    int64_t created_since; /* ms since epoch */
    /* import: check and count, change nothing */
    int dry_run;
    /*
     * Optional; called with no lock held, so it may use the store
     * (<kcache/core.h>). Export and a dry run say every entry; a merge is one
     * transaction that holds the store from its first entry to its last, so
     * it says ("importing", 0, n) before and (n, n) after.
     */
    kcache_progress_fn progress;
    void *progress_userdata;
    /*
     * Version 2. Signatures: keyed BLAKE2b-256 with remote_secret (the
     * shared tier's secret: flag, KCACHE_REMOTE_SECRET or kcache.conf), over
     * every entry's contents. Export signs whenever the secret is set; with
     * sign, a missing secret is an error (KCACHE_EINVAL) instead of an
     * unsigned bundle. Import refuses, merging nothing, a bundle whose
     * signature does not match the secret it has (KCACHE_ECORRUPT) and, with
     * require_signature (or import_require_signature = true), one that is
     * not signed or cannot be checked for want of a secret (KCACHE_EINVAL).
     */
    int sign;
    int require_signature;
    /* import: called for each conflict (above) once the merge is done or, dry,
     * checked; with no lock held. */
    kcache_conflict_fn conflict;
    void *conflict_userdata;
} kcache_bundle_options;

KCACHE_API int kcache_bundle_options_init(kcache_bundle_options *out, unsigned version);
#define KCACHE_BUNDLE_OPTIONS_INIT                                                                 \
    KCACHE_VERSIONED_INIT(kcache_bundle_options, KCACHE_BUNDLE_OPTIONS_VERSION)

#define KCACHE_BUNDLE_RESULT_VERSION 2

/* Filled by export and import; the caller sets version (KCACHE_BUNDLE_RESULT_INIT). */
typedef struct kcache_bundle_result {
    unsigned version;  /* KCACHE_BUNDLE_RESULT_VERSION */
    uint64_t entries;  /* entries in the bundle (export: written) */
    uint64_t bytes;    /* their raw artifact bytes */
    uint64_t added;    /* import: keys the store did not have */
    uint64_t replaced; /* import: keys whose stored entry was older */
    uint64_t skipped;  /* import: keys whose stored entry was as new or newer */
    uint64_t damaged;  /* export: entries found damaged in the store and left out */
    /* Version 2. */
    uint64_t conflicts; /* import: keys the store holds with other bytes (its own kept) */
    int signed_by_secret; /* export: signed; import: its signature matched remote_secret */
} kcache_bundle_result;

KCACHE_API int kcache_bundle_result_init(kcache_bundle_result *out, unsigned version);
#define KCACHE_BUNDLE_RESULT_INIT                                                                  \
    KCACHE_VERSIONED_INIT(kcache_bundle_result, KCACHE_BUNDLE_RESULT_VERSION)

/*
 * Writes the selected entries of store, with their inputs, creation and last
 * use times, into a new bundle at path. The file appears complete or not at
 * all (written beside it, then renamed); an existing file at path is
 * replaced. options and out may be NULL. Returns 0 or an error; the message
 * is on store (kcache_store_errmsg()).
 */
KCACHE_API int kcache_bundle_export(kcache_bundle_result *out, kcache_store *store,
                                    const char *path,
                                    const kcache_bundle_options *options);

/*
 * Checks the bundle at path (opened read-only, never changed) and then merges
 * it into store: an entry whose key the store lacks is added; for a key in
 * both with the same artifact, the one created later is kept; for a key in
 * both with different artifacts (a conflict), the store's is kept, the
 * conflict counted ("conflicts"), logged as a warning with both digests and
 * handed to options->conflict. Each entry's kind and architecture must be
 * what its key material says. Entries keep their creation time;
 * their time of last use is the import's, so that a warm cache is not the
 * first thing evicted. With dry_run, only checks and counts. options and out
 * may be NULL. Returns 0; KCACHE_ECORRUPT for a damaged bundle,
 * KCACHE_EFOREIGN for a file that is not a kcache bundle, KCACHE_EVERSION for
 * a bundle of another schema version, KCACHE_ECORRUPT or KCACHE_EINVAL for
 * a signature refused (above) (nothing merged in each case); or another
 * error. The message is on store.
 */
KCACHE_API int kcache_bundle_import(kcache_bundle_result *out, kcache_store *store,
                                    const char *path,
                                    const kcache_bundle_options *options);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_BUNDLE_H */
