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

#define KCACHE_BUNDLE_OPTIONS_VERSION 1

typedef struct kcache_bundle_options {
    unsigned version;      /* KCACHE_BUNDLE_OPTIONS_VERSION */
    /* export: which entries (as in kcache_filter; zero selects all) */
    const char *arch;
    kcache_kind kind;
    int64_t created_since; /* ms since epoch */
    /* import: check and count, change nothing */
    int dry_run;
    kcache_progress_fn progress; /* optional */
    void *progress_userdata;
} kcache_bundle_options;

KCACHE_API int kcache_bundle_options_init(kcache_bundle_options *out, unsigned version);
#define KCACHE_BUNDLE_OPTIONS_INIT                                                                 \
    KCACHE_VERSIONED_INIT(kcache_bundle_options, KCACHE_BUNDLE_OPTIONS_VERSION)

#define KCACHE_BUNDLE_RESULT_VERSION 1

/* Filled by export and import; the caller sets version (KCACHE_BUNDLE_RESULT_INIT). */
typedef struct kcache_bundle_result {
    unsigned version;  /* KCACHE_BUNDLE_RESULT_VERSION */
    uint64_t entries;  /* entries in the bundle (export: written) */
    uint64_t bytes;    /* their raw artifact bytes */
    uint64_t added;    /* import: keys the store did not have */
    uint64_t replaced; /* import: keys whose stored entry was older */
    uint64_t skipped;  /* import: keys whose stored entry was as new or newer */
    uint64_t damaged;  /* export: entries found damaged in the store and left out */
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
 * both, the one created later is kept. Entries keep their creation time;
 * their time of last use is the import's, so that a warm cache is not the
 * first thing evicted. With dry_run, only checks and counts. options and out
 * may be NULL. Returns 0; KCACHE_ECORRUPT for a damaged bundle,
 * KCACHE_EFOREIGN for a file that is not a kcache bundle, KCACHE_EVERSION for
 * a bundle of another schema version (nothing merged in each case); or
 * another error. The message is on store.
 */
KCACHE_API int kcache_bundle_import(kcache_bundle_result *out, kcache_store *store,
                                    const char *path,
                                    const kcache_bundle_options *options);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_BUNDLE_H */
