/*
 * The drop-in NVRTC: a libnvrtc.so.N of kcache's own (see doc/design.md, "The
 * drop-in NVRTC"). real.c finds and loads NVIDIA's library and redirects a
 * program's dlopen of NVRTC to this one; shim.c serves the API.
 */
#ifndef KC_SHIM_H
#define KC_SHIM_H

#include <nvrtc.h>

#include <kcache/compile.h>

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

/*
 * nvrtcVersion without loading NVIDIA's library, once this process has
 * served a hit (shim.c). 0 with the version, or -1: ask the library.
 */
int kc_shim_hit_version(int *major, int *minor);

/* The process's compiler (opened on first need); NULL when the cache is off or has no store. */
kcache_compiler *kc_shim_compiler(void);

/* For fork: shim.c takes its own lock, then this one, and releases both after. */
void kc_real_lock(void);
void kc_real_unlock(void);

/*
 * Calls the shim makes into libkcache run with this set, so that a dlopen of
 * NVRTC from there reaches NVIDIA's library, never this one.
 */
void kc_shim_enter(void);
void kc_shim_leave(void);

/* A program handle of the drop-in's (what nvrtcProgram points to). */
struct prog {
    nvrtcProgram real;       /* NVIDIA's program, once there is one */
    char *src, *name;
    int n_headers;
    char **headers, **include_names;
    char **exprs;
    size_t n_exprs;
    char **opts;
    int n_opts;
    int compiled;            /* the program called nvrtcCompileProgram */
    nvrtcResult compile_rc;
    int passthrough;         /* every call goes to NVIDIA's program */
    kcache_result *hit;      /* served from this result of a hit */
    kcache_result *hit_ptx;  /* the PTX of an sm_XX hit, kept as an entry of its own */
    char *refusal;           /* the log of a compile kcache refused (require_hit): no output */
    /* An sm_XX miss, stored, with its include resolution: its PTX is keyed
     * from that resolution when the program asks for the PTX (kc_prog_store_ptx). */
    kcache_result *miss;
    struct kc_obs *obs;      /* what NVIDIA's compile of it read (observe.h) */
    /* While NVIDIA compiles an overlapped miss: kcache's, asked whether its
     * entry was found meanwhile (NVRTC's flow callback, on any thread). */
    const kcache_made *_Atomic stopping;
};

/*
 * NVIDIA's program for p, built from the copies (and compiled, if the
 * program compiled), so that any call can be forwarded. Returns 0 or NVRTC's
 * error (which the forwarded call then returns, as NVRTC would have).
 */
nvrtcResult kc_prog_materialize(struct prog *p, const kc_real_nvrtc **out);

/* Looks up the PTX of an sm_XX hit (p->hit_ptx) when the program first asks for it. */
void kc_prog_load_hit_ptx(struct prog *p);

/* Stores the PTX of an sm_XX miss (p->miss) when the program first asks for it. */
void kc_prog_store_ptx(struct prog *p);

/* Forwards a call on p to NVIDIA's program, built first if need be. */
#define FORWARD(p, call)                                                                           \
    do {                                                                                           \
        const kc_real_nvrtc *api_;                                                                 \
        nvrtcResult mrc_ = kc_prog_materialize((p), &api_);                                                \
        if (mrc_ != NVRTC_SUCCESS)                                                                 \
            return mrc_;                                                                           \
        return api_->call;                                                                         \
    } while (0)

#endif
