/*
 * Compiling through the cache: resolve what the compile reads, derive the
 * key, serve a hit or compile with NVRTC (and link with nvJitLink), store,
 * return.
 *
 * NVRTC and nvJitLink are loaded at run time, on the first miss: a hit never
 * loads them. The driver is never needed, except for the architecture
 * "native". A program linked with -static cannot load them (glibc's static
 * dlopen would bring a second C library): there a miss returns
 * KCACHE_ENOTSUP saying so, while hits still work. Link such programs
 * dynamically; linking libkcache.a into a dynamic program is fine.
 *
 * Thread safety: a kcache_compiler may be shared by any number of threads.
 * Results belong to the caller and are independent of the compiler.
 *
 * The cache never makes a compile fail: if the store cannot be used (disk
 * full, read-only, locked, damaged), the kernel is still compiled and
 * returned, and the result says why it was not cached (store_status).
 */
#ifndef KCACHE_COMPILE_H
#define KCACHE_COMPILE_H

#include <kcache/core.h>
#include <kcache/store.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kcache_compiler kcache_compiler;

#define KCACHE_COMPILER_OPTIONS_VERSION 3

typedef struct kcache_compiler_options {
    unsigned version; /* KCACHE_COMPILER_OPTIONS_VERSION */
    /*
     * The store to use, borrowed: it must outlive the compiler. NULL: the
     * compiler opens the store itself (see kcache_store_open), unless
     * no_store is set or the cache is disabled ($KCACHE_DISABLE, or
     * disable = true in kcache.conf).
     */
    kcache_store *store;
    int no_store;
    /* For the store the compiler opens itself: as kcache_store_options' path
     * and max_size (NULL and 0: the environment, kcache.conf, the default). */
    const char *store_path;
    uint64_t store_max_size;
    /*
     * The CUDA toolkit: NVRTC, nvJitLink and the headers identified by the
     * toolkit's version. NULL: $CUDA_HOME, else $CUDA_PATH, else the
     * directory kcache was built against (normally /usr/local/cuda).
     */
    const char *toolkit_root;
    /*
     * How long to wait while another process compiles the same key before
     * compiling anyway. 0: 10 minutes. A dead owner is noticed at once.
     */
    unsigned wait_timeout_ms;
    kcache_log_fn log;
    void *log_userdata;
    /*
     * Version 2. The NVRTC library file to key by (its ELF build-id) and to
     * compile with, instead of the toolkit's. NULL: the toolkit's. The drop-in
     * NVRTC names here the library the program would have loaded.
     */
    const char *nvrtc_path;
    /*
     * Version 3. The shared tier (<kcache/remote.h>): a redis:// URL, as the
     * remote setting's flag. NULL: $KCACHE_REMOTE, else remote in
     * kcache.conf, else none. Used only with a store. A remote that cannot be
     * used never fails the compiler: results say so in store_message.
     */
    const char *remote;
} kcache_compiler_options;

KCACHE_API int kcache_compiler_options_init(kcache_compiler_options *out, unsigned version);
#define KCACHE_COMPILER_OPTIONS_INIT                                                               \
    KCACHE_VERSIONED_INIT(kcache_compiler_options, KCACHE_COMPILER_OPTIONS_VERSION)

/*
 * Creates a compiler. On failure *out is NULL and a one-line message is
 * written into errbuf when not NULL. Failing to open the store is not a
 * failure: the compiler then works without a cache and says so in results.
 */
KCACHE_API int kcache_compiler_new(kcache_compiler **out, const kcache_compiler_options *options,
                                   char *errbuf, size_t errbuf_size);

/* Releases the compiler and the store it opened itself. Accepts NULL. */
KCACHE_API void kcache_compiler_free(kcache_compiler *compiler);

/* The store in use (owned by the compiler or the caller), or NULL if none. */
KCACHE_API kcache_store *kcache_compiler_store(kcache_compiler *compiler);

/*
 * Why the compiler has no store: 0 when it has one, KCACHE_EDISABLED when
 * the cache is off (KCACHE_DISABLE, disable = true, or no_store), else the
 * code of the failure; *message (may be NULL) is "" or one line saying why,
 * owned by the compiler. KCACHE_EINVAL for a NULL compiler.
 */
KCACHE_API int kcache_compiler_store_status(const kcache_compiler *compiler,
                                            const char **message);

/*
 * The NVRTC library this compiler's keys name, as they name it: its file name
 * and GNU build-id ("libnvrtc.so.13 build-id 65be..."), read from the file
 * without loading it. Owned by the compiler; NULL for a NULL compiler.
 */
KCACHE_API const char *kcache_compiler_nvrtc_id(const kcache_compiler *compiler);

/* Flags for a request. */
enum kcache_compile_flags {
    KCACHE_COMPILE_NO_CACHE = 1 << 0, /* neither look up nor store */
    KCACHE_COMPILE_REFRESH = 1 << 1,  /* compile even on a hit, and replace the entry */
    KCACHE_COMPILE_KEY_ONLY = 1 << 2, /* derive the key and stop (for explain) */
    /* Let NVRTC (12.9+) use its own cache in the driver's ComputeCache. Off by
     * default: kcache passes --no-cache, because NVRTC's cache starts the CUDA
     * driver in every process, which costs a miss several times what it
     * saves (doc/design.md has the figures), and saves only the back end.
     * Never part of the key. */
    KCACHE_COMPILE_NVRTC_CACHE = 1 << 3,
    /* A lookup beside another the caller counts (the drop-in keeps an sm_XX
     * compile's PTX next to its CUBIN): neither a hit nor a miss in stats,
     * so one compile request is one lookup. The entry is stored and its use
     * recorded as for any other. */
    KCACHE_COMPILE_UNCOUNTED = 1 << 4,
    /* With a compiler of the caller's own (kcache_request.compile): keep the
     * source and the in-memory headers with the entry, so that
     * kcache_compiler_recompile() can rebuild it where it knows the caller's compiler
     * (the drop-in NVRTC's). */
    KCACHE_COMPILE_KEEP_INPUTS = 1 << 5,
    /* With KCACHE_COMPILE_KEY_ONLY: the key as a hit finds it, from the
     * remembered closure of an earlier resolution while every file in it is
     * unchanged (stat() of each, as a hit checks), without resolving again;
     * the result then has the key but no key material and no headers. Else
     * the key is derived as KEY_ONLY alone derives it. For callers that want
     * only the key, often (kcache_gpu_function's memo). */
    KCACHE_COMPILE_KEY_REMEMBERED = 1 << 6,
    /* With a compiler of the caller's own: it is NVIDIA's NVRTC given
     * source_name as the program's name (the drop-in NVRTC), so the name is
     * keyed only where it can change NVRTC's bytes or log, as for kcache's
     * own compiles. Without it, such a compiler's entries are keyed by the
     * name. */
    KCACHE_COMPILE_NVRTC_NAMES = 1 << 7,
    /* Request version 4: on a miss, keep the include resolution with the
     * result, for a request of the same program's other output
     * (kcache_request.resolution_of). */
    KCACHE_COMPILE_KEEP_RESOLUTION = 1 << 8,
    /* Request version 3, with a compiler of the caller's own that reads the
     * disk itself: on a miss no remembered closure answers, kcache may call
     * it at once, on the calling thread, while another thread resolves the
     * includes, derives the key and looks it up (where the process may run
     * on more than one CPU and no shared tier is set). The compiler then
     * follows kcache_made.await_closure and .stop_asked. */
    KCACHE_COMPILE_OVERLAP = 1 << 9,
};

#define KCACHE_REQUEST_VERSION 4

/* Version 3: one path the include resolution looked at (kcache_made.probes). */
typedef struct kcache_probe {
    const char *path; /* as looked up: absolute, or relative to the working directory */
    int found;        /* 1: a regular file, keyed by its content (under the toolkit's root,
                         by the toolkit's build); 0: nothing there, keyed as absent */
} kcache_probe;

/*
 * What a compiler of the caller's own made (kcache_request.compile): the
 * artifact, the log, the lowered name of each name expression. Every pointer
 * is the caller's and need only stay valid until kcache_compiler_compile() returns:
 * kcache copies what it keeps.
 */
typedef struct kcache_made {
    const void *data;
    size_t size;
    const char *log;                   /* NULL: none */
    size_t n_names;                    /* name expressions and their lowered */
    const char *const *name_exprs;     /* names, pairwise */
    const char *const *lowered_names;
    const char *toolchain;             /* what made it, stored with the entry */
    /*
     * Request version 3, set by kcache before the call (valid during it):
     * the closure the key covers, every path the resolution looked at, in
     * order, with what it found; and the toolkit's root (its real path, NULL
     * if none), under which a file is keyed by the toolkit's build. A
     * compiler that reads the disk itself checks what it read against these.
     */
    size_t n_probes;
    const kcache_probe *probes;
    const char *toolkit_root;
    /*
     * Request version 3, set by the compiler: a short reason (a static
     * string, e.g. "unpredicted-read") to return the artifact without
     * storing it, because the compile read something the key does not
     * cover. Counted in stats with the uncacheable compiles.
     */
    const char *no_store;
    /*
     * With KCACHE_COMPILE_OVERLAP, set by kcache when it resolves the
     * includes while the compiler runs (NULL otherwise: probes are set
     * before the call). probes are NULL until the compiler calls
     * await_closure(made) after its compile returned: it waits for the
     * resolution and sets n_probes and probes. It returns 0: check what was
     * read against them, as above; 1: a file of the closure changed since
     * just before the call, so the compile may have read other bytes than
     * the key's: compile again now (what the compile then reads is judged);
     * -1: nothing to judge (the request cannot be keyed, or its entry was
     * found and is served instead of what the compiler makes).
     * stop_asked(made), which the compiler may poll while it compiles (from
     * any thread), turns 1 once such an entry was found: the compile may
     * stop and return anything. kcache_private is kcache's.
     */
    int (*await_closure)(struct kcache_made *made);
    int (*stop_asked)(const struct kcache_made *made);
    void *kcache_private;
} kcache_made;

/*
 * Compiles a request's miss in the caller's stead. Returns 0 with *out
 * filled, KCACHE_ECOMPILE when the source did not compile (out->log is
 * returned, nothing is stored), or another error.
 */
typedef int (*kcache_compile_fn)(void *userdata, kcache_made *out);

/* One CUDA C++ translation unit to compile. */
typedef struct kcache_request {
    unsigned version;          /* KCACHE_REQUEST_VERSION */
    const char *source;        /* the text; NULL: read source_path */
    size_t source_size;        /* 0 with a source: strlen(source) */
    /*
     * Where the source lives, if it is a file: its directory is searched
     * first for "quoted" includes, as NVRTC searches the directory of a
     * source's name.
     */
    const char *source_path;
    /* The name NVRTC is given (in __FILE__ and the log); NULL: the base name
     * of source_path, else "kernel.cu". */
    const char *source_name;
    /* "sm_90", "sm_90a", "compute_90", or "native" (asks the driver). NULL:
     * taken from -arch in options. */
    const char *arch;
    /* KCACHE_KIND_CUBIN (default for sm_XX), _PTX (default for compute_XX), _LTOIR. */
    kcache_kind output;
    size_t n_options;          /* NVRTC options: -I, -D, -std=, -rdc=true, ... */
    const char *const *options;
    size_t n_name_exprs;       /* name expressions, e.g. "tiled_gemm<float, 16>" */
    const char *const *name_exprs;
    const void *extra_digest;  /* bytes of anything kcache cannot see that changes the output */
    size_t extra_digest_size;
    unsigned flags;            /* kcache_compile_flags */
    /*
     * Version 2: headers handed over in memory, as nvrtcCreateProgram's
     * headers and includeNames: n_headers NUL-terminated contents, each
     * found by an #include spelled exactly as its name, before anything on
     * disk (NVRTC's rule). The key covers every one, by name and content,
     * whether the source includes it or not.
     */
    size_t n_headers;
    const char *const *header_names;
    const char *const *header_contents;
    /*
     * Version 2: a compiler of the caller's own, run instead of NVRTC on a
     * miss (NULL: NVRTC, as kcache runs it). kcache derives the key, serves
     * hits, makes concurrent misses wait for one compile, counts and stores,
     * as for any compile; extra_digest must name whatever the caller's
     * compiler does that the request does not say. Its entries keep no
     * inputs unless KCACHE_COMPILE_KEEP_INPUTS: `kcache verify --recompile`
     * rebuilds only the drop-in's, with the NVRTC that made them. The drop-in
     * NVRTC uses it to compile exactly as the program asked. After it
     * returns, kcache checks that every file of the closure still holds what
     * was keyed (an edit during the compile is not stored).
     */
    kcache_compile_fn compile;
    void *compile_userdata;
    /*
     * Version 4: a result of this compiler whose request had
     * KCACHE_COMPILE_KEEP_RESOLUTION (NULL: none). Where this request reads
     * exactly what that one read (the same source, name, search path,
     * macros, in-memory headers, working directory; the output kind and the
     * target may differ), its key is derived from that resolution instead of
     * a new one: the drop-in keys an sm_XX compile's PTX so, one resolution
     * for both. Its closure is checked again only after a compile this
     * request runs. Anything else: resolved anew. Not kept beyond the call.
     */
    const struct kcache_result *resolution_of;
} kcache_request;

KCACHE_API int kcache_request_init(kcache_request *out, unsigned version);
#define KCACHE_REQUEST_INIT KCACHE_VERSIONED_INIT(kcache_request, KCACHE_REQUEST_VERSION)

/*
 * What a compile or link returns. Every pointer points into the result and
 * lives until kcache_result_free().
 */
#define KCACHE_RESULT_VERSION 2

typedef struct kcache_result {
    unsigned version;          /* KCACHE_RESULT_VERSION of the library that made it */
    int status;                /* 0, or the failure (ECOMPILE: see log) */
    const char *message;       /* "" or one line about status */
    kcache_key key;
    int keyed;                 /* the request was keyed (0: not cacheable, see store_message) */
    int hit;                   /* served from the cache */
    kcache_kind kind;
    const char *arch;          /* normalised target */
    const void *data;          /* the artifact (NULL on failure), followed by a NUL byte */
    size_t size;
    const char *log;           /* the compiler's log; on a hit, that of the compile that made it */
    size_t n_names;            /* name expressions and their lowered names, pairwise */
    const char *const *name_exprs;
    const char *const *lowered_names;
    uint64_t compile_ns;       /* how long the compile that made the artifact took */
    uint64_t elapsed_ns;       /* how long this call took */
    int store_status;          /* 0, or why the cache was not used; the compile still succeeded */
    const char *store_message; /* "" or one line */
    const void *key_material;  /* the encoded inputs behind key */
    size_t key_material_size;
    size_t n_headers;          /* the headers the compile read, by include spelling */
    const char *const *headers;
    int remote_hit;            /* version 2: hit came from the shared tier (<kcache/remote.h>) */
} kcache_result;

/*
 * Gets an artifact: from the cache, or by compiling (and storing) it.
 * Returns result->status; *out is always a result to free, except on
 * KCACHE_ENOMEM and KCACHE_EINVAL from missing arguments, when it is NULL.
 */
KCACHE_API int kcache_compiler_compile(kcache_result **out, kcache_compiler *compiler,
                                       const kcache_request *request);

/* Looks up lowered name of a name expression in a result, or NULL. */
KCACHE_API const char *kcache_result_lowered_name(const kcache_result *result,
                                                  const char *name_expr);

KCACHE_API void kcache_result_free(kcache_result *result);

/* One input of a link step. */
typedef struct kcache_link_input {
    /* Either a CUDA source, compiled through the cache first (to LTO-IR when
     * the link is LTO, else to a relocatable CUBIN) ... */
    const kcache_request *request;
    /* ... or bytes: KCACHE_KIND_PTX, _LTOIR or _CUBIN. */
    kcache_kind kind;
    const void *data;
    size_t size;
    const char *name;
} kcache_link_input;

#define KCACHE_LINK_REQUEST_VERSION 1

typedef struct kcache_link_request {
    unsigned version;          /* KCACHE_LINK_REQUEST_VERSION */
    const char *arch;          /* "sm_90" (a real architecture) */
    int lto;                   /* link-time optimisation: sources go to LTO-IR */
    size_t n_inputs;
    const kcache_link_input *inputs;
    size_t n_options;          /* nvJitLink options besides -arch and -lto (e.g. "-O3") */
    const char *const *options;
    unsigned flags;            /* kcache_compile_flags */
} kcache_link_request;

KCACHE_API int kcache_link_request_init(kcache_link_request *out, unsigned version);
#define KCACHE_LINK_REQUEST_INIT                                                                   \
    KCACHE_VERSIONED_INIT(kcache_link_request, KCACHE_LINK_REQUEST_VERSION)

/*
 * Links inputs into one CUBIN with nvJitLink. Every step is cached: each
 * source's compile, and the link itself (keyed by nvJitLink's identity, the
 * options and every input's digest). Returns as kcache_compiler_compile() does.
 */
KCACHE_API int kcache_compiler_link(kcache_result **out, kcache_compiler *compiler,
                                    const kcache_link_request *request);

/*
 * Rebuilds a stored entry from what was kept with it (its source, its
 * headers, its options; for a link, its inputs), with this compiler's
 * toolchain, storing nothing, and compares the bytes: *same is 1 when they
 * are identical. Returns 0, KCACHE_ENOTFOUND, or KCACHE_ENOTSUP when the entry
 * cannot be rebuilt here (another NVRTC build made it, or its inputs were not
 * kept). *out (may be NULL) gets the result with the fresh artifact.
 */
KCACHE_API int kcache_compiler_recompile(kcache_result **out, int *same, kcache_compiler *compiler,
                                         const kcache_key *key);

/*
 * Walks a key's material (kcache_entry.key_material, kcache_result.key_material),
 * so that a tool can say what a key covers without knowing its encoding,
 * which stays private to the library (`kcache explain`, `kcache inspect`):
 * fn gets each component's name ("arch", "option", "header", "source", ...)
 * and its value as text, in order. fn returns non-zero to stop.
 * Returns 0, fn's value, or KCACHE_ECORRUPT for material that does not parse.
 */
typedef int (*kcache_key_component_fn)(void *userdata, const char *component, const char *value);
KCACHE_API int kcache_key_describe(const void *material, size_t size, kcache_key_component_fn fn,
                                   void *userdata);

/*
 * Normalises a target: "sm_90", "SM90", "90" -> "sm_90"; "compute_90a" stays.
 * Returns 0 or KCACHE_EINVAL. out holds at least 16 bytes.
 */
KCACHE_API int kcache_arch_normalize(char *out, size_t out_size, const char *arch);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_COMPILE_H */
