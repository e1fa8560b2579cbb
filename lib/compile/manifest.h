/*
 * Remembered include closures (manifests): what a compile read, checked by
 * stat() on the next request instead of resolving and hashing the tree again.
 * See manifest.c for the rules that keep a check as sound as a resolution,
 * schema/004_manifests.sql for where closures live, and store/storelib.h for
 * the calls that keep them.
 */
#ifndef KC_MANIFEST_H
#define KC_MANIFEST_H

#include <sys/stat.h>

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

/*
 * kc_manifest_check(), remembered for the process (closwatch.c): a closure
 * checked again while inotify has seen no change to the directories and
 * files it covers skips their stat()s. For the checks of a hit, where the
 * same closures come back; the same answers as kc_manifest_check().
 */
int kc_manifest_check_watched(const void *blob, size_t size, int64_t recorded_at,
                              const char *name_dir, kc_buf *refreshed);

/* For tests: the stat()s of probes checks made in this process. */
uint64_t kc_manifest_stat_count(void);

/* ---- the process's memo of closure checks (closwatch.c) ---------------- */

typedef struct kc_closwatch kc_closwatch; /* the watches of one full check */

/* One probe of a closure as closwatch.c sees it. */
typedef struct kc_closwatch_probe {
    uint32_t dir;         /* index into the directories, or UINT32_MAX: none */
    int state;            /* enum kc_probe_state */
    const uint8_t *base;  /* its name in the directory, not NUL-terminated */
    uint32_t base_len;
    uint32_t vouch;       /* an absent name's: 1 + the directory probe vouching for it, or 0 */
} kc_closwatch_probe;

/*
 * 1 when a closure (its digest) was remembered and no event since touched
 * what it covers: *skip gets a bit per probe, set for those that need no
 * stat() (free() it); only probes in absolute directories are ever set, so
 * the directory of the name checked for plays no part. 0 when not, with
 * *watch set when the process checked it before (worth watching now),
 * KCACHE_ENOMEM.
 */
int kc_closwatch_lookup(uint8_t **skip, int *watch, const uint8_t digest[KC_DIGEST_SIZE],
                        uint32_t n_probes);

/*
 * Watches, before a full check, what of a closure can be watched: dirs[d]
 * the absolute path of directory d, or NULL where it is not to be covered.
 * *out NULL (and 0) when nothing could be; else pass it to
 * kc_closwatch_keep() if the check held without hashing a file, and free it.
 * 0 or KCACHE_ENOMEM.
 */
int kc_closwatch_begin(kc_closwatch **out, char *const *dirs, uint32_t n_dirs,
                       const kc_closwatch_probe *probes, uint32_t n_probes);

/*
 * What begin() found at probe i once the watches were in place (a check
 * may take it for its own stat()): 1 with *st (a stat() there, no symbolic
 * link), 0 nothing there, -1 not known (w may be NULL).
 */
int kc_closwatch_answer(const kc_closwatch *w, uint32_t i, struct stat *st);

/*
 * realpath() of each of n directories into real[i] (free() each; NULL where
 * it has none), remembered in a process that watches closures while the
 * watches of a walk to the directory (each name on the way, each link
 * read) see no change: the drop-in asks for its -I directories' on every
 * request. Elsewhere, and for a path that is not absolute, realpath()
 * itself. 0 or KCACHE_ENOMEM.
 */
int kc_closwatch_realpaths(char **real, char *const *paths, size_t n);

/* Remembers the closure begin() watched for: its check held, no file hashed. */
void kc_closwatch_keep(kc_closwatch *w, const uint8_t digest[KC_DIGEST_SIZE]);

void kc_closwatch_free(kc_closwatch *w);

/* For tests: what the memo did in this process. */
typedef struct kc_closwatch_counts {
    uint64_t hits;   /* checks it served */
    uint64_t kept;   /* closures it remembered */
    uint64_t reused; /* probes a closure's watch covered with what another's found (no syscall) */
    uint64_t walks;  /* directories walked from "/" on their own ("." or "..", or a link to one) */
    uint64_t left;   /* probes the checks it served still made */
    uint64_t reopened; /* directories a watch set-up opened more than once */
    uint64_t answered; /* probes a watch set-up found for its check (kc_closwatch_answer()) */
    uint64_t realpaths; /* real paths kc_closwatch_realpaths() took from its memo */
} kc_closwatch_counts;

void kc_closwatch_counts_get(kc_closwatch_counts *out);

#endif
