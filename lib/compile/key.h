/*
 * The key: BLAKE2b-256 over a tag-length-value encoding of every input that
 * can change the output. Each field is (tag: 1 byte, length: 4 bytes little
 * endian, bytes), so no two different sets of inputs encode to the same
 * stream (the layout and the tags: format/keyfmt.h, which the store reads
 * too). The encoding is kept with the entry (key material) so that inspect
 * can show it and explain can compare two.
 */
#ifndef KC_KEY_H
#define KC_KEY_H

#include "resolve/deps.h"
#include "util/common.h"
#include "format/keyfmt.h"

typedef struct kc_keybuf {
    kc_buf b;
    int failed;
} kc_keybuf;

void kc_key_add(kc_keybuf *k, int tag, const void *data, size_t size);
void kc_key_add_str(kc_keybuf *k, int tag, const char *s);
/* BLAKE2b-256 of the encoding. */
void kc_key_finish(const kc_keybuf *k, kcache_key *out);

/* What a compile's key is made of: every input that can change the bytes. */
typedef struct kc_key_compile {
    const char *output_kind;      /* "cubin", "ptx", "ltoir" */
    const char *arch;             /* as NVRTC is given it */
    const char *nvrtc_id;
    const char *toolkit_id;
    const char *const *options;   /* canonical, in order */
    size_t n_options;
    const char *const *name_exprs; /* any order, duplicates allowed */
    size_t n_name_exprs;
    const char *source_name;
    int any_name;                 /* KC_TAG_ANY_NAME instead of the name (compile keys only) */
    const char *base_name;        /* else KC_TAG_BASE_NAME with this instead of the name */
    /* Else KC_TAG_LOG_TEMPLATE with this: "/" for a name in a directory, "" for one
     * without (a header found beside it is printed with the name's directory). */
    const char *log_template;
    const void *source;
    size_t source_size;
    const kc_dep *deps;           /* every header read or looked for */
    size_t n_deps;
    const char *const *handed;    /* toolkit headers handed by spelling: kc_deps's pairs */
    size_t n_handed;
    const char *const *tk_dirs;   /* the toolkit's -I directories, below its root, in order */
    const char *const *tk_spelled; /* ... and as the request spelled them (or NULL) */
    size_t n_tk_dirs;
    int paths;                    /* KC_TAG_HEADER_PATH for each user header read from disk */
    /* ... with what NVRTC joins them of: the -I operands as given and the directory
     * quoted includes of the program are looked for in (NULL where no header was
     * found there). */
    const char *const *include_dirs;
    size_t n_include_dirs;
    const char *source_dir;
    const void *extra;            /* the caller's extra digest */
    size_t extra_size;
    /* The working directory NVRTC writes into line information (-lineinfo,
     * -G: PTX's .file holds it joined with each file's name), or NULL. */
    const char *workdir;
    /* NAME=VALUE of each variable NVRTC reads that is set, sorted (compile/nvenv.c). */
    const char *const *env;
    size_t n_env;
} kc_key_compile;

/* What a link's key is made of. */
typedef struct kc_key_link {
    const char *arch;
    const char *nvjitlink_id;
    int lto;
    const char *const *options;
    size_t n_options;
    size_t n_inputs;
    const kcache_kind *kinds;     /* per input */
    const void *const *data;
    const size_t *sizes;
} kc_key_link;

/*
 * Encodes a compile's or a link's inputs into *material (a new buffer) and
 * derives the key from it. Returns 0 or KCACHE_ENOMEM: the format holds
 * inputs of any length.
 */
int kc_key_encode_compile(kc_buf *material, kcache_key *key, const kc_key_compile *in);
/*
 * The key closures are kept under (compile/manifest.c): everything a compile's
 * key has but the headers (in->deps is not read; in->source is the source as
 * given), plus where headers are searched, as strings ("include-dir" NUL
 * absolute path, ...), since a closure names paths. Never an entry's key.
 */
int kc_key_encode_base(kcache_key *key, const kc_key_compile *in, const char *const *search,
                       const size_t *search_sizes, size_t n_search);
int kc_key_encode_link(kc_buf *material, kcache_key *key, const kc_key_link *in);

/* What key material says a compile or link was, for rebuilding it. */
typedef struct kc_recipe {
    int format;          /* the N of kcache-key-N, 0 if the material does not say */
    char input[16], output[16], arch[32], nvrtc[128], nvjitlink[128], toolkit[4096];
    char source_name[1024];
    char workdir[4096];  /* "" unless line information holds it */
    char **options;
    size_t n_options;
    char **exprs;
    size_t n_exprs;
    char **toolkit_dirs; /* derived from the toolkit headers, relative to the root (format 3) */
    size_t n_toolkit_dirs;
    char **handed;       /* pairs: a spelling, the toolkit header it is handed as */
    size_t n_handed;
    char **tk_dirs;      /* the toolkit's -I directories as keyed (format 4 on), below the root */
    size_t n_tk_dirs;
    char **tk_spelled;   /* ... as spelled (format 7 on) */
    size_t n_tk_spelled;
    char **header_paths; /* pairs: a header's canonical name, the path it was handed under */
    size_t n_header_paths;
    char **header_names; /* every KC_TAG_HEADER field's name, in order */
    size_t n_header_names;
    char **link_kinds;   /* per link input */
    size_t n_link;
    char **env;          /* NAME=VALUE of NVRTC's environment variables set, sorted */
    size_t n_env;
    int lto;
} kc_recipe;

/* Decodes material into *out (zeroed first). Returns 0, KCACHE_ECORRUPT or KCACHE_ENOMEM. */
int kc_key_decode(kc_recipe *out, const void *material, size_t size);
void kc_recipe_free(kc_recipe *rc);

/* The component name of a tag ("option", "header", ...), or NULL. */
const char *kc_key_tag_name(int tag);

#endif
