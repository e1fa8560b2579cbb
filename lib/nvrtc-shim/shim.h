/*
 * The drop-in NVRTC: a libnvrtc.so.N of kcache's own (see doc/design.md, "The
 * drop-in NVRTC"). shim.c serves the API: the process's compiler and the
 * program handles the drop-in's other files share; NVIDIA's library is
 * real.h's.
 */
#ifndef KC_SHIM_H
#define KC_SHIM_H

#include <nvrtc.h>

#include <kcache/compile.h>

#include "nvrtc-shim/real.h"

/*
 * nvrtcVersion without loading NVIDIA's library, once this process has
 * served a hit (shim.c). 0 with the version, or -1: ask the library.
 */
int kc_shim_hit_version(int *major, int *minor);

/* The process's compiler (opened on first need); NULL when the cache is off or has no store. */
kcache_compiler *kc_shim_compiler(void);

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
