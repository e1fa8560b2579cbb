/*
 * The CUDA toolkit seen from kcache: where it is, what identifies it, and
 * NVRTC and nvJitLink loaded on first use.
 *
 * Neither library is linked: loading NVRTC costs a process more in
 * relocations than a whole cache hit (doc/design.md, A hit does not load
 * NVRTC). So a hit identifies the compiler by the ELF build-id read from
 * the library file (exact to the build), and only a miss loads it.
 */
#ifndef KC_TOOLKIT_H
#define KC_TOOLKIT_H

#include <nvJitLink.h>
#include <nvrtc.h>

#include "cuda/nvrtc_points.h"
#include "util/common.h"
#include "cuda/buildid.h"

typedef struct kc_nvrtc {
    KC_NVRTC_POINTS(KC_NVRTC_FIELD)
    int major, minor;
} kc_nvrtc;

/* X(Name) for each nvJitLinkName: versioned symbols (__nvJitLinkName_13_0) behind macros in
 * nvJitLink.h, so the table is typed and loaded from those. */
#define KC_NVJITLINK_POINTS(X)                                                                     \
    X(Create)                                                                                      \
    X(Destroy)                                                                                     \
    X(AddData)                                                                                     \
    X(Complete)                                                                                    \
    X(GetLinkedCubinSize)                                                                          \
    X(GetLinkedCubin)                                                                              \
    X(GetErrorLogSize)                                                                             \
    X(GetErrorLog)                                                                                 \
    X(GetInfoLogSize)                                                                              \
    X(GetInfoLog)
#define KC_NVJITLINK_FIELD(Name) __typeof__(&__nvJitLink##Name##_13_0) Name;

typedef struct kc_nvjitlink {
    KC_NVJITLINK_POINTS(KC_NVJITLINK_FIELD)
    unsigned major, minor;
} kc_nvjitlink;

typedef struct kc_toolkit {
    char *root;          /* realpath of the toolkit root */
    char *nvrtc_path;    /* the library file */
    char *nvjitlink_path;
    char *identity;      /* what identifies its headers (versions, packages) */
    char nvrtc_id[96];   /* "libnvrtc.so.13 build-id 65be..." */
    char nvjitlink_id[96];
} kc_toolkit;

/* Finds the toolkit. Returns 0 or an error with a message. */
int kc_toolkit_find(kc_toolkit *tk, const char *explicit_root, char *msg, size_t msg_size);
void kc_toolkit_free(kc_toolkit *tk);
/* Uses this NVRTC library file instead of the toolkit's. Returns 0 or an error with a message. */
int kc_toolkit_use_nvrtc(kc_toolkit *tk, const char *path, char *msg, size_t msg_size);

/* Loads NVRTC (once per process). Returns 0 or an error with a message. */
int kc_nvrtc_get(const kc_toolkit *tk, const kc_nvrtc **out, char *msg, size_t msg_size);
int kc_nvjitlink_get(const kc_toolkit *tk, const kc_nvjitlink **out, char *msg, size_t msg_size);

/*
 * 1 if the NVRTC loaded in this process is the build tk's keys name: the
 * build-id is read from the file when the compiler opens, the library loaded
 * on the first miss, and an upgrade in between (or a library loaded earlier
 * under the same path) compiles as another build.
 */
int kc_nvrtc_loaded_is_keyed(const kc_toolkit *tk);
/* The same for nvJitLink and a link's key. */
int kc_nvjitlink_loaded_is_keyed(const kc_toolkit *tk);

/* Why a rebuild is no verdict when kc_nvrtc_loaded_is_keyed() says no. */
#define KC_LOADED_IS_ANOTHER_BUILD                                                                 \
    "the NVRTC this process loaded is another build than its file now (replaced since): "        \
    "run verify again"

/*
 * 1 if a library identity (nvrtc_id, nvjitlink_id) holds no build-id: the
 * file had none, and nothing tells its build from another of the same name.
 */
int kc_toolkit_id_unknown(const char *id);

/*
 * Calls fn with the handle of every NVRTC loaded from then on, before its
 * first compile (compile/ watches what NVRTC reads of the environment).
 */
void kc_toolkit_on_nvrtc_load(void (*fn)(void *handle));

/*
 * NVIDIA's NVRTC 13.0 keeps -restrict: after one compile of a process asks
 * for it, every later compile of that process is made as if it had asked
 * (measured: the same CUBIN as -restrict given, for the rest of the process).
 * So whoever hands options to NVRTC notes them first, and a compile without
 * -restrict after one with it is not what its options give elsewhere: it is
 * neither served from nor filed in the cache.
 */
void kc_nvrtc_note_options(size_t n, const char *const *opts);
/* 1 if opts ask for -restrict (either spelling, white space around it as NVRTC strips it). */
int kc_nvrtc_opts_restrict(size_t n, const char *const *opts);
/* 1 once this process handed NVRTC a compile with -restrict. */
int kc_nvrtc_restrict_kept(void);

#endif
