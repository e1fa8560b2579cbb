/*
 * What a compile reads: kcache resolves #include itself, the way NVRTC does,
 * because NVRTC cannot say what it included.
 *
 * NVRTC's search order, checked against NVRTC reading the disk by
 * tests/compile/test_compile.c (test_search_order_matches_nvrtc):
 *   - headers handed over in memory, matched by the exact include spelling,
 *     before anything on disk;
 *   - "quoted": the including file's own directory (for the main source, the
 *     directory of its name; for an in-memory header, the directory of its
 *     name relative to the working directory), then each -I directory in
 *     order; the source's directory is not searched for headers included by
 *     other headers. With -no-source-include no file's directory is searched,
 *     not even a header's on disk (checked with NVRTC 13);
 *   - <angled>: each -I directory in order;
 *   - in every directory looked in, a name whose last part has no '.' is
 *     looked for as NAME, then NAME.stdh (<foo> takes e/foo.stdh ahead of
 *     d/foo with -I e -I d);
 *   - nothing else: NVRTC has no default include directory.
 *
 * The rule that keeps a key honest is "hermetic or uncached": during a cached
 * compile NVRTC reads nothing the key does not cover.
 *   - Every header found outside the toolkit is read, hashed and handed to
 *     NVRTC in memory under one canonical name per file (deps.c says which,
 *     and why includes are rewritten to it), and the user's -I directories
 *     are not passed on, so NVRTC cannot read a file that was not hashed.
 *   - A toolkit header is one whose REAL path lies in the toolkit; it is
 *     keyed by the toolkit's build and read by NVRTC from disk through the
 *     toolkit's -I directories (passed by their real paths). A path that
 *     only passes through the toolkit's directory is a user file.
 *   - Toolkit headers are followed too, in NVRTC's order, so a user
 *     directory ahead of the toolkit's that holds a name a toolkit header
 *     includes is seen, and that file handed over under the toolkit
 *     header's spelling.
 *   - --no-source-include stops NVRTC looking beside toolkit headers too: a
 *     "quoted" include plain NVRTC finds beside a toolkit header (crt/'s
 *     "host_defines.h") is handed over by that spelling, as an #include of
 *     the file by its real path, when no other lookup of that spelling
 *     finds anything else (hermetic.c).
 *   - In-memory headers' "quoted" includes are looked for beside their names.
 *   - Macro text is scanned wherever it comes from: files, -include'd files,
 *     and -D operands (as the #defines NVRTC makes of them). A __has_include
 *     in a macro is evaluated where the macro is expanded, so it is looked up
 *     from every file the compile reads and must find the same from each.
 *   - What the scanner cannot be certain it reads as NVRTC does (a %:
 *     directive, __has_include of a non-literal, a digit separator before
 *     C++14, #include_next, a computed include it cannot expand) makes the
 *     resolution not hermetic: the caller compiles from disk, uncached, and
 *     says why. kcache never guesses.
 * Every path looked at is recorded for the manifest (manifest.c), except what
 * toolkit headers' own lookups find inside the toolkit (the build keys it).
 */
#ifndef KC_DEPS_H
#define KC_DEPS_H

#include <stddef.h>
#include <stdint.h>

#include "resolve/identity.h"
#include "util/codec.h"

/* One directive found by the scanner. */
enum kc_directive_kind {
    KC_DIR_INCLUDE = 1,     /* #include or #import */
    KC_DIR_INCLUDE_NEXT,    /* #include_next */
    KC_DIR_HAS_INCLUDE,     /* __has_include(...) in a condition */
    KC_DIR_DEFINE,          /* #define NAME value (object-like) */
    /*
     * A construct the scanner cannot be sure it reads as NVRTC does (a %:
     * digraph directive, __has_include with an operand that is not a
     * literal, a digit separator under a standard older than C++14): `text`
     * says which. The compile runs uncached: kcache never guesses.
     */
    KC_DIR_UNCERTAIN,
    /* A function-like #define: `text` its name, `value` its body, for
     * finding macros that wrap __has_include (CCCL's _CCCL_HAS_INCLUDE). */
    KC_DIR_FUNC_DEFINE,
    /* NAME(argument) in an #if, #elif or #define: `text` the name, `value`
     * the argument; a probe if NAME turns out to wrap __has_include. */
    KC_DIR_CALL,
    /* An #if or #elif: `text` its condition, expanded as the preprocessor
     * does for the __has_include it evaluates (condition.c). */
    KC_DIR_CONDITION,
};

typedef struct kc_directive {
    int kind;
    int angle;         /* <...> rather than "..." */
    int digit_sep;     /* UNCERTAIN only: a digit separator, uncertain before C++14 alone */
    int time_macro;    /* UNCERTAIN only: __DATE__ or __TIME__, the moment of the compile */
    int computed;      /* the operand is not "..." or <...>: macro text in `text` */
    /*
     * HAS_INCLUDE and CALL: in a #define's body, so evaluated wherever the
     * macro is expanded; a "quoted" operand is looked up beside that file.
     */
    int in_macro;
    unsigned line;
    char *text;        /* spelling, macro text, or for DEFINE the name */
    char *value;       /* DEFINE: the replacement text, trimmed */
    char *params;      /* FUNC_DEFINE: the parameter list, between its parentheses */
    /*
     * Literal spellings: where the spelling's first byte sits in the text
     * scanned, when the bytes there are exactly the delimited spelling (no
     * line splice or comment inside), so that it can be rewritten in place.
     */
    size_t at;
    int exact;
} kc_directive;

/*
 * Scans source text for include directives, __has_include and object-like
 * #defines, skipping comments and string literals, honouring line splices.
 * Conditionals are not evaluated: every branch is seen. *out is an array of
 * *n directives, freed with kc_directives_free(). Returns 0 or ENOMEM.
 */
int kc_scan(kc_directive **out, size_t *n, const char *text, size_t size);
void kc_directives_free(kc_directive *d, size_t n);

/* How a name handed to NVRTC (or left to it) resolved. */
enum kc_dep_state {
    KC_DEP_USER = 1,  /* a file outside the toolkit: read, hashed, handed over */
    KC_DEP_TOOLKIT,   /* inside the toolkit: identified by its path there */
    KC_DEP_ABSENT,    /* looked for and not found */
};

/*
 * One name in the compile. A USER dep is handed to NVRTC in memory under
 * `name`: a file's canonical name (see deps.c), or an alias that a computed
 * include expands to, whose content is one #include of the canonical name.
 * TOOLKIT and ABSENT deps keep the spelling NVRTC will look up.
 */
typedef struct kc_dep {
    char *name;
    int state;
    uint8_t digest[KC_DIGEST_SIZE]; /* USER: of content, as handed over */
    char *content;    /* USER: NUL-terminated, include spellings rewritten */
    size_t size;
    char *toolkit_rel; /* TOOLKIT: path relative to the toolkit root */
    char *path;       /* where it was found (messages only, never keyed) */
    /*
     * USER, read from disk: the path NVRTC reading the disk opens it by, which
     * it writes for the header's __FILE__ and in its diagnostics (names.c).
     * NULL: the caller's in-memory header, named so already.
     */
    char *nvpath;
    int nv_ambiguous; /* reached by two such paths: which one NVRTC says is not known */
    int nv_from_name; /* nvpath starts with the program's directory (found beside it) */
} kc_dep;

typedef struct kc_deps_request {
    const char *source;       /* main source text */
    size_t source_size;
    const char *source_name;  /* the name NVRTC is given: no header may take it */
    const char *source_dir;   /* directory of the main source, or NULL */
    int no_source_include;
    const char *const *include_dirs; /* -I, in order */
    size_t n_include_dirs;
    /* -D operands ("NAME", "NAME=VALUE", "NAME(ARGS)=VALUE"), in order: scanned as
     * the #defines NVRTC makes of them. -U needs no look: the resolver takes
     * every definition of a name as possible, and -U only removes one. */
    const char *const *defines;
    size_t n_defines;
    const char *const *pre_includes; /* -include operands */
    size_t n_pre_includes;
    const char *toolkit_root;        /* realpath of the toolkit, or NULL */
    /* Headers handed over in memory (nvrtcCreateProgram's): found by exact
     * spelling before anything on disk; each one is a dependency. */
    const char *const *mem_names;
    const char *const *mem_contents;
    size_t n_mem;
    /* When the resolution began (ns since the epoch), for the process's
     * memo of headers (resolve/depmemo.c); 0: nothing is kept. */
    int64_t read_at;
    /* The compile's -std is older than C++14: a digit separator lexes as a
     * character literal there, so a text with one is not followed. */
    int before_cxx14;
} kc_deps_request;

typedef struct kc_deps {
    kc_dep *deps;             /* sorted by name */
    size_t n_deps;
    /* The source as handed to NVRTC: its include spellings rewritten to
     * canonical names. NULL when nothing needed rewriting. */
    char *source;
    size_t source_size;
    /*
     * Toolkit headers the hermetic compile hands NVRTC by spelling, in pairs:
     * the spelling, then the header below the toolkit's root. Each goes in
     * memory as one #include of that header by its real path: includes that
     * plain NVRTC finds beside a toolkit header ("host_defines.h" in crt/),
     * which --no-source-include would take from elsewhere (hermetic.c).
     * Keyed (compile/key.c).
     */
    char **handed;
    size_t n_handed;
    /* Where every toolkit header the resolution followed was read (for the
     * macros they define: compile/progname.c). */
    char **tk_read;
    size_t n_tk_read;
    kc_probe *probes;         /* every path looked at, in order */
    size_t n_probes;
    /* A path under the name's directory was looked at both beside the name and
     * another way: the closure holds only for this name's directory. */
    int beside_mixed;
    /*
     * Non-zero when the compile cannot be made hermetic: a computed include
     * that could not be worked out, #include_next, an alias that would name
     * two files. `reason` is a short counter name, `problem` one line for
     * the user; the caller compiles from disk and does not cache.
     */
    int not_hermetic;
    char reason[32];
    char problem[512];
} kc_deps;

/* Resolves everything the main source reads. Returns 0, or ENOMEM/EIO with msg. */
int kc_deps_resolve(kc_deps *out, const kc_deps_request *req, char *msg, size_t msg_size);
void kc_deps_free(kc_deps *deps);

/* A path folded lexically ("a/./b/../c" -> "a/c"; a leading ".." stays), or NULL. */
char *kc_path_normalized(const char *path);

#endif
