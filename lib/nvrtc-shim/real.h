/*
 * NVIDIA's NVRTC behind the drop-in (real.c): its entry points, loaded on
 * first need, which file it is and which build, and the guard that sends
 * libkcache's own dlopen of NVRTC to it.
 */
#ifndef KC_REAL_H
#define KC_REAL_H

#include <nvrtc.h>

#include "cuda/nvrtc_points.h"

/*
 * What the drop-in forwards beyond what a compile calls (KC_NVRTC_POINTS):
 * X(Name) for each nvrtcName, so that the table and its loading in real.c
 * come from one list.
 */
#define KC_SHIM_MORE_POINTS(X)                                                                     \
    X(GetOptiXIRSize)                                                                              \
    X(GetOptiXIR)                                                                                  \
    X(GetPCHHeapSize)                                                                              \
    X(SetPCHHeapSize)                                                                              \
    X(GetPCHCreateStatus)                                                                          \
    X(GetPCHHeapSizeRequired)                                                                      \
    X(SetFlowCallback)

/* NVIDIA's entry points, as loaded from the real library. */
typedef struct kc_real_nvrtc {
    KC_NVRTC_POINTS(KC_NVRTC_FIELD)
    KC_SHIM_MORE_POINTS(KC_NVRTC_FIELD)
    /* Undocumented (a program constructor with three more arguments): forwarded as is. */
    nvrtcResult (*CPEx)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                        const char *const *, int, void *, void *);
} kc_real_nvrtc;

/* NVIDIA's library, loaded on first call; NULL if it cannot be (see kc_real_error()). */
const kc_real_nvrtc *kc_real(void);
/* 1 once NVIDIA's library has been loaded in this process. */
int kc_real_loaded(void);
/*
 * The GNU build-id (hex) of the NVIDIA library loaded, read from the loaded
 * copy's own notes: the build that answers. NULL if not loaded or it has none.
 */
const char *kc_real_build_id(void);
/* Why kc_real() failed: one line. */
const char *kc_real_error(void);
/* The real library's file (realpath), or NULL if none was found. Never loads it. */
const char *kc_real_path(void);

/* For fork: shim.c takes its own lock, then this one, and releases both after. */
void kc_real_lock(void);
void kc_real_unlock(void);

/*
 * Calls the shim makes into libkcache run with this set, so that a dlopen of
 * NVRTC from there reaches NVIDIA's library, never this one.
 */
void kc_shim_enter(void);
void kc_shim_leave(void);

#endif
