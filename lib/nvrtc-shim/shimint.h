/*
 * What observe.c records during a miss and verdict.c then compares with the
 * key's closure: the records' encoding, an observation, and the reasons not
 * to store. Private to the drop-in.
 */
#ifndef KC_SHIMINT_H
#define KC_SHIMINT_H

#include <limits.h>
#include <stddef.h>

#include "nvrtc-shim/observe.h"

/* What a record says was asked. Stats are the probes NVRTC's own fixed names may use. */
enum { OP_OPEN = 1, OP_STAT, OP_PROBE };
/* What was there. */
enum { SEEN_ABSENT = 0, SEEN_FILE, SEEN_DIR, SEEN_OTHER };

struct kc_obs {
    char *arena; /* records: op u8, seen u8, length u16, path, NUL */
    size_t used, cap;
    int mapped;        /* arena is an mmap (else malloc'd, compacted at end) */
    int depth;         /* > 0 while a record is being written */
    const char *taint; /* why the observation is incomplete, or NULL */
    char cwd[PATH_MAX];
    char pwd[PATH_MAX];       /* $PWD, which NVRTC stats to name the working directory */
    unsigned long dir_epoch;  /* kc_observe_dir_epoch() when cwd was read */
    unsigned long spawned_at; /* spawned_calls when the miss began */
    /* The last verdict, for the closure it was given (an sm_XX compile's PTX
     * entry asks again for the same compile and, nearly always, closure). */
    char *judged_closure; /* closure_text() of the closure judged, or NULL */
    size_t judged_size;
    const char *judged;
};

/* The reasons not to store (shim.c counts them by name). */
#define R_UNOBSERVABLE "unobservable"
#define R_INCOMPLETE "observation-incomplete"
#define R_UNPREDICTED "unpredicted-read"
#define R_CHANGED "closure-changed"

/* Says why a miss is not stored, on stderr, where KCACHE_OBSERVE_DEBUG is set. */
void kc_obs_say_why(const char *what);

#endif
