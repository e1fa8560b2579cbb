/* Checking a bundle's file before it is read (bundle_check.c). */
#ifndef KC_BUNDLE_CHECK_H
#define KC_BUNDLE_CHECK_H

#include "store/bundle_sign.h"
#include "store/storeint.h"

/*
 * Everything about the file at path that the store does not check when it
 * serves an entry, on a read-only connection that nothing in the file can
 * make run code. *has_sig and sig: the signature the bundle claims, if any.
 * 0, or an error with the message on s (nothing imported).
 */
int kc_bundle_check_file(kcache_store *s, const char *path, int *has_sig,
                         uint8_t sig[KC_MAC_SIZE]);

#endif
