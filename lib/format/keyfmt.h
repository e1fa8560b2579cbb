/*
 * The layout of key material: a tag-length-value stream (tag: 1 byte,
 * length: 4 bytes little endian, bytes), so that no two different sets of
 * inputs encode to the same stream. compile/key.c writes it and says what
 * each field means; it lives here, below every layer, because the store
 * must read two of its fields too: an entry that arrives from outside (a
 * bundle, the shared tier) is checked against its own key material, and the
 * store may not know compile/ (lib/README.md).
 */
#ifndef KC_KEYFMT_H
#define KC_KEYFMT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Bump when the encoding or the meaning of a field changes: every old key
 * then misses instead of matching something it no longer describes.
 */
/* 2: headers by canonical name and by the bytes handed to NVRTC (resolve/deps.c).
 * 3: every header with its digest (2 keyed headers read from the process memo
 *    with a zero one), toolkit headers by their real paths, toolkit headers
 *    followed.
 * 4: the toolkit's -I directories (3 left them out: what toolkit headers
 *    find among themselves, a __has_include too, depends on them, and two
 *    compiles whose own includes found the same files shared one key).
 * 5: the environment variables NVRTC reads (4 left them out: an entry made
 *    with LLVM_OVERRIDE_PRODUCER set was served without it).
 * 6: the source's name only where it can change the bytes or the log
 *    (compile/progname.c): KC_TAG_ANY_NAME in its place elsewhere.
 * 7: user headers handed under the path NVRTC opens them by, keyed where it
 *    can reach the bytes or the log (KC_TAG_HEADER_PATH), and the toolkit's
 *    -I directories as spelled (KC_TAG_TOOLKIT_DIR_SPELLED): 6 handed headers
 *    under their canonical names and the toolkit's by real path, so a
 *    header's __FILE__ and the log's paths were not NVRTC's. */
#define KC_KEY_FORMAT "kcache-key-7"
/* What every version of the format starts with (its first field, KC_TAG_FORMAT). */
#define KC_KEY_FORMAT_FAMILY "kcache-key-"

/* Field tags. Values are part of the format: never renumber. */
enum kc_key_tag {
    KC_TAG_FORMAT = 1,
    KC_TAG_INPUT_KIND = 2,   /* "cuda", "ptx", "ltoir", "cubin", "link" */
    KC_TAG_OUTPUT_KIND = 3,  /* "cubin", "ptx", "ltoir" */
    KC_TAG_ARCH = 4,
    KC_TAG_NVRTC = 5,        /* NVRTC's identity */
    KC_TAG_NVJITLINK = 6,    /* nvJitLink's identity, link steps only */
    KC_TAG_OPTION = 7,       /* one canonical option; order kept */
    KC_TAG_NAME_EXPR = 8,    /* sorted */
    KC_TAG_SOURCE_NAME = 9,
    KC_TAG_SOURCE = 10,      /* BLAKE2b-256 of the source text */
    KC_TAG_HEADER = 11,      /* spelling NUL state NUL (digest hex | toolkit path | "") */
    KC_TAG_EXTRA = 12,       /* the caller's extra digest */
    KC_TAG_LINK_INPUT = 13,  /* kind NUL BLAKE2b-256 hex of one link input */
    KC_TAG_TOOLKIT = 14,     /* the toolkit whose headers were used */
    /* Written by store/keyed.c for an entry keyed by a caller (format "kcache-keyed-1"). */
    KC_TAG_NAMESPACE = 15,
    KC_TAG_CALLER_KEY = 16,
    KC_TAG_WORKDIR = 17,     /* the working directory, where line information holds it */
    /* spelling NUL toolkit header (below the root): handed to NVRTC by that
     * spelling (resolve/hermetic.c). None in most keys. */
    KC_TAG_TOOLKIT_HANDED = 18,
    /* One of the toolkit's -I directories, below its root ("." for the root);
     * order kept: the ones a hermetic compile passes. */
    KC_TAG_TOOLKIT_DIR = 19,
    /* NAME=VALUE of an environment variable NVRTC reads that is set; sorted
     * by name (compile/nvenv.c). None in most keys. */
    KC_TAG_ENVIRONMENT = 20,
    /* Empty, in place of KC_TAG_SOURCE_NAME: the entry's bytes and log were
     * shown not to depend on the source's name (compile/progname.c). */
    KC_TAG_ANY_NAME = 21,
    /* The last component of the source's name, in place of KC_TAG_SOURCE_NAME:
     * the entry's bytes held it (an anonymous namespace's members are named
     * after it) and nothing else of the name, and its log was empty
     * (compile/progname.c). */
    KC_TAG_BASE_NAME = 22,
    /* In place of KC_TAG_SOURCE_NAME: as KC_TAG_ANY_NAME, but the entry's log
     * is a template, each occurrence of the source's name in it replaced by
     * a placeholder that a hit fills with its own name (compile/progname.c).
     * "/" for a name in a directory, "" for one without. A key of its own,
     * so that a kcache that does not know templates never serves one as a log. */
    KC_TAG_LOG_TEMPLATE = 23,
    /* The paths NVRTC reading the disk opens user headers by, which a hermetic
     * compile hands them under (#line), where they may reach the bytes or the
     * log (compile/progname.c, kc_paths_free_request); at most one, after the
     * headers. u32 D, D NUL-ended -I operands as given, the NUL-ended
     * directory of the program's quoted includes ("" for none), u32 N, N
     * NUL-ended prefixes, u32 M, then M entries: u32 the
     * header's number among the KC_TAG_HEADER fields, u32 K: the path is
     * prefix K-1 followed by its name, or (K = 0) the NUL-ended path itself.
     * Little-endian. None in most keys. */
    KC_TAG_HEADER_PATH = 24,
    /* One of the toolkit's -I directories as the request spelled it, which a
     * hermetic compile passes to NVRTC (a toolkit header's __FILE__ and its
     * diagnostics say that path); order kept, one per KC_TAG_TOOLKIT_DIR. */
    KC_TAG_TOOLKIT_DIR_SPELLED = 25,
};

/* Walks an encoding; fn gets the tag and its bytes. Returns 0, fn's value or KCACHE_ECORRUPT. */
int kc_key_walk(const void *material, size_t size,
                int (*fn)(void *ud, int tag, const uint8_t *data, size_t n), void *ud);

/*
 * What an entry made from this material must be: its output kind ("cubin",
 * "ptx", "ltoir") and its architecture, as the key holds them (the entry's
 * arch is the key's, character for character). Returns 1 with both copied
 * (NUL-terminated, truncated to their sizes) when the material is in
 * kcache's format; 0 when it is not (a key no compile of kcache's asks for:
 * nothing to hold the entry to); KCACHE_ECORRUPT when it says it is
 * kcache's format but does not parse or lacks either field.
 */
int kc_key_target(char *kind, size_t kind_size, char *arch, size_t arch_size,
                  const void *material, size_t size);

/*
 * The first run of KC_TAG_HEADER records in material, with the
 * KC_TAG_HEADER_PATH record after them, as bytes [*at, *at + *len): the part
 * of a key that the kernels of one program share whole,
 * which the store keeps once (store/shared.c). Returns 1 when there is one,
 * 0 when there is none (both 0), KCACHE_ECORRUPT when the material does not
 * parse.
 */
int kc_key_header_run(const void *material, size_t size, size_t *at, size_t *len);

#endif
