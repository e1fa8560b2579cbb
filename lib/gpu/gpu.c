/*
 * From cached bytes to a CUfunction: context safety, loading, and the
 * in-process memo (see kcache/gpu.h for the contract).
 *
 * One open-addressing hash table holds two kinds of slots, both keyed by
 * (cache key, context id): module slots (name NULL), consulted only on a
 * function miss, and function slots (key, context, name as the caller spelt
 * it). Contexts are identified by cuCtxGetId where the driver has it: a
 * context destroyed and another created at the same address must not find the
 * old modules. Readers share a rwlock; a load holds it exclusively, so two
 * threads missing the same kernel load it once.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "cuda/driver.h"
#include "kcache/gpu.h"
#include "kcache/store.h"

/* A module this handle loaded, with the names it can map. */
struct module {
    CUcontext ctx;
    CUmodule mod;
    size_t n_names;
    char **exprs;
    char **lowered;
};

struct slot {
    uint64_t hash; /* 0: empty */
    kcache_key key;
    unsigned long long ctx_id;
    char *name; /* NULL: a module slot */
    CUfunction fn;
    struct module *module;
};

struct primary {
    int ordinal;
    CUdevice dev;
    CUcontext ctx;
};

struct kcache_gpu {
    kcache_compiler *compiler;
    const kc_cu *cu; /* NULL: no driver, see nodriver */
    int device;
    pthread_rwlock_t lock; /* slots and modules */
    struct slot *slots;
    size_t cap, used;
    struct module **modules;
    size_t n_modules, modules_cap;
    pthread_mutex_t ctx_lock; /* primaries */
    struct primary *primaries;
    size_t n_primaries;
    pthread_mutex_t err_lock;
    char errmsg[KC_ERRMSG_SIZE];
    char nodriver[KC_ERRMSG_SIZE];
};

static int fail(kcache_gpu *g, int code, const char *fmt, ...) KC_PRINTF(3, 4);
static int fail(kcache_gpu *g, int code, const char *fmt, ...)
{
    char buf[KC_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g->err_lock);
    kc_fmt(g->errmsg, sizeof(g->errmsg), code, "%s", buf);
    pthread_mutex_unlock(&g->err_lock);
    kc_errmsg_note(g, buf);
    return code;
}

/* A driver failure, mapped to the nearest kcache code. */
static int cu_fail(kcache_gpu *g, CUresult rc, const char *what)
{
    char why[256];
    kc_driver_strerror(why, sizeof(why), (int)rc);
    int code = KCACHE_ENOTSUP;
    if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        code = KCACHE_ENOMEM;
    else if (rc == CUDA_ERROR_NOT_FOUND)
        code = KCACHE_ENOTFOUND;
    return fail(g, code, "%s: %s", what, why);
}

static int no_driver(kcache_gpu *g)
{
    return fail(g, KCACHE_ENOTSUP, "%s", g->nodriver);
}

int kcache_gpu_new(kcache_gpu **out, kcache_compiler *compiler, const kcache_gpu_options *options,
                   char *errbuf, size_t errbuf_size)
{
    if (!out)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL, "kcache_gpu_new: out is NULL");
    *out = NULL;
    if (!compiler)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL, "kcache_gpu_new: compiler is NULL");
    if (options && kc_version_check(errbuf, errbuf_size, "kcache_gpu_options", options->version,
                                    KCACHE_GPU_OPTIONS_VERSION))
        return KCACHE_EINVAL;
    if (options && options->device < 0)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL,
                      "kcache_gpu_new: device ordinal %d is negative", options->device);
    kcache_gpu *g = kc_calloc(1, sizeof(*g));
    if (!g)
        return kc_fmt(errbuf, errbuf_size, KCACHE_ENOMEM, "out of memory");
    g->compiler = compiler;
    g->device = options ? options->device : 0;
    pthread_rwlock_init(&g->lock, NULL);
    pthread_mutex_init(&g->ctx_lock, NULL);
    pthread_mutex_init(&g->err_lock, NULL);
    /* No driver is not a failure here: every call says so instead (see gpu.h). */
    if (kc_driver_get(&g->cu, g->nodriver, sizeof(g->nodriver)))
        snprintf(g->errmsg, sizeof(g->errmsg), "%s", g->nodriver);
    *out = g;
    return 0;
}

int kcache_gpu_available(const kcache_gpu *gpu)
{
    return gpu && gpu->cu;
}

const char *kcache_gpu_errmsg(const kcache_gpu *gpu)
{
    kcache_gpu *g = (kcache_gpu *)gpu; /* err_lock is the handle's own */
    return kc_errmsg_thread(g, g ? g->errmsg : NULL, g ? &g->err_lock : NULL, "no GPU handle");
}

/*
 * Makes sure the calling thread has a current context; retains the primary
 * context of the handle's device for a thread that has none.
 */
static int ensure_context(kcache_gpu *g, CUcontext *ctx, unsigned long long *ctx_id)
{
    const kc_cu *cu = g->cu;
    CUcontext c = NULL;
    CUresult rc = cu->ctx_get_current(&c);
    if (rc != CUDA_SUCCESS)
        return cu_fail(g, rc, "cuCtxGetCurrent");
    if (!c) {
        int code = 0;
        pthread_mutex_lock(&g->ctx_lock);
        for (size_t i = 0; i < g->n_primaries; i++)
            if (g->primaries[i].ordinal == g->device)
                c = g->primaries[i].ctx;
        if (!c) {
            int count = 0;
            CUdevice dev = 0;
            struct primary *grown = NULL;
            if ((rc = cu->device_get_count(&count)) != CUDA_SUCCESS) {
                code = cu_fail(g, rc, "cuDeviceGetCount");
            } else if (g->device >= count) {
                code = fail(g, KCACHE_ENOTSUP,
                            "no CUDA device %d (%d visible): pick another "
                            "in kcache_gpu_options.device",
                            g->device, count);
            } else if ((rc = cu->device_get(&dev, g->device)) != CUDA_SUCCESS) {
                code = cu_fail(g, rc, "cuDeviceGet");
            } else if (!(grown = kc_realloc(g->primaries, (g->n_primaries + 1) * sizeof(*grown)))) {
                code = fail(g, KCACHE_ENOMEM, "out of memory");
            } else {
                g->primaries = grown;
                if ((rc = cu->primary_ctx_retain(&c, dev)) != CUDA_SUCCESS)
                    code = cu_fail(g, rc, "cuDevicePrimaryCtxRetain");
                else
                    g->primaries[g->n_primaries++] = (struct primary){g->device, dev, c};
            }
        }
        pthread_mutex_unlock(&g->ctx_lock);
        if (code)
            return code;
        if ((rc = cu->ctx_set_current(c)) != CUDA_SUCCESS)
            return cu_fail(g, rc, "cuCtxSetCurrent");
    }
    unsigned long long id = (uintptr_t)c;
    if (cu->ctx_get_id && (rc = cu->ctx_get_id(c, &id)) != CUDA_SUCCESS)
        return cu_fail(g, rc, "cuCtxGetId");
    *ctx = c;
    *ctx_id = id;
    return 0;
}

int kcache_gpu_context(struct CUctx_st **out, kcache_gpu *gpu)
{
    if (!gpu || !out)
        return gpu ? fail(gpu, KCACHE_EINVAL, "kcache_gpu_context: out is NULL") : KCACHE_EINVAL;
    *out = NULL;
    if (!gpu->cu)
        return no_driver(gpu);
    unsigned long long id;
    return ensure_context(gpu, out, &id);
}

static uint64_t slot_hash(const kcache_key *key, unsigned long long ctx_id, const char *name)
{
    /* The key is already a uniform hash: its first bytes are a good start. */
    uint64_t h;
    memcpy(&h, key->bytes, sizeof(h));
    h ^= (ctx_id + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
    for (const unsigned char *p = (const unsigned char *)name; p && *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    if (!name)
        h ^= 0x5bd1e995ull;
    return h ? h : 1;
}

/* The slot for (key, ctx, name), or the empty slot where it would go. Lock held. */
static struct slot *find_slot(const kcache_gpu *g, uint64_t h, const kcache_key *key,
                              unsigned long long ctx_id, const char *name)
{
    size_t mask = g->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct slot *s = &g->slots[i];
        if (!s->hash)
            return s;
        if (s->hash == h && s->ctx_id == ctx_id && !memcmp(&s->key, key, sizeof(*key)) &&
            (name ? s->name && !strcmp(s->name, name) : !s->name))
            return s;
    }
}

static CUfunction lookup_function(kcache_gpu *g, const kcache_key *key, unsigned long long ctx_id,
                                  const char *name)
{
    CUfunction fn = NULL;
    pthread_rwlock_rdlock(&g->lock);
    if (g->cap) {
        struct slot *s = find_slot(g, slot_hash(key, ctx_id, name), key, ctx_id, name);
        fn = s->hash ? s->fn : NULL;
    }
    pthread_rwlock_unlock(&g->lock);
    return fn;
}

/* Makes room for n more slots (the table stays at most half full). Exclusive lock held. */
static int reserve_slots(kcache_gpu *g, size_t n)
{
    if ((g->used + n) * 2 <= g->cap)
        return 0;
    size_t cap = g->cap ? g->cap * 2 : 64;
    struct slot *slots = kc_calloc(cap, sizeof(*slots));
    if (!slots)
        return fail(g, KCACHE_ENOMEM, "out of memory");
    struct slot *old = g->slots;
    size_t old_cap = g->cap;
    g->slots = slots;
    g->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].hash)
            *find_slot(g, old[i].hash, &old[i].key, old[i].ctx_id, old[i].name) = old[i];
    free(old);
    return 0;
}

static void module_free(struct module *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_names; i++) {
        free(m->exprs[i]);
        free(m->lowered[i]);
    }
    free(m->exprs);
    free(m->lowered);
    free(m);
}

static struct module *module_new(size_t n_names, const char *const *exprs,
                                 const char *const *lowered)
{
    struct module *m = kc_calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    if (n_names) {
        m->exprs = kc_calloc(n_names, sizeof(char *));
        m->lowered = kc_calloc(n_names, sizeof(char *));
        if (!m->exprs || !m->lowered)
            goto fail;
        for (; m->n_names < n_names; m->n_names++) {
            m->exprs[m->n_names] = kc_strdup(exprs[m->n_names]);
            m->lowered[m->n_names] = kc_strdup(lowered[m->n_names]);
            if (!m->exprs[m->n_names] || !m->lowered[m->n_names]) {
                m->n_names++;
                goto fail;
            }
        }
    }
    return m;
fail:
    module_free(m);
    return NULL;
}

/* What to load: an artifact and the names it maps, from a result or an entry. */
struct artifact {
    kcache_key key;
    int memoise; /* 0: the request was not keyed; load, track, but never serve again */
    kcache_kind kind;
    const char *arch;
    const void *data;
    size_t size;
    size_t n_names;
    const char *const *exprs;
    const char *const *lowered;
};

/* Loads a module into the current context (ctx). Exclusive lock held. */
static int load_module(kcache_gpu *g, CUcontext ctx, const struct artifact *a, struct module **out)
{
    *out = NULL;
    if (a->kind == KCACHE_KIND_LTOIR)
        return fail(g, KCACHE_EINVAL,
                    "the artifact is LTO-IR, which the driver cannot load: "
                    "link it (kcache_gpu_link_function)");
    struct module **grown =
        kc_grow(g->modules, &g->modules_cap, g->n_modules, sizeof(*grown), 16);
    if (!grown)
        return fail(g, KCACHE_ENOMEM, "out of memory");
    g->modules = grown;
    struct module *m = module_new(a->n_names, a->exprs, a->lowered);
    if (!m)
        return fail(g, KCACHE_ENOMEM, "out of memory");
    /* PTX is compiled by the driver here: its log says why it was refused. */
    char log[1024] = "";
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(uintptr_t)sizeof(log)};
    CUresult rc = g->cu->module_load_data_ex(&m->mod, a->data, 2, opts, vals);
    if (rc != CUDA_SUCCESS) {
        module_free(m);
        char why[256], hex[KCACHE_KEY_HEX_SIZE];
        kc_driver_strerror(why, sizeof(why), (int)rc);
        kcache_key_hex(hex, &a->key);
        if (rc == CUDA_ERROR_NO_BINARY_FOR_GPU || rc == CUDA_ERROR_INVALID_IMAGE ||
            rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            return fail(g, KCACHE_ENOTSUP,
                        "cannot load %.12s (%s, %s) on this GPU: %s; compile "
                        "for the device's architecture (--arch native) %s",
                        hex, kcache_kind_name(a->kind), a->arch ? a->arch : "?", why, log);
        return fail(g, rc == CUDA_ERROR_OUT_OF_MEMORY ? KCACHE_ENOMEM : KCACHE_ENOTSUP,
                    "cuModuleLoadDataEx %.12s: %s %s", hex, why, log);
    }
    m->ctx = ctx;
    g->modules[g->n_modules++] = m;
    *out = m;
    return 0;
}

/*
 * Finds or loads the module for (key, ctx), resolves name in it and memoises
 * the function. Takes the exclusive lock.
 */
static int load_and_resolve(kcache_gpu *g, CUcontext ctx, unsigned long long ctx_id,
                            const struct artifact *a, const char *name, CUfunction *out)
{
    int rc = 0;
    pthread_rwlock_wrlock(&g->lock);
    struct slot *fs = NULL, *ms = NULL;
    struct module *m = NULL;
    uint64_t fh = slot_hash(&a->key, ctx_id, name), mh = slot_hash(&a->key, ctx_id, NULL);
    if (a->memoise) {
        /* Room for both slots first, so that nothing loaded is left unrecorded. */
        if ((rc = reserve_slots(g, 2)))
            goto out;
        fs = find_slot(g, fh, &a->key, ctx_id, name);
        if (fs->hash) { /* another thread loaded it meanwhile */
            *out = fs->fn;
            goto out;
        }
        ms = find_slot(g, mh, &a->key, ctx_id, NULL);
        m = ms->hash ? ms->module : NULL;
    }
    if (!m) {
        if ((rc = load_module(g, ctx, a, &m)))
            goto out;
        if (ms) {
            *ms = (struct slot){mh, a->key, ctx_id, NULL, NULL, m};
            g->used++;
            fs = find_slot(g, fh, &a->key, ctx_id, name);
        }
    }
    const char *symbol = name;
    for (size_t i = 0; i < m->n_names; i++)
        if (!strcmp(m->exprs[i], name))
            symbol = m->lowered[i];
    CUfunction fn = NULL;
    CUresult crc = g->cu->module_get_function(&fn, m->mod, symbol);
    if (crc == CUDA_ERROR_NOT_FOUND) {
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, &a->key);
        rc = fail(g, KCACHE_ENOTFOUND, "no kernel '%s' in %.12s: %s", name, hex,
                  symbol == name ? "a template or C++ kernel needs its name expression in the "
                                   "request (name_exprs)"
                                 : "its lowered name is not in the module");
        goto out;
    }
    if (crc != CUDA_SUCCESS) {
        rc = cu_fail(g, crc, "cuModuleGetFunction");
        goto out;
    }
    if (fs) {
        char *copy = kc_strdup(name);
        if (!copy) {
            rc = fail(g, KCACHE_ENOMEM, "out of memory");
            goto out;
        }
        *fs = (struct slot){fh, a->key, ctx_id, copy, fn, m};
        g->used++;
    }
    *out = fn;
out:
    pthread_rwlock_unlock(&g->lock);
    return rc;
}

/* A failed compile or link: its message, and the compiler's first error line. */
static int result_fail(kcache_gpu *g, int rc, const kcache_result *r, const char *what)
{
    if (!r)
        return fail(g, rc, "%s: %s", what, kcache_strerror(rc));
    const char *line = r->log ? strstr(r->log, "error") : NULL;
    int len = 0;
    if (line) {
        while (line > r->log && line[-1] != '\n')
            line--;
        len = (int)strcspn(line, "\n");
        if (len > 200)
            len = 200;
    }
    return fail(g, rc, "%s: %s%s%.*s", what,
                r->message && *r->message ? r->message : kcache_strerror(rc), line ? ": " : "", len,
                line ? line : "");
}

/* What every function lookup starts with: its arguments, a driver, a context. */
static int begin_lookup(kcache_gpu *g, const void *request, const char *name, CUfunction *out,
                        const char *fn, CUcontext *ctx, unsigned long long *ctx_id)
{
    if (!g)
        return KCACHE_EINVAL;
    if (out)
        *out = NULL;
    if (!request || !name || !*name || !out)
        return fail(g, KCACHE_EINVAL, "%s: %s is missing", fn,
                    !request ? "the request or key"
                    : !out   ? "out"
                             : "the kernel name");
    if (!g->cu)
        return no_driver(g);
    return ensure_context(g, ctx, ctx_id);
}

static struct artifact artifact_of(const kcache_result *r)
{
    return (struct artifact){r->key,  r->keyed,   r->kind,       r->arch,         r->data,
                             r->size, r->n_names, r->name_exprs, r->lowered_names};
}

/* Gets a result for a request: a compile or a link; key_only derives the key alone. */
typedef int (*produce_fn)(kcache_gpu *g, const void *request, int key_only, kcache_result **out);

static int produce_compile(kcache_gpu *g, const void *request, int key_only, kcache_result **out)
{
    kcache_request q = *(const kcache_request *)request;
    if (key_only)
        q.flags |= KCACHE_COMPILE_KEY_ONLY | KCACHE_COMPILE_KEY_REMEMBERED;
    return kcache_compiler_compile(out, g->compiler, &q);
}

static int produce_link(kcache_gpu *g, const void *request, int key_only, kcache_result **out)
{
    /* A link's key covers its inputs' digests: their (cached) compiles run, the link does not. */
    kcache_link_request q = *(const kcache_link_request *)request;
    if (key_only)
        q.flags |= KCACHE_COMPILE_KEY_ONLY;
    return kcache_compiler_link(out, g->compiler, &q);
}

/*
 * The key alone first: a memoised kernel needs nothing else. Otherwise the
 * artifact (from the cache or made now) is loaded and the function memoised.
 */
static int function_of(kcache_gpu *gpu, const void *request, const char *name, CUfunction *out,
                       const char *api, const char *step, produce_fn produce)
{
    CUcontext ctx;
    unsigned long long ctx_id;
    int rc = begin_lookup(gpu, request, name, out, api, &ctx, &ctx_id);
    if (rc)
        return rc;
    kcache_result *r = NULL;
    if ((rc = produce(gpu, request, 1, &r))) {
        rc = result_fail(gpu, rc, r, api);
        goto out;
    }
    if ((*out = lookup_function(gpu, &r->key, ctx_id, name)))
        goto out;
    kcache_result_free(r);
    r = NULL;
    if ((rc = produce(gpu, request, 0, &r))) {
        rc = result_fail(gpu, rc, r, step);
        goto out;
    }
    struct artifact a = artifact_of(r);
    rc = load_and_resolve(gpu, ctx, ctx_id, &a, name, out);
out:
    kcache_result_free(r);
    return rc;
}

int kcache_gpu_function(struct CUfunc_st **out, kcache_gpu *gpu, const kcache_request *request,
                        const char *name)
{
    return function_of(gpu, request, name, out, "kcache_gpu_function", "compile",
                       produce_compile);
}

int kcache_gpu_link_function(struct CUfunc_st **out, kcache_gpu *gpu,
                             const kcache_link_request *request, const char *name)
{
    return function_of(gpu, request, name, out, "kcache_gpu_link_function", "link", produce_link);
}

int kcache_gpu_function_by_key(struct CUfunc_st **out, kcache_gpu *gpu, const kcache_key *key,
                               const char *name)
{
    CUcontext ctx;
    unsigned long long ctx_id;
    int rc = begin_lookup(gpu, key, name, out, "kcache_gpu_function_by_key", &ctx, &ctx_id);
    if (rc)
        return rc;
    if ((*out = lookup_function(gpu, key, ctx_id, name)))
        return 0;
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, key);
    kcache_store *store = kcache_compiler_store(gpu->compiler);
    if (!store)
        return fail(gpu, KCACHE_ENOTFOUND, "no kernel %.12s: the compiler has no store", hex);
    kcache_entry *e = NULL;
    rc = kcache_store_get(&e, store, key, KCACHE_GET_DEFAULT);
    if (rc == KCACHE_ENOTFOUND)
        return fail(gpu, rc, "no entry %.12s in %s: compile it first (kcache_gpu_function)", hex,
                    kcache_store_path(store));
    if (rc)
        return fail(gpu, rc, "%s", kcache_store_errmsg(store));
    struct artifact a = {*key,    1,          e->kind,       e->arch,         e->data,
                         e->size, e->n_names, e->name_exprs, e->lowered_names};
    rc = load_and_resolve(gpu, ctx, ctx_id, &a, name, out);
    kcache_entry_free(e);
    return rc;
}

int kcache_gpu_driver_symbol_version(void **out, kcache_gpu *gpu, const char *name,
                                     int cuda_version)
{
    if (!gpu)
        return KCACHE_EINVAL;
    if (!name || !*name || !out || cuda_version < 0)
        return fail(gpu, KCACHE_EINVAL, "kcache_gpu_driver_symbol: %s",
                    !out               ? "out is missing"
                    : cuda_version < 0 ? "negative CUDA version"
                                       : "the name is missing");
    *out = NULL;
    if (!gpu->cu)
        return no_driver(gpu);
    char msg[KC_ERRMSG_SIZE];
    int rc = kc_driver_symbol(out, name, cuda_version, msg, sizeof(msg));
    return rc ? fail(gpu, rc, "%s", msg) : 0;
}

int kcache_gpu_driver_symbol(void **out, kcache_gpu *gpu, const char *name)
{
    return kcache_gpu_driver_symbol_version(out, gpu, name, 0);
}

int kcache_gpu_arch(char *buf, size_t size, kcache_gpu *gpu, int ordinal, int arch_specific)
{
    if (!gpu)
        return KCACHE_EINVAL;
    if (!buf || size < 16)
        return fail(gpu, KCACHE_EINVAL, "kcache_gpu_arch: the buffer needs 16 bytes");
    buf[0] = '\0';
    if (!gpu->cu)
        return no_driver(gpu);
    char msg[KC_ERRMSG_SIZE];
    int rc = kc_driver_native_arch(buf, size, ordinal, arch_specific, msg, sizeof(msg));
    return rc ? fail(gpu, rc, "%s", msg) : 0;
}

void kcache_gpu_free(kcache_gpu *gpu)
{
    if (!gpu)
        return;
    const kc_cu *cu = gpu->cu;
    for (size_t i = 0; i < gpu->n_modules; i++) {
        struct module *m = gpu->modules[i];
        /* Unload in the module's own context, whatever this thread has current. */
        if (cu && cu->ctx_push_current(m->ctx) == CUDA_SUCCESS) {
            (void)cu->module_unload(m->mod); /* a destroyed context took it already */
            CUcontext popped;
            (void)cu->ctx_pop_current(&popped);
        }
        module_free(m);
    }
    for (size_t i = 0; i < gpu->n_primaries; i++)
        (void)cu->primary_ctx_release(gpu->primaries[i].dev);
    for (size_t i = 0; i < gpu->cap; i++)
        free(gpu->slots[i].name);
    free(gpu->slots);
    free(gpu->modules);
    free(gpu->primaries);
    pthread_rwlock_destroy(&gpu->lock);
    pthread_mutex_destroy(&gpu->ctx_lock);
    pthread_mutex_destroy(&gpu->err_lock);
    kc_errmsg_forget(gpu);
    free(gpu);
}

/* The exported kcache_xxx_init() of the GPU side's versioned structs (<kcache/core.h>). */
KC_DEFINE_INIT(kcache_gpu_options, sizeof(kcache_gpu_options))
