/*
 * Request -> deps -> key -> store (hit) or compile -> store -> caller.
 * Nothing here knows about SQLite; nothing below knows about NVRTC.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compile/compileint.h"
#include "util/settings.h"
#include "gpu/driver.h"

/* A source larger than this is not CUDA C++ anyone compiles. */
#define KC_MAX_SOURCE_SIZE (256u << 20)
/* A lease whose heartbeat is older than this belongs to a stuck owner. */
#define KC_LEASE_STALE_MS 15000
#define KC_HEARTBEAT_MS 2000
#define KC_DEFAULT_WAIT_MS (10u * 60u * 1000u)

/* ---- the compiler handle ---------------------------------------------- */

/* The cache is off by $KCACHE_DISABLE or by disable = true in kcache.conf. */
static int disabled(const char *store_path)
{
    char *path = NULL, ignored[256];
    if (kc_config_path(&path, store_path, ignored, sizeof(ignored)) != 0)
        return 0; /* no location: opening the store will say so */
    int off = kc_config_disabled(path);
    free(path);
    return off;
}

KCACHE_API int kcache_compiler_new(kcache_compiler **out, const kcache_compiler_options *options,
                                   char *errbuf, size_t errbuf_size)
{
    static const kcache_compiler_options defaults = KCACHE_COMPILER_OPTIONS_INIT;
    if (!out)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL, "kcache_compiler_new: out is NULL");
    *out = NULL;
    if (!options)
        options = &defaults;
    if (options->version < 1 || options->version > KCACHE_COMPILER_OPTIONS_VERSION)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL,
                      "kcache_compiler_new: options version %u is not supported",
                      options->version);
    kcache_compiler *c = kc_calloc(1, sizeof(*c));
    if (!c)
        return kc_fmt(errbuf, errbuf_size, KCACHE_ENOMEM, "out of memory");
    int rc = kc_toolkit_find(&c->tk, options->toolkit_root, errbuf, errbuf_size);
    if (rc) {
        free(c);
        return rc;
    }
    c->wait_timeout_ms = options->wait_timeout_ms ? options->wait_timeout_ms : KC_DEFAULT_WAIT_MS;
    c->log = options->log;
    c->log_userdata = options->log_userdata;
    if (options->store) {
        c->store = options->store;
    } else if (options->no_store) {
        c->store_status = KCACHE_EDISABLED;
        snprintf(c->store_message, sizeof(c->store_message), "no cache in use");
    } else if (disabled(options->store_path)) {
        c->store_status = KCACHE_EDISABLED;
        snprintf(c->store_message, sizeof(c->store_message),
                 "the cache is off (KCACHE_DISABLE or disable in kcache.conf)");
    } else {
        kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
        so.path = options->store_path;
        so.max_size = options->store_max_size;
        so.log = options->log;
        so.log_userdata = options->log_userdata;
        /* Never fatal: without a store the compiler still compiles. */
        c->store_status = kcache_store_open(&c->store, &so, c->store_message,
                                            sizeof(c->store_message));
        c->own_store = c->store != NULL;
    }
    *out = c;
    return 0;
}

KCACHE_API void kcache_compiler_free(kcache_compiler *compiler)
{
    if (!compiler)
        return;
    if (compiler->own_store)
        kcache_store_close(compiler->store);
    kc_toolkit_free(&compiler->tk);
    free(compiler);
}

KCACHE_API kcache_store *kcache_compiler_store(kcache_compiler *compiler)
{
    return compiler ? compiler->store : NULL;
}

/* ---- results ---------------------------------------------------------- */

struct kc_result *kc_result_new(void)
{
    struct kc_result *r = kc_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->pub.version = KCACHE_RESULT_VERSION;
    r->pub.message = r->message;
    r->pub.store_message = r->store_message;
    r->pub.log = "";
    r->pub.arch = r->arch;
    return r;
}

KCACHE_API void kcache_result_free(kcache_result *result)
{
    if (!result)
        return;
    struct kc_result *r = (struct kc_result *)result;
    kcache_entry_free(r->entry);
    free(r->data);
    free(r->log);
    kc_strv_free(r->exprs, r->n_names);
    kc_strv_free(r->lowered, r->n_names);
    kc_strv_free(r->headers, r->n_headers);
    kc_buf_free(&r->material);
    free(r);
}

KCACHE_API const char *kcache_result_lowered_name(const kcache_result *result,
                                                  const char *name_expr)
{
    if (!result || !name_expr)
        return NULL;
    for (size_t i = 0; i < result->n_names; i++)
        if (strcmp(result->name_exprs[i], name_expr) == 0)
            return result->lowered_names[i];
    return NULL;
}

int kc_result_fail(struct kc_result *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof(r->message), fmt, ap);
    va_end(ap);
    for (char *p = r->message; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return code;
}

void kc_result_store_problem(struct kc_result *r, int status, const char *msg)
{
    if (r->pub.store_status)
        return; /* the first problem is the one worth telling */
    r->pub.store_status = status;
    size_t n = KC_MIN(strlen(msg), sizeof(r->store_message) - 1);
    memcpy(r->store_message, msg, n);
    r->store_message[n] = '\0';
}

/* Serves a result from a cache entry, which it takes over. */
void kc_result_from_entry(struct kc_result *r, kcache_entry *e)
{
    r->entry = e;
    r->pub.hit = 1;
    r->pub.data = e->data;
    r->pub.size = e->size;
    r->pub.log = e->log;
    r->pub.n_names = e->n_names;
    r->pub.name_exprs = e->name_exprs;
    r->pub.lowered_names = e->lowered_names;
    r->pub.compile_ns = e->compile_ns;
    r->pub.kind = e->kind;
}

/* ---- single flight ---------------------------------------------------- */

static void *heartbeat_main(void *arg)
{
    struct heartbeat *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += KC_HEARTBEAT_MS / 1000;
        pthread_cond_timedwait(&h->wake, &h->lock, &until);
        if (h->stop)
            break;
        pthread_mutex_unlock(&h->lock);
        kc_store_lease_renew(h->store, &h->key);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

void kc_heartbeat_start(struct heartbeat *h, kcache_store *store, const kcache_key *key)
{
    memset(h, 0, sizeof(*h));
    h->store = store;
    h->key = *key;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    h->running = pthread_create(&h->thread, NULL, heartbeat_main, h) == 0;
}

void kc_heartbeat_stop(struct heartbeat *h)
{
    if (h->running) {
        pthread_mutex_lock(&h->lock);
        h->stop = 1;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
    }
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->wake);
}

/*
 * Looks the key up, and on a miss takes the lease or waits for whoever holds
 * it. Returns 1 on a hit (r filled), 0 when the caller should compile
 * (*leased says whether it holds the lease), or a negative store error (the
 * caller compiles without the cache).
 */
int kc_lookup_or_lease(kcache_compiler *c, const kcache_key *key, struct kc_result *r,
                       int *leased)
{
    kcache_store *s = c->store;
    uint64_t deadline = kc_mono_ns() + (uint64_t)c->wait_timeout_ms * 1000000u;
    unsigned pause_ms = 5;
    *leased = 0;
    for (;;) {
        kcache_entry *e = NULL;
        int rc = kcache_store_get(&e, s, key, 0);
        if (rc == 0) {
            kc_result_from_entry(r, e);
            return 1;
        }
        if (rc != KCACHE_ENOTFOUND)
            return rc;
        int acquired = 0;
        if ((rc = kc_store_lease_acquire(&acquired, s, key, KC_LEASE_STALE_MS)))
            return rc;
        if (acquired) {
            /* The owner may have finished between the get and the lease. */
            if (kcache_store_get(&e, s, key, 0) == 0) {
                kc_store_lease_release(s, key);
                kc_result_from_entry(r, e);
                return 1;
            }
            *leased = 1;
            return 0;
        }
        if (kc_mono_ns() >= deadline)
            return 0; /* waited long enough: compile anyway */
        struct timespec ts = {0, (long)pause_ms * 1000000L};
        nanosleep(&ts, NULL);
        pause_ms = KC_MIN(pause_ms * 2, 100u);
    }
}

/* ---- compiling one source --------------------------------------------- */

static int read_source(const char *path, char **out, size_t *size, struct kc_result *r)
{
    int rc = kc_read_file(path, KC_MAX_SOURCE_SIZE, out, size);
    if (rc == KCACHE_EIO)
        return kc_result_fail(r, rc, "cannot read %s: %s", path, strerror(errno));
    if (rc == KCACHE_EINVAL)
        return kc_result_fail(r, rc, "%s is not a regular file of at most %u MiB: not a CUDA "
                              "source", path, KC_MAX_SOURCE_SIZE >> 20);
    return rc;
}

static int under_root(const kc_toolkit *tk, const char *dir)
{
    char *real = realpath(dir, NULL);
    size_t n = strlen(tk->root);
    int inside = real && strncmp(real, tk->root, n) == 0 && (real[n] == '/' || real[n] == '\0');
    free(real);
    return inside;
}

void kc_work_free(struct work *w)
{
    free(w->source_buf);
    free(w->source_dir);
    kc_opts_free(&w->opts);
    kc_deps_free(&w->deps);
}

static int resolve_arch(kcache_compiler *c, const kcache_request *req, struct work *w,
                        struct kc_result *r)
{
    char msg[512];
    char from_req[32] = "";
    int native = w->opts.arch_native;
    if (req->arch && !strcmp(req->arch, "native")) {
        native = 1;
    } else if (req->arch && kcache_arch_normalize(from_req, sizeof(from_req), req->arch) != 0) {
        return kc_result_fail(r, KCACHE_EINVAL,
                              "'%s' is not a GPU architecture (use e.g. sm_90, sm_90a, compute_90)",
                              req->arch);
    }
    if (native) {
        char found[32];
        int rc = kc_driver_native_arch(found, sizeof(found), 0, 0, msg, sizeof(msg));
        if (rc)
            return kc_result_fail(r, rc, "%s", msg);
        snprintf(from_req, sizeof(from_req), "%s", found);
    }
    (void)c;
    if (from_req[0] && w->opts.arch[0] && strcmp(from_req, w->opts.arch) != 0)
        return kc_result_fail(r, KCACHE_EINVAL,
                              "two architectures given (%s and %s): give one per request",
                              from_req, w->opts.arch);
    const char *arch = from_req[0] ? from_req : w->opts.arch;
    if (!arch[0])
        return kc_result_fail(r, KCACHE_EINVAL, "no GPU architecture: pass one (e.g. sm_90)");
    int is_virtual = !strncmp(arch, "compute_", 8);
    w->kind = req->output ? req->output : is_virtual ? KCACHE_KIND_PTX : KCACHE_KIND_CUBIN;
    if (!kcache_kind_name(w->kind))
        return kc_result_fail(r, KCACHE_EINVAL, "output kind %d is not cubin, ptx or ltoir",
                              (int)w->kind);
    if (!strncmp(arch, "lto_", 4))
        return kc_result_fail(r, KCACHE_EINVAL, "%s: give the real architecture (sm_%s) with "
                              "LTO-IR output", arch, arch + 4);
    if (w->kind == KCACHE_KIND_CUBIN && is_virtual)
        return kc_result_fail(r, KCACHE_EINVAL,
                              "%s is a virtual architecture: it gives PTX; use sm_%s for a CUBIN",
                              arch, arch + 8);
    if (w->kind == KCACHE_KIND_PTX && !is_virtual)
        /* PTX for sm_90 is PTX for compute_90: one target, one entry. */
        snprintf(w->nvrtc_arch, sizeof(w->nvrtc_arch), "compute_%s", arch + 3);
    else
        snprintf(w->nvrtc_arch, sizeof(w->nvrtc_arch), "%s", arch);
    snprintf(r->arch, sizeof(r->arch), "%s", w->nvrtc_arch);
    r->pub.kind = w->kind;
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int prepare(kcache_compiler *c, const kcache_request *req, struct work *w,
                   struct kc_result *r)
{
    int rc;
    char msg[512];
    if (req->version < 1 || req->version > KCACHE_REQUEST_VERSION)
        return kc_result_fail(r, KCACHE_EINVAL, "request version %u is not supported",
                              req->version);
    if (req->source) {
        w->source = req->source;
        w->source_size = req->source_size ? req->source_size : strlen(req->source);
    } else if (req->source_path) {
        if ((rc = read_source(req->source_path, &w->source_buf, &w->source_size, r)))
            return rc;
        w->source = w->source_buf;
    } else {
        return kc_result_fail(r, KCACHE_EINVAL, "no source: give its text or its path");
    }
    if (memchr(w->source, '\0', w->source_size))
        return kc_result_fail(r, KCACHE_EINVAL, "%s holds NUL bytes: not CUDA C++ source text",
                              req->source_path ? req->source_path : "the source");
    w->source_name = req->source_name ? req->source_name
                     : req->source_path ? base_name(req->source_path)
                                        : "kernel.cu";
    if (req->source_path) {
        const char *slash = strrchr(req->source_path, '/');
        size_t dir_n = slash == req->source_path ? 1 : (size_t)(slash - req->source_path);
        w->source_dir = slash ? kc_memdup(req->source_path, dir_n) : kc_strdup(".");
        if (!w->source_dir)
            return KCACHE_ENOMEM;
    }
    if (req->n_options && !req->options)
        return kc_result_fail(r, KCACHE_EINVAL, "n_options without options");
    if (req->n_name_exprs && !req->name_exprs)
        return kc_result_fail(r, KCACHE_EINVAL, "n_name_exprs without name_exprs");
    for (size_t i = 0; i < req->n_name_exprs; i++)
        if (!req->name_exprs[i] || !*req->name_exprs[i])
            return kc_result_fail(r, KCACHE_EINVAL, "name expression %zu is empty", i);
    if ((rc = kc_opts_parse(&w->opts, req->options, req->n_options, msg, sizeof(msg))))
        return kc_result_fail(r, rc, "%s", msg);
    if ((rc = resolve_arch(c, req, w, r)))
        return rc;
    if (w->kind == KCACHE_KIND_LTOIR && !w->opts.dlto) {
        if ((rc = kc_strv_push(&w->opts.canonical, &w->opts.n_canonical, "--dlink-time-opt")))
            return rc;
        w->opts.dlto = 1;
    }
    kc_deps_request dq = {
        .source = w->source,
        .source_size = w->source_size,
        .source_dir = w->source_dir,
        .no_source_include = w->opts.no_source_include,
        .include_dirs = (const char *const *)w->opts.include_dirs,
        .n_include_dirs = w->opts.n_include_dirs,
        .defines = (const char *const *)w->opts.defines,
        .n_defines = w->opts.n_defines,
        .pre_includes = (const char *const *)w->opts.pre_includes,
        .n_pre_includes = w->opts.n_pre_includes,
        .toolkit_root = c->tk.root,
    };
    if ((rc = kc_deps_resolve(&w->deps, &dq, msg, sizeof(msg))))
        return kc_result_fail(r, rc, "%s", msg);
    return 0;
}

/* The key of a compile (compile/key.c holds the format). */
static int derive_key(kcache_compiler *c, const kcache_request *req, const struct work *w,
                      struct kc_result *r)
{
    if (req->extra_digest_size && !req->extra_digest)
        return kc_result_fail(r, KCACHE_EINVAL, "extra_digest_size without extra_digest");
    for (size_t i = 0; i < w->deps.n_deps; i++)
        if (w->deps.deps[i].state != KC_DEP_ABSENT &&
            kc_strv_push(&r->headers, &r->n_headers, w->deps.deps[i].spelling))
            return KCACHE_ENOMEM;
    r->pub.n_headers = r->n_headers;
    r->pub.headers = (const char *const *)r->headers;
    kc_key_compile in = {
        .output_kind = kcache_kind_name(w->kind),
        .arch = w->nvrtc_arch,
        .nvrtc_id = c->tk.nvrtc_id,
        .toolkit_id = c->tk.identity,
        .options = (const char *const *)w->opts.canonical,
        .n_options = w->opts.n_canonical,
        .name_exprs = req->name_exprs,
        .n_name_exprs = req->n_name_exprs,
        .source_name = w->source_name,
        .source = w->source,
        .source_size = w->source_size,
        .deps = w->deps.deps,
        .n_deps = w->deps.n_deps,
        .extra = req->extra_digest,
        .extra_size = req->extra_digest_size,
    };
    char msg[256];
    int rc = kc_key_encode_compile(&r->material, &r->pub.key, &in, msg, sizeof(msg));
    if (rc == KCACHE_EINVAL)
        return kc_result_fail(r, rc, "%s", msg);
    if (!rc)
        kc_result_keyed(r);
    return rc;
}

static int nvrtc_fail(struct kc_result *r, const kc_nvrtc *api, nvrtcResult res, const char *what)
{
    return kc_result_fail(r, res == NVRTC_ERROR_OUT_OF_MEMORY ? KCACHE_ENOMEM : KCACHE_EIO,
                          "NVRTC %s: %s", what, api->GetErrorString(res));
}

/*
 * Runs NVRTC. Hermetic: the user headers go in memory under their spellings,
 * only the toolkit's -I directories are passed, and the source directory is
 * not searched. Otherwise (not cacheable) NVRTC reads from disk as usual.
 */
int kc_run_nvrtc(kcache_compiler *c, const kcache_request *req, const struct work *w,
                 struct kc_result *r, int hermetic)
{
    const kc_nvrtc *api;
    char msg[512];
    int rc = kc_nvrtc_get(&c->tk, &api, msg, sizeof(msg));
    if (rc)
        return kc_result_fail(r, rc, "%s", msg);
    size_t n_headers = 0;
    const char **contents = kc_calloc(w->deps.n_deps + 1, sizeof(char *));
    const char **spellings = kc_calloc(w->deps.n_deps + 1, sizeof(char *));
    char **opts = NULL;
    size_t n_opts = 0;
    nvrtcProgram prog = NULL;
    char buf[PATH_MAX + 32];
    if (!contents || !spellings) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    for (size_t i = 0; hermetic && i < w->deps.n_deps; i++) {
        if (w->deps.deps[i].state != KC_DEP_USER)
            continue;
        contents[n_headers] = w->deps.deps[i].content;
        spellings[n_headers++] = w->deps.deps[i].spelling;
    }
    for (size_t i = 0; i < w->opts.n_canonical && !rc; i++)
        rc = kc_strv_push(&opts, &n_opts, w->opts.canonical[i]);
    snprintf(buf, sizeof(buf), "--gpu-architecture=%s", w->nvrtc_arch);
    if (!rc)
        rc = kc_strv_push(&opts, &n_opts, buf);
    for (size_t i = 0; i < w->opts.n_include_dirs && !rc; i++) {
        if (hermetic && !under_root(&c->tk, w->opts.include_dirs[i]))
            continue;
        snprintf(buf, sizeof(buf), "--include-path=%s", w->opts.include_dirs[i]);
        rc = kc_strv_push(&opts, &n_opts, buf);
    }
    if (!rc && (hermetic || w->opts.no_source_include))
        rc = kc_strv_push(&opts, &n_opts, "--no-source-include");
    if (!rc && !w->opts.has_seed) {
        /* Reproducible bytes: the seed comes from the key, so a recompile, a
         * CI runner and a laptop all produce the same CUBIN for one key.
         * 32 bits: NVRTC 13 silently ignores a 64-bit seed (seen: the
         * internal-linkage names of block_sort.cu still varied). */
        snprintf(buf, sizeof(buf), "--frandom-seed=0x%02x%02x%02x%02x", r->pub.key.bytes[0],
                 r->pub.key.bytes[1], r->pub.key.bytes[2], r->pub.key.bytes[3]);
        rc = kc_strv_push(&opts, &n_opts, buf);
    }
    if (rc)
        goto out;
    /* Not hermetic: let NVRTC find "quoted" headers beside the source file. */
    const char *name = !hermetic && req->source_path ? req->source_path : w->source_name;
    nvrtcResult res = api->CreateProgram(&prog, w->source, name, (int)n_headers, contents,
                                         spellings);
    if (res != NVRTC_SUCCESS) {
        rc = nvrtc_fail(r, api, res, "could not take the program");
        goto out;
    }
    for (size_t i = 0; i < req->n_name_exprs; i++) {
        if ((res = api->AddNameExpression(prog, req->name_exprs[i])) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(r, api, res, "refused a name expression");
            goto out;
        }
    }
    uint64_t t0 = kc_mono_ns();
    nvrtcResult compiled = api->CompileProgram(prog, (int)n_opts, (const char *const *)opts);
    r->pub.compile_ns = kc_mono_ns() - t0;
    size_t log_size = 0;
    if (api->GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        if (!(r->log = kc_malloc(log_size))) {
            rc = KCACHE_ENOMEM;
            goto out;
        }
        if (api->GetProgramLog(prog, r->log) != NVRTC_SUCCESS)
            r->log[0] = '\0';
        r->log[log_size - 1] = '\0';
        r->pub.log = r->log;
    }
    if (compiled != NVRTC_SUCCESS) {
        rc = compiled == NVRTC_ERROR_COMPILATION
                 ? kc_result_fail(r, KCACHE_ECOMPILE, "%s did not compile (see the log)",
                                  w->source_name)
                 : nvrtc_fail(r, api, compiled, "failed");
        goto out;
    }
    size_t size = 0;
    if (w->kind == KCACHE_KIND_CUBIN)
        res = api->GetCUBINSize(prog, &size);
    else if (w->kind == KCACHE_KIND_PTX)
        res = api->GetPTXSize(prog, &size);
    else
        res = api->GetLTOIRSize(prog, &size);
    if (res != NVRTC_SUCCESS || size == 0) {
        rc = res != NVRTC_SUCCESS ? nvrtc_fail(r, api, res, "gave no output")
                                  : kc_result_fail(r, KCACHE_EIO, "NVRTC gave an empty %s",
                                                   kcache_kind_name(w->kind));
        goto out;
    }
    if (!(r->data = kc_malloc(size + 1))) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    if (w->kind == KCACHE_KIND_CUBIN)
        res = api->GetCUBIN(prog, r->data);
    else if (w->kind == KCACHE_KIND_PTX)
        res = api->GetPTX(prog, r->data);
    else
        res = api->GetLTOIR(prog, r->data);
    if (res != NVRTC_SUCCESS) {
        rc = nvrtc_fail(r, api, res, "gave no output");
        goto out;
    }
    /* PTX comes NUL-terminated and its size counts the NUL: store the text. */
    if (w->kind == KCACHE_KIND_PTX && size > 0 && r->data[size - 1] == '\0')
        size--;
    r->data[size] = '\0';
    r->pub.data = r->data;
    r->pub.size = size;
    r->exprs = kc_calloc(req->n_name_exprs + 1, sizeof(char *));
    r->lowered = kc_calloc(req->n_name_exprs + 1, sizeof(char *));
    if (!r->exprs || !r->lowered) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < req->n_name_exprs; i++) {
        const char *lowered = NULL;
        if ((res = api->GetLoweredName(prog, req->name_exprs[i], &lowered)) != NVRTC_SUCCESS) {
            rc = nvrtc_fail(r, api, res, "has no lowered name for a name expression");
            goto out;
        }
        r->exprs[i] = kc_strdup(req->name_exprs[i]);
        r->lowered[i] = kc_strdup(lowered);
        r->n_names = i + 1;
        if (!r->exprs[i] || !r->lowered[i]) {
            rc = KCACHE_ENOMEM;
            goto out;
        }
    }
    r->pub.n_names = r->n_names;
    r->pub.name_exprs = (const char *const *)r->exprs;
    r->pub.lowered_names = (const char *const *)r->lowered;
out:
    if (prog)
        api->DestroyProgram(&prog);
    kc_strv_free(opts, n_opts);
    free(contents);
    free(spellings);
    return rc;
}

void kc_store_result(kcache_compiler *c, struct kc_result *r, const char *name,
                     const char *toolchain, const kcache_input *inputs, size_t n_inputs)
{
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = r->pub.key;
    e.kind = r->pub.kind;
    e.arch = r->arch;
    e.name = name;
    e.data = r->pub.data;
    e.size = r->pub.size;
    e.log = r->pub.log;
    e.toolchain = toolchain;
    e.compile_ns = r->pub.compile_ns;
    e.key_material = r->pub.key_material;
    e.key_material_size = r->pub.key_material_size;
    e.n_names = r->pub.n_names;
    e.name_exprs = r->pub.name_exprs;
    e.lowered_names = r->pub.lowered_names;
    e.n_inputs = n_inputs;
    e.inputs = inputs;
    int rc = kcache_store_put(c->store, &e);
    if (rc) {
        /* The artifact is returned all the same; the result says why it was not kept. */
        kc_result_store_problem(r, rc, kcache_store_errmsg(c->store));
        kc_store_count_failure(c->store);
    }
}

/* Stores a fresh artifact with its inputs, so that verify can recompile it. */
static void store_result(kcache_compiler *c, const struct work *w, struct kc_result *r)
{
    size_t n_in = 0;
    kcache_input *in = kc_calloc(w->deps.n_deps + 1, sizeof(*in));
    if (!in) {
        kc_result_store_problem(r, KCACHE_ENOMEM, "out of memory storing the artifact");
        return;
    }
    in[n_in++] = (kcache_input){KCACHE_INPUT_SOURCE, w->source_name, w->source, w->source_size};
    for (size_t i = 0; i < w->deps.n_deps; i++)
        if (w->deps.deps[i].state == KC_DEP_USER)
            in[n_in++] = (kcache_input){KCACHE_INPUT_HEADER, w->deps.deps[i].spelling,
                                        w->deps.deps[i].content, w->deps.deps[i].size};
    const kc_nvrtc *api = NULL;
    char toolchain[256], ignored[64];
    kc_nvrtc_get(&c->tk, &api, ignored, sizeof(ignored));
    snprintf(toolchain, sizeof(toolchain), "nvrtc %d.%d (%s)", api ? api->major : 0,
             api ? api->minor : 0, c->tk.nvrtc_id);
    kc_store_result(c, r, w->source_name, toolchain, in, n_in);
    free(in);
}

/* A compile as a step of kc_through_cache(). */
struct compile_step {
    kcache_compiler *c;
    const kcache_request *req;
    const struct work *w;
    int hermetic;
};

static int run_compile_step(void *ctx, struct kc_result *r)
{
    struct compile_step *s = ctx;
    return kc_run_nvrtc(s->c, s->req, s->w, r, s->hermetic);
}

static void store_compile_step(void *ctx, struct kc_result *r)
{
    struct compile_step *s = ctx;
    store_result(s->c, s->w, r);
}

int kc_through_cache(kcache_compiler *c, struct kc_result *r, int use_store, unsigned flags,
                     const struct kc_step *step)
{
    int leased = 0;
    if (use_store && !(flags & KCACHE_COMPILE_REFRESH)) {
        int found = kc_lookup_or_lease(c, &r->pub.key, r, &leased);
        if (found == 1)
            return 0;
        if (found < 0) {
            kc_result_store_problem(r, found, kcache_store_errmsg(c->store));
            use_store = 0;
        }
    }
    struct heartbeat hb;
    if (leased)
        kc_heartbeat_start(&hb, c->store, &r->pub.key);
    int rc = step->run(step->ctx, r);
    if (leased)
        kc_heartbeat_stop(&hb);
    if (use_store) {
        kc_store_count_miss(c->store, step->arch, step->kind);
        if (!rc)
            step->store(step->ctx, r);
    }
    if (leased)
        kc_store_lease_release(c->store, &r->pub.key);
    return rc;
}

void kc_result_keyed(struct kc_result *r)
{
    r->pub.key_material = r->material.data;
    r->pub.key_material_size = r->material.size;
}

int kc_result_start(struct kc_result **r, uint64_t *t0, kcache_result **out,
                    const void *compiler, const void *request)
{
    *r = NULL;
    *t0 = kc_mono_ns();
    if (!out)
        return KCACHE_EINVAL;
    *out = NULL;
    if (!compiler || !request)
        return KCACHE_EINVAL;
    *r = kc_result_new();
    return *r ? 0 : KCACHE_ENOMEM;
}

int kc_result_run(kcache_result **out, kcache_compiler *c, const void *request,
                  kc_request_fn fn)
{
    struct kc_result *r;
    uint64_t t0;
    int rc = kc_result_start(&r, &t0, out, c, request);
    return rc ? rc : kc_result_finish(r, fn(c, request, r), t0, out);
}

int kc_result_finish(struct kc_result *r, int rc, uint64_t t0, kcache_result **out)
{
    r->pub.status = rc;
    r->pub.elapsed_ns = kc_mono_ns() - t0;
    if (rc == KCACHE_ENOMEM && !r->message[0])
        kc_result_fail(r, rc, "out of memory");
    *out = &r->pub;
    return rc;
}

static int compile_request(kcache_compiler *c, const void *request, struct kc_result *r)
{
    const kcache_request *req = request;
    struct work w;
    memset(&w, 0, sizeof(w));
    int rc = prepare(c, req, &w, r);
    if (!rc)
        rc = derive_key(c, req, &w, r);
    int hermetic = !w.deps.not_hermetic;
    r->pub.keyed = !rc && hermetic;
    if (rc)
        goto out;
    if (!hermetic) {
        char msg[700];
        snprintf(msg, sizeof(msg), "%s; compiled without the cache", w.deps.problem);
        kc_result_store_problem(r, KCACHE_ENOTSUP, msg);
    } else if (!c->store) {
        kc_result_store_problem(r, c->store_status, c->store_message);
    }
    if (req->flags & KCACHE_COMPILE_KEY_ONLY)
        goto out;
    int use_store = c->store && hermetic && !(req->flags & KCACHE_COMPILE_NO_CACHE);
    struct compile_step ctx = {c, req, &w, hermetic};
    struct kc_step step = {run_compile_step, store_compile_step, &ctx, w.nvrtc_arch, w.kind};
    rc = kc_through_cache(c, r, use_store, req->flags, &step);
out:
    kc_work_free(&w);
    return rc;
}

KCACHE_API int kcache_compile(kcache_result **out, kcache_compiler *compiler,
                              const kcache_request *request)
{
    return kc_result_run(out, compiler, request, compile_request);
}
