/* Shared by compile.c (one source) and link.c (nvJitLink). */
#ifndef KC_COMPILEINT_H
#define KC_COMPILEINT_H

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>

#include "util/common.h"
#include "util/strmap.h"
#include "resolve/deps.h"
#include "kcache/compile.h"
#include "compile/key.h"
#include "compile/nvenv.h"
#include "compile/opts.h"
#include "cuda/toolkit.h"
#include "remote/sharedfs.h"
#include "remote/tier.h"
#include "store/storelib.h"

struct kcache_compiler {
    kc_toolkit tk;
    kcache_store *store;
    int own_store;
    int store_status;       /* why there is no store */
    char store_message[512];
    unsigned wait_timeout_ms;
    kcache_remote *remote;  /* the shared tier, or NULL */
    char remote_message[512]; /* why a remote that is set is not used */
    kc_shared *shared;        /* the shared file system tier, or NULL */
    char shared_message[512]; /* why a shared directory that is set is not used */
    kcache_log_fn log;
    void *log_userdata;
    int require_hit;        /* require_hit: what the cache cannot serve fails, uncompiled */
    int request_log;        /* the log setting's file, open to append; -1: none */
};

/*
 * An include resolution kept with a miss's result (KCACHE_COMPILE_KEEP_RESOLUTION),
 * for a request of the same inputs to reuse (kcache_request.resolution_of).
 */
struct kc_kept_resolution {
    kc_deps deps;
    int64_t resolved_at;
    uint8_t inputs[KC_DIGEST_SIZE];  /* what it read: compile.c, resolution_inputs() */
};

/* A result and everything it points to. */
struct kc_result {
    kcache_result pub;      /* first: the public pointer is this struct's */
    kcache_entry *entry;    /* a hit's entry, which owns data, log and names */
    char *data;             /* a fresh artifact */
    char *log;
    char **exprs, **lowered;
    size_t n_names;
    char **headers;
    size_t n_headers;
    int headers_block; /* headers and their names are one allocation (a hit's) */
    kc_buf material;
    char arch[32];
    char message[512];
    char store_message[512];
    const char *miss_why;   /* a miss: what the remembered closures said (a static string) */
    struct kc_kept_resolution *kept;  /* NULL unless kept */
};

struct kc_result *kc_result_new(void);
int kc_result_fail(struct kc_result *r, int code, const char *fmt, ...) KC_PRINTF(3, 4);
/*
 * Fails r with KCACHE_ECOMPILE and the log's first error line as its message
 * (the source's name where the log has none), naming the toolkit's -I
 * directory when NVRTC could not open a header that lives there.
 */
int kc_result_compile_failed(struct kc_result *r, const char *source_name,
                             const char *toolkit_root);
void kc_result_store_problem(struct kc_result *r, int status, const char *msg);
void kc_result_from_entry(struct kc_result *r, kcache_entry *e);
/* Drops r's list of headers, however it was made (headers_block). */
void kc_result_headers_reset(struct kc_result *r);
/* Room for n name expressions in r's fresh result. 0 or KCACHE_ENOMEM. */
int kc_result_names_begin(struct kc_result *r, size_t n);
/* The next name expression and its lowered name, copied into r. 0 or KCACHE_ENOMEM. */
int kc_result_add_name(struct kc_result *r, const char *expr, const char *lowered);

struct heartbeat {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop, running;
    kcache_store *store;
    kcache_remote *remote; /* set while this process holds the fleet's lease too */
    kcache_key key;
};

void kc_heartbeat_start(struct heartbeat *h, kcache_store *store, const kcache_key *key);
void kc_heartbeat_stop(struct heartbeat *h);

/* What a miss runs, and how its result is stored, for kc_through_cache(). */
struct kc_step {
    int (*run)(void *ctx, struct kc_result *r);
    void (*store)(void *ctx, struct kc_result *r);
    void *ctx;
    const char *arch;       /* what the miss is counted under */
    kcache_kind kind;
    /*
     * Another key the step's result may be filed under (compile.c: the one
     * with the program's name), looked up with r's own while a process waits
     * on the lease, so that waiters take what the holder stored there; NULL:
     * none. served_also puts that key in r's place when it served the hit.
     */
    const kcache_key *also;
    void (*served_also)(void *ctx, struct kc_result *r);
};

/*
 * Serves r->pub.key from the store, or runs the step under the key's lease
 * (so that concurrent misses wait for one run) and stores what it made.
 * use_store 0: just runs the step.
 */
int kc_through_cache(kcache_compiler *c, struct kc_result *r, int use_store, unsigned flags,
                     const struct kc_step *step);

/*
 * Stores r's artifact with its key, names and the inputs to rebuild it; a
 * failure is recorded in r (and counted), never returned.
 */
void kc_store_result(kcache_compiler *c, struct kc_result *r, const char *name,
                     const char *toolchain, const kcache_input *inputs, size_t n_inputs);

/* What every public compile call starts with: *out NULL, arguments there, a new result. */
int kc_result_start(struct kc_result **r, uint64_t *t0, kcache_result **out,
                    const void *compiler, const void *request);
/* Points the public key material at r->material, just encoded. */
void kc_result_keyed(struct kc_result *r);
/* A public compile call: kc_result_start(), fn, kc_result_finish(). */
typedef int (*kc_request_fn)(kcache_compiler *c, const void *request, struct kc_result *r);
int kc_result_run(kcache_result **out, kcache_compiler *c, const void *request,
                  const char *name, kc_request_fn fn);
/* Sets the status, the time since t0 and *out; returns rc. */
int kc_result_finish(struct kc_result *r, int rc, uint64_t t0, kcache_result **out);

/* 1: a hit (r filled), 2: a hit under also (may be NULL); 0: compile (*leased: this
 * process holds the lease); <0: store error. */
int kc_lookup_or_lease(kcache_compiler *c, const kcache_key *key, const kcache_key *also,
                       unsigned get_flags, struct kc_result *r, int *leased);

/* Everything a request turns into before the key. */
struct work {
    char *source_buf;
    const char *source;
    size_t source_size;
    const char *source_name;
    char *source_dir;
    kc_opts opts;
    kc_deps deps;
    int deps_borrowed;       /* deps are a kept resolution's (not freed with the work) */
    char nvrtc_arch[32];
    kcache_kind kind;
    kcache_key base;         /* the manifest's key: everything but the headers */
    /* The same without the program's name and its directory: closures that
     * stand for any name (compile.c, manifest.c) are kept under it. */
    kcache_key base_any;
    int64_t resolved_at;     /* ns since the epoch, when deps were read */
    char workdir[PATH_MAX];  /* kc_nvrtc_workdir() where line information holds it, else "" */
    /* The toolkit's -I directories, below its root ("." the root), in order:
     * keyed, and the only ones a hermetic compile passes (by real path). */
    char **tk_dirs;
    char **tk_spelled;       /* ... as the request spelled them: what NVRTC is passed */
    size_t n_tk_dirs;
    kc_nvenv env;            /* NVRTC's environment variables, keyed (nvenv.c) */
    /* The key without the program's name is tried first (progname.c); then
     * this one, with it, which a result that shows the name is filed under. */
    int name_free;
    int key_free;            /* r's key is the one without the name */
    kcache_key named_key;
    kc_buf named_material;
    /* The key with the name's last component alone (a name in a directory):
     * for a result that shows that and nothing else of the name. */
    int has_based, key_based;
    kcache_key based_key;
    kc_buf based_material;
    /* The key of a log template (progname.c): for a result whose log shows the
     * name only as its diagnostics' prefix. */
    int key_template;
    kcache_key tmpl_key;
    kc_buf tmpl_material;
    kcache_key base_tmpl;    /* the closures of the entries under it */
    int base_tmpl_made;      /* 1: base_tmpl made; -1: it could not be (template_base()) */
    /*
     * The paths NVRTC opens user headers by (kc_dep.nvpath): in every key of
     * the request where a header's code may expand its own __FILE__
     * (paths_keyed, progname.c); else left out, and paths_key is the key with
     * the name and them, for a result whose log or bytes show one.
     */
    int paths_keyed;
    int paths_forced;        /* the options write every header's path (judge_paths()) */
    int has_paths_key;       /* paths not keyed, and no key with them in r's place yet */
    kc_key_compile key_in;   /* what derive_key() encoded, for the keys with the paths */
    int paths_unsure;        /* the result shows a path NVRTC may spell otherwise */
    int own_compile;         /* kcache's own NVRTC compile, not the caller's compiler */
};

void kc_work_free(struct work *w);

/*
 * With KCACHE_COMPILE_KEY_ONLY: the key with the headers' paths, as an entry
 * whose result showed one was filed (compile.c, paths_as_shown()); for
 * recompile_dropin.c. No public flag has this bit.
 */
#define KC_COMPILE_WITH_PATHS (1u << 31)

/* A compile by the caller's own compiler (kcache_request.compile), as a step. */
struct caller_step {
    kcache_compiler *c;
    const kcache_request *req;
    struct work *w;
    char *toolchain;
    const char *no_store;   /* why the artifact is returned but not stored, or NULL */
};

/*
 * The include resolution (or a kept one borrowed) and the key, into w and r:
 * the one way a request's key is derived, whether the compile waits for it
 * or not (overlap.c).
 */
int kc_resolve_and_key(kcache_compiler *c, const kcache_request *req, struct work *w,
                       struct kc_result *r);
/* Why NVRTC's kept -restrict makes w's compile other bytes than its options say, or NULL. */
const char *kc_kept_restrict(const struct work *w);
/* Whether every path of w's closure still holds what was keyed: 1, 0, or KCACHE_ENOMEM. */
int kc_closure_holds(const struct work *w);
/* w's closure as kcache_made hands it (paths borrowed from w); NULL: out of memory. */
kcache_probe *kc_caller_probes(const struct work *w);
/* What the caller's compiler made (rc: what it returned) into r. */
int kc_caller_take_made(struct caller_step *s, struct kc_result *r, const kcache_made *m, int rc);
/* Stores r as the caller's compile's entry, or says why not (s->no_store). */
void kc_caller_store(void *ctx, struct kc_result *r);
/* Puts the key with the program's name in r's place (w then holds the one without). */
void kc_use_named_key(struct work *w, struct kc_result *r);
/*
 * For a request whose key leaves the name out: its entry under that key, the
 * key with the name's last component, or the key with the whole name, in r
 * under the key it was found by. 1 (r filled) or 0 (not there).
 */
int kc_name_free_hit(kcache_compiler *c, struct work *w, unsigned flags, struct kc_result *r);

/*
 * overlap.c: whether a miss of req may run the caller's compiler while
 * another thread resolves; and that miss, run. kc_overlap_miss() returns 0
 * or an error as a compile does (r says which, a hit included), or
 * KC_OVERLAP_DECLINED when it could not start (nothing ran: go the
 * sequential way).
 */
#define KC_OVERLAP_DECLINED 1
int kc_overlap_wanted(const kcache_compiler *c, const kcache_request *req, const struct work *w);
int kc_overlap_miss(struct caller_step *s, struct kc_result *r);

/*
 * The program's name (progname.c). 1 if the request may be keyed without it:
 * nothing it asks for or reads can put the name in the bytes, as far as
 * kcache can tell before the compile. 0 if the name is keyed.
 */
int kc_name_free_request(const kcache_request *req, const struct work *w);
/*
 * 1 if no user header's code can expand its own __FILE__ (an identifier with
 * FILE in it, assert, a macro that expands one, or a pasting macro's
 * invocation): the paths the headers are handed under may then be left out
 * of the key, and the check after the compile (kc_paths_show) decides.
 * Sets *unsure (a message) when a header reached by two paths (kc_dep.nv_ambiguous)
 * may expand its own, which no key can settle.
 */
int kc_paths_free_request(const struct work *w, const char **unsure);
/*
 * Whether r's log or bytes hold a user header's path: KC_PATHS_AMBIGUOUS where
 * one is a header reached by two paths (kc_dep.nv_ambiguous), else
 * KC_PATHS_SHOWN or KC_PATHS_NONE.
 */
enum { KC_PATHS_NONE, KC_PATHS_SHOWN, KC_PATHS_AMBIGUOUS };
int kc_paths_show(const struct kc_result *r, const struct work *w);
/*
 * What r's fresh result shows of the name: KC_NAME_FULL (its artifact holds
 * the name or its directory, or its log shows the name otherwise than as
 * its diagnostics' prefix), KC_NAME_BASE (the artifact holds the name's last
 * component and nothing else of it, and the log is empty), KC_NAME_TEMPLATE
 * (the artifact holds nothing of it, the log shows it only as that prefix:
 * *tmpl is the log to store, the name replaced by KC_NAME_PLACEHOLDER; the
 * caller frees it), or KC_NAME_NONE.
 */
enum { KC_NAME_NONE = 0, KC_NAME_TEMPLATE, KC_NAME_BASE, KC_NAME_FULL };
int kc_name_shows(const struct kc_result *r, const char *name, char **tmpl);
/* What stands for the name in a stored template: bytes NVRTC's text never holds. */
#define KC_NAME_PLACEHOLDER "\x01kcache-program-name\x02"
/*
 * Where r is a hit of a log template's key (KC_TAG_LOG_TEMPLATE), puts name
 * in the placeholder's place in its log. 0 or KCACHE_ENOMEM.
 */
int kc_name_fill(struct kc_result *r, const char *name);

/*
 * Between progname.c (the macros of a closure's headers and -D operands, and
 * what they carry) and paste.c (what their ## can make of the pieces that
 * reach them).
 *
 * What a macro's expansion can carry: the place it is expanded (__FILE__), or its caller's or
 * the program's name wherever it is expanded (__builtin_FILE, __BASE_FILE__).
 */
enum { KC_TAINT_HERE = 1, KC_TAINT_CALLER = 2 };

struct macro {
    char *name;
    char *body;     /* splices undone */
    unsigned taint;
    size_t repl;    /* where the replacement list starts in body */
    char *params;   /* a function-like macro's parameters, each NUL-ended, then "" (else NULL) */
    int pastes;     /* its replacement list holds ## */
    int toolkit;    /* defined in a toolkit header: read for pastes and pieces, never tainted */
    int paste_reach; /* it pastes, or its replacement list names a macro that does */
};

struct macros {
    struct macro *v;
    size_t n, cap;
    kc_smap index;  /* name -> the first of its definitions; v is sorted by name */
};

/* The length of the # at t[i]: 1, 2 for its digraph %: (so %:%: is ##), or 0 if none. */
size_t kc_hash_at(const char *t, size_t n, size_t i);
/* The length of the identifier that starts at t[i] with no identifier byte before it, or 0. */
size_t kc_ident_from(const char *t, size_t n, size_t i);
/*
 * The length of the identifier that starts at t[i], or 0. The scans ask at
 * nearly every byte of every user header, and most bytes start none: that
 * test is inline, the call made only for a letter or '_'.
 */
static inline size_t kc_ident_at(const char *t, size_t n, size_t i)
{
    return i < n && (isalpha((unsigned char)t[i]) || t[i] == '_') ? kc_ident_from(t, n, i) : 0;
}

/*
 * The end of the logical line that starts at i (splices followed); with joined, its text
 * spliced into it. (size_t)-1: out of memory.
 */
size_t kc_logical_line(const char *t, size_t n, size_t i, kc_buf *joined);
/* The taint of the identifier at t (len bytes): its own, or its macro's definitions'. */
unsigned kc_ident_taint(const struct macros *m, const char *t, size_t len);
/* 1 if s (n bytes) is one of d's parameters. */
int kc_is_param(const struct macro *d, const char *s, size_t n);
/* 1 if a definition of the identifier at t (len bytes) pastes or names one that does. */
int kc_name_pastes(const struct macros *m, const char *t, size_t len);

/* 1 if a ## in the expansion of the program's texts can make the program's name (paste.c). */
int kc_pastes_name_it(const struct macros *m, const kcache_request *req, const struct work *w);
/*
 * The invocations, in the user headers' code (not their directives), of macros that paste:
 * each text once, one after another with a newline between (text), where each ends (ends),
 * and how many there are up to each header's end (upto).
 */
struct spans {
    kc_buf text;
    size_t *ends, *upto;
    size_t n, cap, n_upto, cap_upto;
    kc_smap judged;
};

/* Adds the pasting invocations of a header's code t (n bytes) to s. 0 or KCACHE_ENOMEM. */
int kc_code_spans(struct spans *s, const struct macros *m, const char *t, size_t n);
/*
 * 1 if an invocation of s can paste __BASE_FILE__, __builtin_FILE or a macro that expands
 * them of its pieces (its own, and those of the macros it reaches), or kcache cannot tell.
 */
int kc_spans_paste_caller(const struct macros *m, const struct spans *s);

/* Sets w's target (nvrtc_arch) and kind, and r's arch and kind, from the request. */
int kc_resolve_arch(kcache_compiler *c, const kcache_request *req, struct work *w,
                    struct kc_result *r);

/*
 * Runs NVRTC on prepared work into r. hermetic: user headers in memory, only
 * the toolkit's -I directories, no source-directory search.
 */
/*
 * Appends --no-cache to NVRTC's options unless the caller passed it already or
 * asked for NVRTC's own cache (KCACHE_COMPILE_NVRTC_CACHE). Not keyed either
 * way: opts.c lists --no-cache as unkeyed.
 */
int kc_nvrtc_cache_option(char ***opts, size_t *n_opts, const kc_opts *o, unsigned flags);

int kc_run_nvrtc(kcache_compiler *c, const kcache_request *req, const struct work *w,
                 struct kc_result *r, int hermetic);

/* Whether an entry was made by the drop-in NVRTC (its key's extra digest says so). */
int kc_dropin_made(const kcache_entry *e);
/* Rebuilds such an entry with the NVRTC that made it, into r (recompile_dropin.c). */
int kc_rebuild_dropin(kcache_compiler *c, const kcache_entry *e, const kc_recipe *rc,
                      struct kc_result *r);

/* Links inputs (kinds, bytes, names) with nvJitLink into r; r->arch is the target. */
int kc_run_link(kcache_compiler *c, const kcache_link_request *req, const kcache_link_input *in,
                struct kc_result *r);

#endif
