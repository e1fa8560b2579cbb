/*
 * NVRTC options, canonicalised: every spelling NVRTC 13 takes of an option
 * becomes one ("-arch sm_90", "-arch=sm_90" and "--gpu-architecture=sm_90"
 * are one), the order is kept (-D/-U depend on it, and a later option may
 * override an earlier one), and what only steers where headers are found
 * (-I) is split out: what it finds is keyed instead, by content. A spelling
 * NVRTC rejects is passed on as written, for NVRTC to reject.
 */
#ifndef KC_OPTS_H
#define KC_OPTS_H

#include "util/common.h"

typedef struct kc_opts {
    char **canonical;        /* keyed and handed to NVRTC, in order */
    size_t n_canonical;
    /* Handed to NVRTC, never keyed: they cannot change the bytes (--pch and
     * its messages, --no-cache, --time). */
    char **unkeyed;
    size_t n_unkeyed;
    char **include_dirs;     /* -I operands, in order */
    size_t n_include_dirs;
    char **pre_includes;     /* -include operands */
    size_t n_pre_includes;
    char **defines;          /* -D operands, in order */
    size_t n_defines;
    char arch[32];           /* from the last -arch; "" if none */
    char **archs;            /* every -arch, as --gpu-architecture=V, in order */
    size_t n_archs;
    int several_archs;       /* -arch given with two different values */
    int real_arch;           /* some -arch is sm_XX: NVRTC then makes a CUBIN */
    /* Why NVRTC must read the options itself, uncached: an option whose
     * meaning kcache does not model (an empty value, a file NVRTC reads). */
    const char *uncached_reason;
    const char *uncached_problem;
    int no_source_include;
    int has_seed;            /* --frandom-seed given */
    int dlto;                /* -dlto given */
} kc_opts;

/* Returns 0, or KCACHE_EINVAL with a message naming the option. */
int kc_opts_parse(kc_opts *out, const char *const *argv, size_t argc, char *msg, size_t msg_size);
void kc_opts_free(kc_opts *o);

#endif
