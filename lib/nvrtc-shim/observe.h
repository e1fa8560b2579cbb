/*
 * What NVIDIA's NVRTC reads during a miss, seen from inside the process
 * (observe.c says how, and why that makes the drop-in sound whatever the
 * include resolver predicts).
 */
#ifndef KC_OBSERVE_H
#define KC_OBSERVE_H

#include <kcache/compile.h>

/* Every path NVRTC opened or probed on one thread, between begin and end. */
typedef struct kc_obs kc_obs;

/*
 * Starts observing the calling thread (NVIDIA's library must be loaded:
 * kc_real()). cwd is the working directory the request was resolved in, read
 * after dir_epoch was (kc_observe_dir_epoch()): a change of directory since
 * then leaves the observation incomplete. Returns NULL with *out set, or a
 * reason the observation cannot be trusted in this process
 * ("unobservable"), with *out NULL.
 */
const char *kc_observe_begin(kc_obs **out, const char *cwd, unsigned long dir_epoch);
/* How many times a thread of this process changed directory, so far (counted twice each). */
unsigned long kc_observe_dir_epoch(void);
/* Stops observing (accepts NULL). */
void kc_observe_end(kc_obs *obs);
void kc_observe_free(kc_obs *obs);

/*
 * Whether what was observed is covered by a key's closure (made->probes,
 * made->toolkit_root): NULL when it is, else the reason not to store
 * ("unpredicted-read", "closure-changed", "observation-incomplete"). The
 * program's name and its in-memory headers' names are NVRTC's to stat.
 */
const char *kc_observe_verdict(kc_obs *obs, const kcache_made *made,
                               const char *source_name, const char *const *header_names,
                               size_t n_headers);

/*
 * Checks once, when NVIDIA's library is loaded (its dlopen handle), that it
 * reaches the file system only through functions observe.c sees; the
 * verdict is "unobservable" otherwise.
 */
void kc_observe_audit(void *handle);

#endif
