/*
 * Remembered include closures (manifests): what a compile read, checked by
 * stat() on the next request instead of resolving and hashing the tree again.
 * See manifest.c for the rules that keep a check as sound as a resolution,
 * schema/004_manifests.sql for where closures live, and store/internal.h for
 * the calls that keep them.
 */
#ifndef KC_MANIFEST_H
#define KC_MANIFEST_H

#include "resolve/deps.h"
#include "util/common.h"

/* Encodes a resolution's probes. */
int kc_manifest_encode(kc_buf *out, const kc_probe *probes, size_t n);

/*
 * Checks a closure whose files were read at recorded_at (ns since the epoch)
 * against the disk. Returns 1 when every path still holds what it held, 0
 * when one does not (or the blob does not parse), KCACHE_ENOMEM. When the
 * closure holds but a file had to be hashed (new timestamps with the same
 * bytes, or timestamps too recent to trust), *refreshed gets a closure with
 * the identities seen now, to be put back as read at the time the check began,
 * so that the next check needs only stat(); it is left empty otherwise.
 */
int kc_manifest_check(const void *blob, size_t size, int64_t recorded_at, kc_buf *refreshed);

#endif
