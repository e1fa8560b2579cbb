/*
 * What NVIDIA's NVRTC says about itself, remembered per build in the store
 * (facts.c says why that is sound).
 */
#ifndef KC_FACTS_H
#define KC_FACTS_H

#include <kcache/compile.h>

#include "nvrtc-shim/real.h"

/* More than any NVRTC lists (CUDA 13.0: 12); a longer list is not recorded. */
#define KC_FACTS_MAX_ARCHS 64

typedef struct kc_facts {
    int major, minor;
    int n_archs;
    int archs[KC_FACTS_MAX_ARCHS];
} kc_facts;

/*
 * What the library the drop-in would load said about itself when a process
 * loaded it, without loading it: 0 with *out, or -1 (no record: ask NVRTC).
 * The record is looked up once per process, in the store of compiler (the
 * process's, kc_shim_compiler(); NULL: no store, no record).
 */
int kc_facts_get(kc_facts *out, kcache_compiler *compiler);

/*
 * Records what api (the loaded library) says in the store of compiler (as
 * kc_facts_get()), once per process. Best effort.
 */
void kc_facts_note(kcache_compiler *compiler, const kc_real_nvrtc *api);

/*
 * For fork, from shim.c's handlers: this lock is taken before the shim's
 * own and real.c's (kc_facts_note() takes real.c's under it).
 */
void kc_facts_fork_prepare(void);
void kc_facts_fork_parent(void);
void kc_facts_fork_child(void);

#endif
