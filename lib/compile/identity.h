/*
 * File identity and when to trust it: the one place that says what a file
 * is (device, inode, size, mtime, ctime to the nanosecond), when its
 * timestamps are too recent to tell an edit, and what its content's digest
 * is. The resolver (deps.c), the closure check (manifest.c) and the
 * process's memo (depmemo.c) all decide through it.
 */
#ifndef KC_IDENTITY_H
#define KC_IDENTITY_H

#include <stdint.h>

/*
 * The reference clock of the trust rule (ns since the epoch): the real time,
 * moved by $KCACHE_TEST_CLOCK_SHIFT_NS (read once) so that a test can make
 * every file look older than it is without waiting. Shifting it forward can
 * only make kcache trust a timestamp it would otherwise hash; a test that
 * uses it must make sure every edit changes a file's identity, as a real
 * wait would.
 */
int64_t kc_identity_now_ns(void);

#endif
