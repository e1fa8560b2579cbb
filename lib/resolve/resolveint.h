/*
 * The include resolver's state, shared by the files that make it up, each
 * using only those below it: deps.c (scanning each file and the entry
 * point), expand.c (computed includes and macros that wrap __has_include),
 * condition.c (#if conditions expanded for the __has_include they reach),
 * names.c (canonical names and the texts handed to NVRTC), hermetic.c (the
 * toolkit headers the hermetic compile hands over by spelling, proven to
 * find what plain NVRTC finds), lookup.c (the search in NVRTC's order, and
 * each path looked at) and resolver.c (what all of them use). Private to
 * resolve/: the layers above use deps.h.
 */
#ifndef KC_RESOLVEINT_H
#define KC_RESOLVEINT_H

#include "resolve/depmemo.h"
#include "resolve/deps.h"
#include "util/strmap.h"

/* A compile that reads more files than this is not one kcache can key. */
#define KC_MAX_FILES 20000
/* How deep a computed include's macros are followed, and how many names it may give. */
#define KC_MAX_EXPANSION 8
#define KC_MAX_CANDIDATES 64

static inline int kc_res_grow(void **p, size_t *cap, size_t n, size_t elem)
{
    void *q = kc_grow(*p, cap, n, elem, 16);
    if (!q)
        return KCACHE_ENOMEM;
    *p = q;
    return 0;
}

/* One file read (node 0 is the main source). */
struct node {
    char *path;           /* NULL for the source */
    char *dir;            /* quoted includes look here first; NULL: nowhere */
    size_t parent;        /* the node whose include found it first */
    char *spelling;       /* ... by this spelling */
    int beside;           /* ... in that includer's own directory */
    char *text;           /* owned, except the source's */
    size_t size;
    kc_directive *dirs;
    size_t n_dirs;
    size_t *target;       /* per directive: 1 + the node a literal include names, or 0 */
    char *canon;
    char *nvpath;         /* the path NVRTC reading the disk opens it by (see kc_res_nvpath) */
    int nv_ambiguous;     /* reached by two such paths, or from a file without one */
    int nv_from_name;     /* that path starts with the program's directory */
    int in_memory;        /* handed over by the caller under spelling: keeps that name */
    int cmdline;          /* the -D operands as #defines: no file, never a dependency */
    int toolkit;          /* a toolkit header: followed for what it includes, never handed over */
    int other_dirs;       /* also reached by a path in another directory (a symlink) */
    kc_probe id;          /* identity and digest of text as read */
    kc_memo *memo;        /* text and dirs are the memo's, borrowed */
};

/* A spelling left to NVRTC: a toolkit header or a missing one. */
struct leftname {
    char *name;
    int state;            /* KC_DEP_TOOLKIT or KC_DEP_ABSENT */
    char *rel;
    char *path;
};

/* A name a computed (or not rewritable) include is handed over under. */
struct alias {
    char *name;
    size_t node;
};

/*
 * A lookup whose answer the hermetic compile leaves to NVRTC's own search of
 * the toolkit's directories: a toolkit header, or nothing (hermetic.c).
 */
struct tklook {
    char *spelling;
    char *rel;            /* the toolkit header plain NVRTC finds, below the root; NULL: none */
    char *beside;         /* found beside its includer, in this toolkit directory (real path) */
    size_t from;          /* the includer, for messages */
};

struct pending {
    size_t node, dir;
};

/* A file found beside its includer: its NVRTC path is known only if the includer's is. */
struct beside {
    size_t node, from;
};

struct macro {
    char **values;
    size_t n;
};

/*
 * A __has_include in macro text (a #define's body, a -D value, the argument
 * of a wrapper's call there): NVRTC evaluates it in whichever file expands
 * the macro, so it is looked up from every file the compile reads, and must
 * find the same there (answer: 1 + the user file, or 0: none, or the
 * toolkit's) for the in-memory name to stand for all of them.
 */
struct mprobe {
    char *spelling;
    int angle;
    size_t from;          /* where the macro text was, for messages */
    unsigned line;
    size_t sites;         /* nodes looked up from so far */
    int answered;
    size_t answer, first; /* what the first file looked up from (first) found */
};

struct resolver {
    const kc_deps_request *req;
    kc_deps *out;
    struct node *nodes;
    size_t n_nodes, cap_nodes, next_scan;
    kc_smap by_path;      /* path -> 1 + node index, or 0: not a user file */
    kc_smap by_identity;  /* "dev:ino" -> node */
    kc_smap toolkit_dirs; /* directory -> 0 user, 1 + index into dir_reals */
    char **dir_reals;
    size_t n_dir_reals, cap_dir_reals;
    char **tk_rels;          /* toolkit headers found, below the root */
    size_t n_tk_rels, cap_tk_rels;
    size_t cap_probes;
    struct leftname *left;
    size_t n_left, cap_left;
    kc_smap by_left;      /* name -> index into left */
    struct alias *aliases;
    size_t n_aliases, cap_aliases;
    struct pending *pending;
    size_t n_pending, cap_pending;
    kc_smap by_memory;    /* in-memory header name -> node */
    kc_smap by_macro;     /* name -> index into macros */
    /* Spellings that toolkit headers include and NVRTC finds in the toolkit
     * or nowhere: an in-memory header of that name would take their place. */
    kc_smap tk_names;
    int pre_include;         /* resolving an -include: the working directory first */
    kc_smap tk_nodes;     /* toolkit path -> node, so each is scanned once */
    kc_smap vouchers;     /* directory -> 1 + its DIR probe, or 0: none exists */
    /* Paths under the name's directory -> how they were looked at: 1 beside
     * the name, 2 another way (kc_deps.beside_mixed when both). */
    kc_smap routes;
    int looking_beside;   /* kc_res_look() is looking beside the name */
    kc_smap wrappers;     /* function-like macros that wrap __has_include */
    struct pending *calls;   /* NAME(arg) seen in conditions, not yet probed */
    struct mprobe *mprobes;
    size_t n_mprobes, cap_mprobes;
    size_t n_calls, cap_calls;
    char **func_names, **func_bodies;  /* every function-like #define seen */
    size_t n_funcs, cap_funcs, cap_func_bodies;
    struct macro *macros;
    size_t n_macros, cap_macros;
    size_t n_macro_values;   /* values in macros, all names together */
    /* What the wrappers were last worked out from (n_funcs, n_macro_values,
     * 1 + wrappers.n), and the calls checked against that many wrappers: only
     * what came since needs a look (expand.c). */
    size_t wrapped_funcs, wrapped_values, wrapped_n;
    size_t calls_checked, calls_checked_n;
    struct tklook *looks;
    size_t n_looks, cap_looks;
    kc_smap by_look;      /* spelling, answer and directory -> index into looks */
    struct beside *beside;
    size_t n_beside, cap_beside;
    struct kc_cond_state *cond; /* the #if conditions and every definition (condition.c) */
    char *msg;
    size_t msg_size;
};

/* resolver.c */
/* Marks the resolution not hermetic (the first reason stays): the compile runs uncached. */
void kc_res_not_hermetic(struct resolver *r, const char *reason, const char *fmt, ...)
    KC_PRINTF(3, 4);
/* Where a node came from, for messages. */
const char *kc_res_where(const struct node *nd);
/* The directory part of a path ("." for none), or NULL. */
char *kc_path_dirname(const char *path);

/* A new node, or 1 when the compile reads too many files (not hermetic). */
int kc_res_new_node(struct resolver *r, size_t *out);
/* Whether a directory is the toolkit's (*inside), with its real path in *real. */
int kc_res_toolkit_dir(struct resolver *r, const char *dir, const char **real, int *inside);
/* Whether NVRTC also looks for SPELLING.stdh where SPELLING is not. */
int kc_res_stdh_too(const char *spelling);

/* lookup.c */
int kc_res_look(struct resolver *r, const char *path, int in_toolkit, int from_toolkit,
                int beside_name,
                size_t *node, const char **toolkit_rel);
int kc_res_resolve(struct resolver *r, const char *spelling, int angle, size_t from,
                   size_t *found);
int kc_res_add_alias(struct resolver *r, const char *name, size_t node);
/* 1 if path can be written in a #line directive as it is (names.c). */
int kc_res_line_spellable(const char *path);
/* Spreads what a node's NVRTC path is (ambiguous, from the program's directory) to the nodes
 * found beside it. */
void kc_res_nvpath_spread(struct resolver *r);
/* Frees the strings l holds (lookup.c), not l. */
void kc_res_left_clear(struct leftname *l);

/* hermetic.c */
/* Remembers a lookup left to NVRTC's search of the toolkit (see struct tklook). */
int kc_res_record_look(struct resolver *r, const char *spelling, const char *rel,
                       const char *beside, size_t from);
/*
 * The toolkit headers the hermetic compile hands over by spelling
 * (out->handed), when every lookup remembered then finds what plain NVRTC
 * found; otherwise the resolution is not hermetic.
 */
int kc_res_hermetic_handed(struct resolver *r);
/* Frees the strings l holds (hermetic.c), not l. */
void kc_res_look_clear(struct tklook *l);

/* expand.c */
int kc_res_is_ident_char(int c);
int kc_res_resolve_calls(struct resolver *r, size_t *progress);
int kc_res_add_macro_probe(struct resolver *r, const char *spelling, int angle, size_t from,
                           unsigned line);
int kc_res_resolve_macro_probes(struct resolver *r, size_t *progress);
int kc_res_resolve_pending(struct resolver *r, const struct pending *p);
/*
 * Looks up every header name the operand of a __has_include evaluated in
 * node can give (text: "x", <x> or a macro's name, as kc_res_resolve_pending
 * follows them); *ok is 0 when kcache cannot work them all out.
 */
int kc_res_probe_operand(struct resolver *r, const char *text, size_t node, int *ok);

/* condition.c */
/* Records a definition (DEFINE or FUNC_DEFINE) for the expansion of conditions. */
int kc_res_cond_define(struct resolver *r, const kc_directive *d);
/* Records the #if or #elif d of node. */
int kc_res_cond_add(struct resolver *r, size_t node, const kc_directive *d);
/*
 * Expands the conditions not yet expanded with the definitions seen so far
 * (all of them again when there are new definitions), probing what each
 * __has_include met asks; *progress counts conditions expanded.
 */
int kc_res_cond_expand(struct resolver *r, size_t *progress);
void kc_res_cond_free(struct resolver *r);

/* names.c */
int kc_res_assign_names(struct resolver *r);
int kc_res_emit(struct resolver *r);

#endif
