/*
 * Bytes from outside the store (a header apart: storeint.h's users need none of it).
 *
 * Bytes that enter the store from outside it: the one gate (bundles, the
 * shared tier; ingest.c says what it checks and why), a bundle's file
 * checked before it is read, and signed bundles (all in ingest.c).
 */
#ifndef KC_INGEST_H
#define KC_INGEST_H

#include <sqlite3.h>

#include "store/storeint.h"
#include "format/secret.h"

/* An entry's artifact and inputs, decoded, at most; a bundle's in all (inputs counted
 * once per entry that uses them, as they are decoded). */
#define KC_INGEST_MAX_ENTRY (UINT64_C(512) << 20)
#define KC_INGEST_MAX_TOTAL (UINT64_C(4) << 30)

/*
 * The sizes a bundle's rows declare (db: the bundle's own read-only
 * connection), bounded before anything is decoded. Returns 0, or
 * KCACHE_ECORRUPT with `what` saying which bound was passed.
 */
int kc_ingest_check_sizes(sqlite3 *db, int version, char *what, size_t what_size);

/*
 * One entry as read from outside, before it may be put: the store's own put
 * rules, the key recomputed from the key material (BLAKE2b-256) and
 * compared, the artifact's digest, the sizes; created_at and accessed_at
 * clamped to now (a date in the future would make an entry "newer" than
 * any later one for ever). Returns 0, or KCACHE_ECORRUPT with `what`.
 */
int kc_ingest_check_entry(kcache_store *s, kcache_entry *e, int64_t now, char *what,
                          size_t what_size);

/*
 * Inside a batch (kc_put_batch_begin(), the store's lock held), or under the
 * lock: the created_at and artifact digest of the store's entry for key.
 * Returns 1 (found), 0 (none) or a negative code.
 */
int kc_ingest_existing(kcache_store *s, const kcache_key *key, int64_t *created_at,
                       uint8_t digest[KC_DIGEST_SIZE]);

/*
 * 1 if e is a record only this machine may write, which never leaves it and
 * is never taken from outside (ingest.c says which and why), else 0.
 */
int kc_ingest_local_only(const kcache_entry *e);

/* The counter of conflicts (ingest.c says what one is). */
#define KC_COUNTER_CONFLICTS "conflicts"

/*
 * The one line that reports a conflict: the key, the digest kept (the
 * store's) and the one refused (arriving from `from`: "the bundle", "the
 * remote").
 */
void kc_ingest_conflict_text(char *out, size_t size, const kcache_key *key,
                             const uint8_t kept[KC_DIGEST_SIZE],
                             const uint8_t refused[KC_DIGEST_SIZE], const char *from);

/*
 * Everything about the file at path that the store does not check when it
 * serves an entry, on a read-only connection that nothing in the file can
 * make run code. *has_sig and sig: the signature the bundle claims, if any.
 * 0, or an error with the message on s (nothing imported).
 */
int kc_bundle_check_file(kcache_store *s, const char *path, int *has_sig,
                         uint8_t sig[KC_MAC_SIZE]);

/* Signed bundles: what an export wrote, or an import read, entry by entry. */
typedef struct kc_bundle_sig {
    struct kc_sig_item *items;
    size_t n, cap;
    int failed; /* out of memory once: the signature cannot be made */
} kc_bundle_sig;

/* Adds e as the bundle holds it (before the import gate clamps its dates). */
void kc_bundle_sig_add(kc_bundle_sig *s, const kcache_entry *e);
/* Adds a closure the bundle carries (carried.c), as an item of its own kind. */
void kc_bundle_sig_add_closure(kc_bundle_sig *s, const kcache_key *base, const kcache_key *key,
                               int64_t recorded_at, const void *closure, size_t size);
/* The signature of everything added, whatever the order it came in. 0 or KCACHE_ENOMEM. */
int kc_bundle_sig_finish(uint8_t out[KC_MAC_SIZE], kc_bundle_sig *s, const kc_secret *secret);
void kc_bundle_sig_free(kc_bundle_sig *s);

/* The bundle's signature (db: its read-only connection): 1 found, 0 none, or KCACHE_ECORRUPT. */
int kc_bundle_sig_read(sqlite3 *db, uint8_t out[KC_MAC_SIZE]);
/* Keeps sig in the bundle being finished (db: a read-write connection to it). SQLite's code. */
int kc_bundle_sig_write(sqlite3 *db, const uint8_t sig[KC_MAC_SIZE]);
/* The same for the signature kept under another counter's name. */
int kc_bundle_sig_read_as(sqlite3 *db, const char *name, uint8_t out[KC_MAC_SIZE]);
int kc_bundle_sig_write_as(sqlite3 *db, const char *name, const uint8_t sig[KC_MAC_SIZE]);

/*
 * Include closures carried by bundles (carried.c). Export: the closures of
 * the entry under key, copied from store into dst (sig: added to it, when
 * signing). 0 or an error (the caller may go on without them).
 */
int kc_carried_export(kcache_store *store, kcache_store *dst, const kcache_key *key,
                      kc_bundle_sig *sig);
/* Keeps the closures' signature in the bundle being finished. SQLite's code. */
int kc_carried_sig_write(sqlite3 *db, kc_bundle_sig *sig, const kc_secret *secret);
/*
 * Import, after the entries are merged: src's closures that lead to an entry
 * it carries and store now holds, at most KC_MANIFEST_PER_BASE for each of
 * its entries; with verify_with, only when their signature matches. Returns
 * how many were taken; a failure takes none or fewer, never fails the import.
 */
size_t kc_carried_import(kcache_store *store, kcache_store *src, size_t entries,
                         const kc_secret *verify_with);

/* remote_secret as the store's settings give it (unset: out->set is 0). */
void kc_bundle_secret(kc_secret *out, kcache_store *store);
/* import_require_signature as the store's settings give it. 0 or KCACHE_EINVAL. */
int kc_bundle_require_setting(int *out, kcache_store *store);

#endif
