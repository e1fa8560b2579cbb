/*
 * File identity and when to trust it: the one place that says what a file
 * is (device, inode, size, mtime, ctime to the nanosecond), when its
 * timestamps are too recent to tell an edit, and what its content's digest
 * is. The resolver (deps.c), the closure check (manifest.c) and the
 * process's memo (depmemo.c) all decide through it, so that no path keys a
 * header without its digest or trusts a timestamp the others would not.
 *
 * The rule: a file's identity stands for its bytes only when neither its
 * mtime nor its ctime is within KC_IDENTITY_RACY_NS of the moment it was read
 * (the reference clock below). Closer than that, an edit in the same
 * timestamp tick could leave the identity as it was, so the file is hashed
 * instead. ctime cannot be set from user space, so an edit that restores
 * size and mtime still shows.
 */
#ifndef KC_IDENTITY_H
#define KC_IDENTITY_H

#include <stdint.h>
#include <sys/stat.h>

#include "util/codec.h"

/*
 * Two seconds covers the coarsest file systems Linux mounts read-write
 * (FAT's mtime); the kernel's own clock tick (1-10 ms) is far inside it.
 */
#define KC_IDENTITY_RACY_NS (2000000000ll)
/* KC_IDENTITY_RACY_NS, a variable so that tests can show what each rule catches. */
extern int64_t kc_identity_racy_ns;

/* What one stat of the resolution saw: the manifest checks these later. */
enum kc_probe_state {
    KC_PROBE_ABSENT = 0, /* nothing there, or not a regular file */
    KC_PROBE_FILE,       /* a user file: digest of its bytes */
    KC_PROBE_TOOLKIT,    /* a toolkit file: identity only */
    /* A directory: while its identity holds and is trusted, no entry was
     * added, removed or renamed in it, so every ABSENT probe it vouches for
     * is still absent without a stat of its own. */
    KC_PROBE_DIR,
};

typedef struct kc_probe {
    char *path;
    int state;
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
    uint8_t digest[KC_DIGEST_SIZE];
    /* ABSENT: 1 + the index of the DIR probe (earlier in the list) that is the
     * nearest existing directory above the path, or 0. */
    uint32_t vouch;
    /* Looked at beside the program's name (its directory joined with a quoted
     * spelling of the main source): the same look under another name's
     * directory is this path with that directory instead (compile/manifest.c). */
    int beside_name;
} kc_probe;

/*
 * The reference clock of the trust rule (ns since the epoch): the real time,
 * moved by $KCACHE_TEST_CLOCK_SHIFT_NS (read once) so that a test can make
 * every file look older than it is without waiting. Shifting it forward can
 * only make kcache trust a timestamp it would otherwise hash; a test that
 * uses it must make sure every edit changes a file's identity, as a real
 * wait would.
 */
int64_t kc_identity_now_ns(void);

/* Fills id's device, inode, size and times from st (path, state, digest untouched). */
void kc_identity_of(kc_probe *id, const struct stat *st);

/* Whether two identities are the same file unchanged (digests not compared). */
int kc_identity_same(const kc_probe *a, const kc_probe *b);

/* Whether an identity read at read_at (kc_identity_now_ns()) stands for its bytes. */
int kc_identity_trusted(const kc_probe *id, int64_t read_at);

/*
 * Reads a regular file (at most KC_IDENTITY_MAX_SIZE bytes) with the identity
 * of what was opened and the digest of what was read: the only way a user
 * file's bytes are read for a key. 0, or KCACHE_EIO/EINVAL/ENOMEM with errno
 * saying why (EFBIG, EISDIR for what is not a header).
 */
int kc_identity_read(const char *path, char **out, size_t *size, kc_probe *id);

/* Upper bound on one header's size: anything larger is not a header. */
#define KC_IDENTITY_MAX_SIZE (64u << 20)

#endif
