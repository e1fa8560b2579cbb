/*
 * The compiler handle and its results, and the one path every compile and link
 * takes through the cache: look up (or wait for whoever compiles), else run
 * the step, count the miss, store. Which target a request means (its arch or
 * -arch, "native" through the driver, the output kind of a real or virtual
 * architecture); the init functions of the compile's versioned structs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stddef.h>

#include "compile/compileint.h"
#include "format/settings.h"
#include "kcache/compile.h"
#include "util/common.h"
#include "cuda/driver.h"
#define KC_DEFAULT_WAIT_MS (10u * 60u * 1000u)

/*
 * The cache is off by $KCACHE_DISABLE or by disable = true in kcache.conf,
 * or because kcache.conf cannot be read (why then says so).
 */
static int disabled(const char *store_path, char *why, size_t why_size)
{
    char *path = NULL;
    if (kc_config_path(&path, store_path, why, why_size) != 0) {
        why[0] = '\0';
        return 0; /* no location: opening the store will say so */
    }
    int off = kc_config_disabled(path, why, why_size);
    free(path);
    return off;
}

/*
 * require_hit and log, from the environment or kcache.conf. The log file is
 * opened once, to append, never through a symbolic link; one that cannot be
 * opened is said once, to the log callback, and costs no compile.
 */
static void request_settings(kcache_compiler *c, const char *store_path)
{
    char *path = NULL, text[PATH_MAX], why[256];
    c->request_log = -1;
    if (kc_config_path(&path, store_path, why, sizeof(why)) != 0)
        path = NULL;
    if (kc_config_value(text, sizeof(text), "require_hit", NULL, path) == 0)
        kc_config_bool(&c->require_hit, text);
    if (kc_config_value(text, sizeof(text), "log", NULL, path) == 0 && text[0]) {
        /* Not blocking (a FIFO would stall every compile), and only a plain
         * file of this user's with one name: never one another user made. */
        const char *bad = NULL;
        struct stat st;
        int fd = open(text, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                      0600);
        if (fd < 0)
            bad = strerror(errno);
        else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            bad = "not a regular file";
        else if (st.st_uid != geteuid() || st.st_nlink != 1)
            bad = "another user's file, or one with other names";
        if (bad && fd >= 0)
            close(fd);
        c->request_log = bad ? -1 : fd;
        if (bad && c->log) {
            char msg[512];
            snprintf(msg, sizeof(msg), "cannot append to the request log %.300s: %s", text, bad);
            c->log(c->log_userdata, KCACHE_LOG_WARNING, msg);
        }
    }
    free(path);
}

/* 1 if this process runs one thread now (Linux's count of its tasks). */
static int one_thread(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[128];
    int threads = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Threads: %d", &threads) == 1)
            break;
    if (f)
        fclose(f);
    return threads == 1;
}

/*
 * Learns which variables this NVRTC reads now, while the process runs one
 * thread: the probe forks (compile/nvenv.c), and a child forked while no
 * other thread can hold a lock it needs never sticks. kcache compile -j
 * starts its threads only after this. Not for the drop-in, which makes its
 * compiler under a lock its own fork handler takes; a process with threads
 * learns it at its first miss, as before.
 */
static void learn_environment_early(kcache_compiler *c, const kcache_compiler_options *o)
{
    if (!c->store || (o->version >= 2 && o->nvrtc_path) || kc_toolkit_id_unknown(c->tk.nvrtc_id) ||
        !one_thread())
        return;
    kc_nvenv env;
    if (kc_nvenv_get(&env, &c->tk, c->store) == 0)
        kc_nvenv_free(&env);
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
    if (kc_version_check(errbuf, errbuf_size, "kcache_compiler_options", options->version,
                         KCACHE_COMPILER_OPTIONS_VERSION))
        return KCACHE_EINVAL;
    kcache_compiler *c = kc_calloc(1, sizeof(*c));
    if (!c)
        return kc_fmt(errbuf, errbuf_size, KCACHE_ENOMEM, "out of memory");
    /* Every NVRTC this process loads is watched before its first compile (nvenv.c). */
    kc_toolkit_on_nvrtc_load(kc_nvenv_watch);
    int rc = kc_toolkit_find(&c->tk, options->toolkit_root, errbuf, errbuf_size);
    if (!rc && options->version >= 2 && options->nvrtc_path)
        rc = kc_toolkit_use_nvrtc(&c->tk, options->nvrtc_path, errbuf, errbuf_size);
    if (rc) {
        kc_toolkit_free(&c->tk);
        free(c);
        return rc;
    }
    c->wait_timeout_ms = options->wait_timeout_ms ? options->wait_timeout_ms : KC_DEFAULT_WAIT_MS;
    c->log = options->log;
    c->log_userdata = options->log_userdata;
    request_settings(c, options->store_path);
    if (options->store) {
        c->store = options->store;
    } else if (options->no_store) {
        c->store_status = KCACHE_EDISABLED;
        snprintf(c->store_message, sizeof(c->store_message), "no cache in use");
    } else if (disabled(options->store_path, c->store_message, sizeof(c->store_message))) {
        /* Without the cache, and the result says why: off, or a config file it cannot use. */
        c->store_status = c->store_message[0] ? KCACHE_EINVAL : KCACHE_EDISABLED;
        if (!c->store_message[0])
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
    if (c->store) {
        /* Never fatal either: a remote that cannot be used is said once, in results. */
        const char *url = options->version >= 3 ? options->remote : NULL;
        int ro = kcache_remote_open(&c->remote, c->store, url, c->remote_message,
                                    sizeof(c->remote_message));
        if (ro == 0)
            kc_remote_set_log(c->remote, options->log, options->log_userdata);
        else if (ro == KCACHE_ENOTFOUND)
            c->remote_message[0] = '\0'; /* none set: nothing to say */
        int so = kc_shared_open(&c->shared, c->store, c->shared_message,
                                sizeof(c->shared_message));
        if (so == 0)
            kc_shared_set_log(c->shared, options->log, options->log_userdata);
        else if (so == KCACHE_ENOTFOUND)
            c->shared_message[0] = '\0';
    }
    learn_environment_early(c, options);
    *out = c;
    return 0;
}

KCACHE_API void kcache_compiler_free(kcache_compiler *compiler)
{
    if (!compiler)
        return;
    kcache_remote_close(compiler->remote);
    kc_shared_close(compiler->shared);
    if (compiler->request_log >= 0)
        close(compiler->request_log);
    if (compiler->own_store)
        kcache_store_close(compiler->store);
    kc_toolkit_free(&compiler->tk);
    free(compiler);
}

KCACHE_API kcache_store *kcache_compiler_store(kcache_compiler *compiler)
{
    return compiler ? compiler->store : NULL;
}

KCACHE_API int kcache_compiler_store_status(const kcache_compiler *compiler,
                                            const char **message)
{
    if (message)
        *message = compiler && !compiler->store ? compiler->store_message : "";
    if (!compiler)
        return KCACHE_EINVAL;
    if (compiler->store)
        return 0;
    return compiler->store_status ? compiler->store_status : KCACHE_EIO;
}

KCACHE_API const char *kcache_compiler_nvrtc_id(const kcache_compiler *compiler)
{
    return compiler ? compiler->tk.nvrtc_id : NULL;
}

/*
 * The log a hit replays: without the lines about files this compile made
 * (NVRTC's automatic PCH says where it created or used a precompiled header,
 * a file of this process that a later process never sees). NULL: as is.
 */
static char *log_for_hits(const char *log)
{
    if (!log || !strstr(log, "precompiled header"))
        return NULL;
    kc_buf b = {0};
    for (const char *p = log; *p;) {
        size_t n = strcspn(p, "\n");
        int drop = 0;
        for (size_t i = 0; i + 18 <= n && !drop; i++)
            drop = !memcmp(p + i, "precompiled header", 18);
        if (!drop && kc_buf_append(&b, p, n + (p[n] == '\n')))
            goto nomem;
        p += n + (p[n] == '\n');
    }
    if (kc_buf_append(&b, "", 1))
        goto nomem;
    return (char *)b.data;
nomem:
    kc_buf_free(&b);
    return NULL;
}

void kc_store_result(kcache_compiler *c, struct kc_result *r, const char *name,
                     const char *toolchain, const kcache_input *inputs, size_t n_inputs)
{
    char *hit_log = log_for_hits(r->pub.log);
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = r->pub.key;
    e.kind = r->pub.kind;
    e.arch = r->arch;
    e.name = name;
    e.data = r->pub.data;
    e.size = r->pub.size;
    e.log = hit_log ? hit_log : r->pub.log;
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
    if (c->shared)
        kc_shared_publish(c->shared, &e); /* the chain's order: shared, then remote */
    if (c->remote)
        kc_remote_push(c->remote, &e); /* waits at most the remote's operation timeout */
    free(hit_log);
    if (rc) {
        /* The artifact is returned all the same; the result says why it was not kept. */
        kc_result_store_problem(r, rc, kcache_store_errmsg(c->store));
        /* kcache_store_put() counts its own failures but for these (twice was wrong). */
        if (rc == KCACHE_EINVAL || rc == KCACHE_EREADONLY || rc == KCACHE_EVERSION)
            kc_store_count_failure(c->store);
    }
}

/* 1: served from the remote (r filled); 0: compile, *remote_leased when the fleet waits on us. */
static int kc_through_remote(kcache_compiler *c, struct kc_result *r, int *remote_leased,
                             struct heartbeat *hb)
{
    kcache_entry *e = NULL;
    int found = kc_remote_fetch(&e, c->remote, &r->pub.key);
    if (found < 0)
        return 0;
    if (found == 0) {
        uint64_t deadline = kc_mono_ns() + (uint64_t)c->wait_timeout_ms * 1000000u;
        if (!kc_remote_lease_or_wait(&e, remote_leased, c->remote, &r->pub.key, deadline)) {
            if (*remote_leased) {
                pthread_mutex_lock(&hb->lock);
                hb->remote = c->remote;
                pthread_mutex_unlock(&hb->lock);
            }
            return 0;
        }
    }
    if (c->shared)
        kc_shared_publish(c->shared, e); /* a lower tier's hit fills the tiers above it */
    kc_result_from_entry(r, e);
    r->pub.remote_hit = 1;
    return 1;
}

/* 1: served from the shared directory, now in the local store too (r filled); 0: not there. */
static int kc_through_shared(kcache_compiler *c, struct kc_result *r)
{
    kcache_entry *e = NULL;
    if (kc_shared_fetch(&e, c->shared, &r->pub.key) != 1)
        return 0;
    kc_result_from_entry(r, e);
    return 1;
}

/* Why a request that require_hit would have served is refused, truly said. */
static int require_hit_fail(const kcache_compiler *c, struct kc_result *r, int looked)
{
    const char *why = looked              ? "not in the cache"
                      : !c->store         ? "the cache is not in use"
                      : r->pub.keyed      ? "the cache was not looked in"
                                          : "this compile cannot be cached";
    return kc_result_fail(r, KCACHE_ENOTFOUND, "%s, and require_hit is set: nothing was compiled",
                          why);
}

int kc_through_cache(kcache_compiler *c, struct kc_result *r, int use_store, unsigned flags,
                     const struct kc_step *step)
{
    int leased = 0;
    /* The step may file its result under another key (compile.c: the one with the
     * program's name); the leases are this one's. */
    const kcache_key key = r->pub.key;
    if (use_store && !(flags & KCACHE_COMPILE_REFRESH)) {
        unsigned get_flags = flags & KCACHE_COMPILE_UNCOUNTED ? KCACHE_GET_NO_COUNT : 0;
        int found = kc_lookup_or_lease(c, &key, step->also, get_flags, r, &leased);
        if (found == 2)
            step->served_also(step->ctx, r);
        if (found > 0)
            return 0;
        if (found < 0) {
            /* A lookup or lease that failed (a full disk fails the lease's write) is a
             * store failure like a put's: stats must not say 0 after these warnings. */
            kc_result_store_problem(r, found, kcache_store_errmsg(c->store));
            kc_store_count_failure(c->store);
            use_store = 0;
        }
    }
    struct heartbeat hb;
    if (leased)
        kc_heartbeat_start(&hb, c->store, &key);
    /*
     * The shared tier, asked only by the holder of the local lease
     * (remote/tier.h says why): a remote hit is stored locally and served from there, and a
     * fleet's misses of one key wait for one compile.
     */
    int remote_leased = 0;
    if (leased && c->shared && kc_through_shared(c, r)) {
        kc_heartbeat_stop(&hb);
        kc_store_lease_release(c->store, &r->pub.key);
        return 0;
    }
    if (c->shared_message[0])
        kc_result_store_problem(r, KCACHE_EINVAL, c->shared_message);
    if (leased && c->remote && kc_through_remote(c, r, &remote_leased, &hb)) {
        kc_heartbeat_stop(&hb);
        kc_store_lease_release(c->store, &key);
        return 0;
    }
    if (c->remote_message[0])
        kc_result_store_problem(r, KCACHE_EINVAL, c->remote_message);
    int rc = c->require_hit ? require_hit_fail(c, r, use_store) : step->run(step->ctx, r);
    if (leased)
        kc_heartbeat_stop(&hb);
    if (use_store) {
        /* A failed compile stored nothing: it is an error (the named counter
         * "errors"), not a miss; one NVRTC refused for its options or an
         * architecture it does not know is a bad request. */
        if (rc) {
            kc_store_count(c->store, rc == KCACHE_EINVAL ? "request_errors" : "errors", 1);
        } else {
            if (!(flags & KCACHE_COMPILE_UNCOUNTED))
                kc_store_count_miss(c->store, step->arch, step->kind);
            step->store(step->ctx, r);
        }
    }
    if (remote_leased)
        kc_remote_release(c->remote, &key);
    if (leased)
        kc_store_lease_release(c->store, &key);
    return rc;
}

/* What the request log says a request came to; *why, the reason where there is one. */
static const char *outcome(const struct kc_result *r, int rc, const char **why)
{
    *why = "";
    if (rc) {
        *why = r->message;
        return "error";
    }
    if (r->pub.hit)
        return r->pub.remote_hit ? "remote-hit" : "hit";
    if (r->pub.keyed && !r->pub.store_status) {
        *why = r->miss_why ? r->miss_why : "";
        return "miss";
    }
    *why = r->store_message;
    return "uncached";
}

/*
 * One line for the request in the log file: UTC time, pid, key, outcome,
 * arch and kind, milliseconds, the source's name, reason (the name and the
 * reason last: they may hold spaces). One write(), so that lines of
 * processes appending at once do not interleave.
 */
static void log_request(const kcache_compiler *c, const struct kc_result *r, int rc,
                        const char *name)
{
    struct timespec now;
    struct tm tm;
    char when[32], key[KCACHE_KEY_HEX_SIZE] = "-", line[1024];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    if (r->pub.keyed || r->pub.hit)
        kcache_key_hex(key, &r->pub.key);
    const char *why, *what = outcome(r, rc, &why);
    int n = snprintf(line, sizeof(line), "%s.%03ldZ pid=%ld key=%s outcome=%s arch=%s kind=%s "
                     "ms=%.3f source=%s%s%s\n", when, now.tv_nsec / 1000000L, (long)getpid(), key,
                     what, r->pub.arch && r->pub.arch[0] ? r->pub.arch : "-",
                     kcache_kind_name(r->pub.kind), (double)r->pub.elapsed_ns / 1e6,
                     name ? name : "-", why[0] ? " reason=" : "", why);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line)) {
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    for (char *p = line; p < line + n - 1; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    ssize_t w = write(c->request_log, line, (size_t)n);
    (void)w; /* a log that cannot be written costs nothing else */
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
                  const char *name, kc_request_fn fn)
{
    struct kc_result *r;
    uint64_t t0;
    int rc = kc_result_start(&r, &t0, out, c, request);
    if (rc)
        return rc;
    rc = kc_result_finish(r, fn(c, request, r), t0, out);
    if (c->request_log >= 0)
        log_request(c, r, rc, name);
    return rc;
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

/* Which target a request means: its arch or -arch, "native" through the driver. */
int kc_resolve_arch(kcache_compiler *c, const kcache_request *req, struct work *w,
                        struct kc_result *r)
{
    char msg[512];
    char from_req[32] = "";
    int native = 0;
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
    if (from_req[0] && w->opts.arch[0] &&
        (strcmp(from_req, w->opts.arch) != 0 || w->opts.several_archs))
        return kc_result_fail(r, KCACHE_EINVAL,
                              "two architectures given (%s and %s): give one per request",
                              from_req, w->opts.arch);
    const char *arch = from_req[0] ? from_req : w->opts.arch;
    if (!arch[0])
        return kc_result_fail(r, KCACHE_EINVAL, "no GPU architecture: pass one (e.g. sm_90)");
    /* NVRTC's kind: LTO-IR with -dlto; a CUBIN when some -arch is real (several: any). */
    int several = w->opts.several_archs;
    int is_virtual = several ? !w->opts.real_arch : !strncmp(arch, "compute_", 8);
    w->kind = req->output  ? req->output
              : w->opts.dlto ? KCACHE_KIND_LTOIR
              : is_virtual   ? KCACHE_KIND_PTX
                             : KCACHE_KIND_CUBIN;
    if (w->kind < KCACHE_KIND_CUBIN || w->kind > KCACHE_KIND_LTOIR)
        return kc_result_fail(r, KCACHE_EINVAL, "output kind %d is not cubin, ptx or ltoir",
                              (int)w->kind);
    if (!strncmp(arch, "lto_", 4))
        return kc_result_fail(r, KCACHE_EINVAL, "%s: give the real architecture (sm_%s) with "
                              "LTO-IR output", arch, arch + 4);
    if (w->kind == KCACHE_KIND_CUBIN && is_virtual)
        return kc_result_fail(r, KCACHE_EINVAL,
                              "%s is a virtual architecture: it gives PTX; use sm_%s for a CUBIN",
                              arch, several ? "XX" : arch + 8);
    if (w->kind == KCACHE_KIND_PTX && !is_virtual && !several)
        /* PTX for sm_90 is PTX for compute_90: one target, one entry. */
        snprintf(w->nvrtc_arch, sizeof(w->nvrtc_arch), "compute_%s", arch + 3);
    else
        snprintf(w->nvrtc_arch, sizeof(w->nvrtc_arch), "%s", arch);
    snprintf(r->arch, sizeof(r->arch), "%s", w->nvrtc_arch);
    r->pub.kind = w->kind;
    return 0;
}

/* The exported kcache_xxx_init() of the compile's versioned structs (<kcache/core.h>). */
KC_DEFINE_INIT(kcache_compiler_options, offsetof(kcache_compiler_options, nvrtc_path),
               offsetof(kcache_compiler_options, remote), sizeof(kcache_compiler_options))
/* 3: the same fields as 2, kcache_made's grew; 4: resolution_of. */
KC_DEFINE_INIT(kcache_request, offsetof(kcache_request, n_headers),
               offsetof(kcache_request, resolution_of), offsetof(kcache_request, resolution_of),
               sizeof(kcache_request))
KC_DEFINE_INIT(kcache_link_request, sizeof(kcache_link_request))
