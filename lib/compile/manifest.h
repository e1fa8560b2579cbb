/*
 * Remembered include closures (manifests): what a compile read, checked by
 * stat() on the next request instead of resolving and hashing the tree again.
 * See manifest.c for the rules that keep a check as sound as a resolution,
 * schema/004_manifests.sql for where closures live, and store/storelib.h for
 * the calls that keep them.
 */
#ifndef KC_MANIFEST_H
#define KC_MANIFEST_H

#include "resolve/deps.h"
#include "util/common.h"

/*
 * Encodes a resolution's probes. name_dir: the directory of the program's
 * name, when the closure may stand for any (kc_manifest_any_dir()): the looks
 * beside the name are recorded relative to it. NULL: every path as it is.
 */
int kc_manifest_encode(kc_buf *out, const kc_probe *probes, size_t n, const char *name_dir);

/*
 * 1 if a closure may be checked under another directory of the program's
 * name: nothing was found beside the name (beside_name probes all absent), no
 * path under its directory was looked at both beside it and another way, and
 * no probe is the program's own file (source_path). 0 if not.
 */
int kc_manifest_any_dir(const kc_probe *probes, size_t n, int beside_mixed,
                        const char *source_path);

/*
 * Checks a closure whose files were read at recorded_at (ns since the epoch)
 * against the disk. Returns 1 when every path still holds what it held, 0
 * when one does not (or the blob does not parse), KCACHE_ENOMEM. When the
 * closure holds but a file had to be hashed (new timestamps with the same
 * bytes, or timestamps too recent to trust), *refreshed gets a closure with
 * the identities seen now, to be put back as read at the time the check began,
 * so that the next check needs only stat(); it is left empty otherwise.
 * name_dir: the directory of the name checked for, which the looks recorded
 * beside a name are joined to; a closure that has such looks does not hold
 * without it.
 */
int kc_manifest_check(const void *blob, size_t size, int64_t recorded_at, const char *name_dir,
                      kc_buf *refreshed);

#endif
