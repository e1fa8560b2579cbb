/*
 * Signed bundles (bundle_sign.c): what is signed, where the signature is
 * kept, and which secret signs.
 */
#ifndef KC_BUNDLE_SIGN_H
#define KC_BUNDLE_SIGN_H

#include <sqlite3.h>

#include "store/storeint.h"
#include "util/secret.h"

/* Collects what an export wrote, or an import read, entry by entry. */
typedef struct kc_bundle_sig {
    struct kc_sig_item *items;
    size_t n, cap;
    int failed; /* out of memory once: the signature cannot be made */
} kc_bundle_sig;

/* Adds e as the bundle holds it (before the import gate clamps its dates). */
void kc_bundle_sig_add(kc_bundle_sig *s, const kcache_entry *e);
/* The signature of everything added, whatever the order it came in. 0 or KCACHE_ENOMEM. */
int kc_bundle_sig_finish(uint8_t out[KC_MAC_SIZE], kc_bundle_sig *s, const kc_secret *secret);
void kc_bundle_sig_free(kc_bundle_sig *s);

/* The bundle's signature (db: its read-only connection): 1 found, 0 none, or KCACHE_ECORRUPT. */
int kc_bundle_sig_read(sqlite3 *db, uint8_t out[KC_MAC_SIZE]);
/* Keeps sig in the bundle being finished (db: a read-write connection to it). SQLite's code. */
int kc_bundle_sig_write(sqlite3 *db, const uint8_t sig[KC_MAC_SIZE]);

/* remote_secret as the store's settings give it (unset: out->set is 0). */
void kc_bundle_secret(kc_secret *out, kcache_store *store);
/* import_require_signature as the store's settings give it. 0 or KCACHE_EINVAL. */
int kc_bundle_require_setting(int *out, kcache_store *store);

#endif
