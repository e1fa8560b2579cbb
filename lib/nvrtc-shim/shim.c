/*
 * Over 700 lines: NVRTC's whole API, one short entry point each, over one handle's state.
 *
 * The drop-in NVRTC's entry points.
 *
 * A program gets a handle of ours. Until it compiles, the handle only holds
 * copies of what it was given; nvrtcCompileProgram hands them to
 * kcache_compiler_compile() (the public API: the same include resolver, key, store,
 * single flight and counters as every other kcache compile) with a compiler
 * of our own for the miss (kcache_request.compile):
 *
 *   - a hit is served from the result: return code, log, the output, the
 *     lowered names, and the empty outputs NVRTC gives for what the compile
 *     did not produce (checked call by call against NVRTC by
 *     tests/nvrtc-shim). NVRTC is never loaded.
 *   - a miss is compiled by NVIDIA's library on a program built from the same
 *     arguments, exactly as the program asked (its options, its -I, its name:
 *     no --frandom-seed, no hermetic rewriting, which would change __FILE__
 *     and the log), stored, and from then on every call on that handle goes
 *     to NVIDIA's library. Where the process has CPUs to spare, NVIDIA's
 *     compile starts at once and kcache resolves the includes meanwhile
 *     (compile/overlap.c says why that is sound).
 *
 * Anything the hit cannot answer itself (an output asked for in an order
 * NVRTC refuses, a call on odd arguments) rebuilds the real program from the
 * copies, compiles it if the program did, and forwards: slower, never
 * different.
 *
 * What kcache cannot key soundly goes to NVIDIA's library uncached and is
 * counted by reason ($KCACHE_NVRTC_REPORT names a file that gets the counts
 * at exit; `kcache run -v` prints them). Because the bytes of a miss come
 * from the program's own options, the key also holds them verbatim, the
 * in-memory header names and, with line information, the working directory
 * (extra_digest): an entry made by `kcache compile`, which compiles
 * hermetically, is never served here, nor the reverse. The real library is
 * keyed by its build, never its path (real.c says which library it is).
 *
 * Because NVIDIA's library reads the disk itself on a miss, what it read is
 * observed (observe.c) and a miss is stored only when every file it opened
 * or probed is one the key covers: otherwise the program still gets
 * NVIDIA's answer, and the reason ("unpredicted-read", ...) is counted.
 * doc/design.md, "The drop-in's soundness", has the decision and its cost.
 */
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <kcache/compile.h>
#include <kcache/store.h>

#include "cuda/toolkit.h"
#include "nvrtc-shim/facts.h"
#include "nvrtc-shim/observe.h"
#include "nvrtc-shim/shim.h"
#include "util/common.h"

#define SHIM_API __attribute__((visibility("default")))

/* Why a compile went to NVIDIA's library uncached. */
enum reason {
    R_DISABLED,
    R_NO_STORE,
    R_FLOW_CALLBACK,
    R_PCH,
    R_OPTIX,
    R_SIDE_EFFECT,
    R_NO_ARCH,
    R_ODD_ARGUMENTS,
    R_NOT_KEYED,
    R_CPEX,
    R_UNPREDICTED,
    R_CLOSURE_CHANGED,
    R_UNOBSERVABLE,
    R_OBS_INCOMPLETE,
    R_STALE_PCH,
    R_NVRTC_REPLACED,
    R_SEVERAL_ARCHS,
    R_ENVIRONMENT,
    R_REQUIRE_HIT,
    R_RESTRICT_KEPT,
    R_COUNT
};

static const char *const reason_names[R_COUNT] = {
    [R_DISABLED] = "disabled",
    [R_NO_STORE] = "no-cache",
    [R_FLOW_CALLBACK] = "flow-callback",
    [R_PCH] = "precompiled-headers",
    [R_OPTIX] = "optix-ir",
    [R_SIDE_EFFECT] = "option-with-side-effect",
    [R_NO_ARCH] = "no-arch",
    [R_ODD_ARGUMENTS] = "odd-arguments",
    [R_NOT_KEYED] = "not-keyable",
    [R_CPEX] = "private-constructor",
    /* A miss compiled but not stored (observe.c): what NVRTC read was not all keyed. */
    [R_UNPREDICTED] = "unpredicted-read",
    [R_CLOSURE_CHANGED] = "closure-changed",
    [R_UNOBSERVABLE] = "unobservable",
    [R_OBS_INCOMPLETE] = "observation-incomplete",
    /* NVRTC's automatic PCH, made earlier in this process, answered: NVRTC 13
     * reuses it without looking at the headers again, so the bytes may be
     * those of headers since edited (NVIDIA's to the program all the same). */
    [R_STALE_PCH] = "automatic-pch-reused",
    /* The library loaded is another build than the one its file showed when the
     * compiler read it (replaced in between): its kernels are not that build's. */
    [R_NVRTC_REPLACED] = "nvrtc-replaced",
    /* -arch twice with different values: NVRTC combines them (compile/opts.c). */
    [R_SEVERAL_ARCHS] = "several-archs",
    /* NVRTC read an environment variable its build was not seen to read, so
     * the key does not hold its value (lib/compile/nvenv.c). */
    [R_ENVIRONMENT] = "environment-not-keyed",
    /* KCACHE_REQUIRE_HIT and not in the cache: NVRTC_ERROR_COMPILATION, nothing compiled. */
    [R_REQUIRE_HIT] = "require-hit-refused",
    /* NVIDIA's NVRTC keeps -restrict once the program asked for it (cuda/toolkit.h):
     * a compile without it is then not what its options give in another process. */
    [R_RESTRICT_KEPT] = "restrict-kept",
};

static atomic_ulong reason_count[R_COUNT];
static atomic_ulong hit_count, miss_count;


/* ---- the compiler, per process ------------------------------------------ */

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static kcache_compiler *compiler;
static pid_t compiler_pid;
static int compiler_failed;
static int disabled = -1;

/*
 * Fork: the child must not use the parent's SQLite connection, nor find the
 * lock held by a thread that does not exist in it. The parent's compiler is
 * left behind unclosed in the child (closing it could touch the parent's
 * locks); the child opens its own on first need.
 */
static void before_fork(void)
{
    /* The order every thread takes them in (get_compiler asks for the real path). */
    kc_facts_fork_prepare();
    pthread_mutex_lock(&state_lock);
    kc_real_lock();
}

static void after_fork_parent(void)
{
    kc_real_unlock();
    pthread_mutex_unlock(&state_lock);
    kc_facts_fork_parent();
}

/* Parents' compilers, left alone in a child but kept reachable (not leaked). */
static kcache_compiler *inherited[8];

static void after_fork_child(void)
{
    kc_real_unlock();
    pthread_mutex_unlock(&state_lock);
    kc_facts_fork_child();
    if (compiler) {
        memmove(inherited + 1, inherited, sizeof(inherited) - sizeof(*inherited));
        inherited[0] = compiler;
    }
    compiler = NULL;
    compiler_failed = 0;
    /* The child's report counts the child's compiles. */
    atomic_store(&hit_count, 0);
    atomic_store(&miss_count, 0);
    for (int i = 0; i < R_COUNT; i++)
        atomic_store(&reason_count[i], 0);
}

/*
 * At exit: hits are counted in batches (see store.c), so the batch is
 * written now; then the counts by reason, for `kcache run`.
 */
static void at_exit(void)
{
    if (getpid() != compiler_pid)
        return;
    pthread_mutex_lock(&state_lock);
    if (compiler && kcache_compiler_store(compiler)) {
        kc_shim_enter();
        kcache_store_flush(kcache_compiler_store(compiler));
        kc_shim_leave();
    }
    pthread_mutex_unlock(&state_lock);
    const char *path = getenv("KCACHE_NVRTC_REPORT");
    if (!path || !*path)
        return;
    /* Appended to by every process of the run: never through a link planted at the name. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    /* nvrtc-loaded says whether NVIDIA's library was needed at all. */
    fprintf(f, "pid %ld hits %lu misses %lu nvrtc-loaded %s", (long)getpid(),
            atomic_load(&hit_count), atomic_load(&miss_count), kc_real_loaded() ? "yes" : "no");
    for (int i = 0; i < R_COUNT; i++)
        if (atomic_load(&reason_count[i]))
            fprintf(f, " %s %lu", reason_names[i], atomic_load(&reason_count[i]));
    /* Last, since a path may hold spaces: the NVRTC the program's calls went to. */
    const char *real = kc_real_path();
    if (real) {
        fputs(" nvrtc-path ", f);
        for (const unsigned char *c = (const unsigned char *)real; *c; c++)
            fprintf(f, *c < 0x20 || *c == 0x7f ? "\\x%02x" : "%c", *c);
    }
    fputc('\n', f);
    fclose(f);
}

__attribute__((constructor)) static void shim_init(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static int is_disabled(void)
{
    if (disabled < 0) {
        const char *v = getenv("KCACHE_DISABLE");
        disabled = v && *v && strcmp(v, "0") != 0;
    }
    return disabled;
}

/*
 * A cache that fails says so on the program's stderr, as the command does:
 * each message once per process (a tier that fails is left alone for a
 * while, so it says so once too), never more than a few. The program's
 * compiles go on. A cache that is off says nothing.
 */
static void shim_warn(const char *message)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t said[8];
    static size_t n_said;
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *c = (const unsigned char *)message; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    pthread_mutex_lock(&lock);
    int fresh = n_said < sizeof(said) / sizeof(said[0]);
    for (size_t i = 0; fresh && i < n_said; i++)
        fresh = said[i] != h;
    if (fresh)
        said[n_said++] = h;
    pthread_mutex_unlock(&lock);
    if (!fresh)
        return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "kcache: warning: %s (the drop-in NVRTC; the program's "
                     "compiles go on)\n", message);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n
                                                                         : sizeof(line) - 1) < 0)
        return;
}

static void shim_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    if (level <= KCACHE_LOG_WARNING)
        shim_warn(message);
}

/* The compiler, opened once per process; NULL when there is no cache. */
static kcache_compiler *get_compiler(void)
{
    static int atexit_done;
    pthread_mutex_lock(&state_lock);
    if (!compiler && !compiler_failed) {
        kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
        o.nvrtc_path = kc_real_path();
        o.log = shim_log;
        char err[512];
        kc_shim_enter();
        compiler_failed = !o.nvrtc_path || kcache_compiler_new(&compiler, &o, err, sizeof(err));
        if (compiler_failed && o.nvrtc_path) {
            /* No toolkit where kcache looks (a pip-only install: nvidia/cu13/lib/):
             * the real library's own tree is one. */
            char root[PATH_MAX];
            snprintf(root, sizeof(root), "%s", o.nvrtc_path);
            for (int up = 0; up < 2; up++) {
                char *slash = strrchr(root, '/');
                if (slash)
                    *slash = '\0';
            }
            o.toolkit_root = root;
            compiler_failed = kcache_compiler_new(&compiler, &o, err, sizeof(err)) != 0;
        }
        kc_shim_leave();
        const char *why = NULL;
        if (compiler_failed && o.nvrtc_path)
            shim_warn(err);
        else if (!compiler_failed &&
                 kcache_compiler_store_status(compiler, &why) != KCACHE_EDISABLED && why[0])
            shim_warn(why);
        compiler_pid = getpid();
        if (!atexit_done) {
            atexit(at_exit);
            atexit_done = 1;
        }
    }
    kcache_compiler *c = compiler;
    pthread_mutex_unlock(&state_lock);
    return c;
}

kcache_compiler *kc_shim_compiler(void)
{
    if (is_disabled())
        return NULL;
    kcache_compiler *c = get_compiler();
    return kcache_compiler_store(c) ? c : NULL;
}

static void count(enum reason r)
{
    get_compiler(); /* so that the report is written */
    atomic_fetch_add(&reason_count[r], 1);
}

/* ---- program handles ----------------------------------------------------- */

static char **copy_strv(const char *const *v, size_t n, int *ok)
{
    char **out = calloc(n + 1, sizeof(*out));
    if (!out) {
        *ok = 0;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (!(out[i] = strdup(v[i])))
            *ok = 0;
    return out;
}

static void prog_free(struct prog *p)
{
    free(p->src);
    free(p->name);
    kc_strv_free(p->headers, (size_t)p->n_headers);
    kc_strv_free(p->include_names, (size_t)p->n_headers);
    kc_strv_free(p->exprs, p->n_exprs);
    kc_strv_free(p->opts, (size_t)p->n_opts);
    kcache_result_free(p->hit);
    free(p->refusal);
    kcache_result_free(p->hit_ptx);
    kcache_result_free(p->miss);
    kc_observe_free(p->obs);
    free(p);
}

/*
 * NVIDIA's program for p, built from the copies (and compiled, if the
 * program compiled), so that any call can be forwarded. Returns 0 or NVRTC's
 * error (which the forwarded call then returns, as NVRTC would have).
 */
nvrtcResult kc_prog_materialize(struct prog *p, const kc_real_nvrtc **out)
{
    const kc_real_nvrtc *api = kc_real();
    *out = api;
    if (!api)
        return NVRTC_ERROR_INTERNAL_ERROR;
    /* A compile kcache refused made nothing, and NVIDIA's program must not either. */
    if (p && p->refusal)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (p->real)
        return NVRTC_SUCCESS;
    nvrtcResult rc = api->CreateProgram(&p->real, p->src, p->name, p->n_headers,
                                        (const char *const *)p->headers,
                                        (const char *const *)p->include_names);
    if (rc != NVRTC_SUCCESS)
        return rc;
    for (size_t i = 0; i < p->n_exprs; i++)
        api->AddNameExpression(p->real, p->exprs[i]);
    if (p->compiled)
        api->CompileProgram(p->real, p->n_opts, (const char *const *)p->opts);
    /* The entry is not needed any more: everything now comes from NVIDIA's program. */
    kcache_result_free(p->hit);
    kcache_result_free(p->hit_ptx);
    p->hit = p->hit_ptx = NULL;
    p->passthrough = 1;
    return NVRTC_SUCCESS;
}


/*
 * A program NVIDIA's library made (rc, real) that is never cached: wrapped
 * in a handle of ours that forwards every call, and counted under why.
 */
static nvrtcResult wrap_real(nvrtcProgram *prog, nvrtcResult rc, const kc_real_nvrtc *api,
                             nvrtcProgram real, enum reason why)
{
    if (rc != NVRTC_SUCCESS || !prog)
        return rc;
    struct prog *p = calloc(1, sizeof(*p));
    if (!p) {
        api->DestroyProgram(&real);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    p->real = real;
    p->passthrough = 1;
    *prog = (nvrtcProgram)p;
    count(why);
    return rc;
}

SHIM_API nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                        int numHeaders, const char *const *headers,
                                        const char *const *includeNames)
{
    /* A NULL name is no odd argument: NVRTC names such a program
     * "default_program" (nvrtc.h), and CuPy passes NULL for every RawModule
     * and RawKernel compiled without its disk cache. */
    int odd = !prog || !src || numHeaders < 0 ||
              (numHeaders > 0 && (!headers || !includeNames));
    for (int i = 0; !odd && i < numHeaders; i++)
        odd = !headers[i] || !includeNames[i];
    if (odd) {
        /* NVRTC's own answer to odd arguments (and its default name): forwarded whole. */
        const kc_real_nvrtc *api = kc_real();
        if (!api)
            return NVRTC_ERROR_INTERNAL_ERROR;
        nvrtcProgram real = NULL;
        nvrtcResult rc = api->CreateProgram(prog ? &real : NULL, src, name, numHeaders,
                                            headers, includeNames);
        return wrap_real(prog, rc, api, real, R_ODD_ARGUMENTS);
    }
    struct prog *p = calloc(1, sizeof(*p));
    if (!p)
        return NVRTC_ERROR_OUT_OF_MEMORY;
    int ok = 1;
    p->src = strdup(src);
    /* Kept as given (NULL or ""), for NVIDIA's program; the key's name is NVRTC's. */
    p->name = name ? strdup(name) : NULL;
    p->n_headers = numHeaders;
    p->headers = copy_strv(headers, (size_t)numHeaders, &ok);
    p->include_names = copy_strv(includeNames, (size_t)numHeaders, &ok);
    if (!ok || !p->src || (name && !p->name)) {
        prog_free(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    *prog = (nvrtcProgram)p;
    return NVRTC_SUCCESS;
}

SHIM_API nvrtcResult __nvrtcCPEx(nvrtcProgram *prog, const char *src, const char *name, int n,
                                 const char *const *headers, const char *const *names, int a7,
                                 void *a8, void *a9);
SHIM_API nvrtcResult __nvrtcCPEx(nvrtcProgram *prog, const char *src, const char *name, int n,
                                 const char *const *headers, const char *const *names, int a7,
                                 void *a8, void *a9)
{
    /* Undocumented: what its three last arguments change is unknown, so its
     * programs are never cached; the handle is wrapped like any other. */
    const kc_real_nvrtc *api = kc_real();
    if (!api)
        return NVRTC_ERROR_INTERNAL_ERROR;
    nvrtcProgram real = NULL;
    nvrtcResult rc = api->CPEx(prog ? &real : NULL, src, name, n, headers, names, a7, a8, a9);
    return wrap_real(prog, rc, api, real, R_CPEX);
}

SHIM_API nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    if (!prog || !*prog) {
        const kc_real_nvrtc *api = kc_real();
        return api ? api->DestroyProgram(prog) : NVRTC_ERROR_INVALID_PROGRAM;
    }
    struct prog *p = (struct prog *)*prog;
    nvrtcResult rc = NVRTC_SUCCESS;
    if (p->real) {
        const kc_real_nvrtc *api = kc_real();
        rc = api ? api->DestroyProgram(&p->real) : NVRTC_ERROR_INTERNAL_ERROR;
    }
    prog_free(p);
    *prog = NULL;
    return rc;
}

SHIM_API nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char *name_expression)
{
    struct prog *p = (struct prog *)prog;
    if (!p || !name_expression || !*name_expression || p->passthrough || p->compiled)
        FORWARD(p, AddNameExpression(p ? p->real : NULL, name_expression));
    char **grown = realloc(p->exprs, (p->n_exprs + 2) * sizeof(*grown));
    if (!grown)
        return NVRTC_ERROR_OUT_OF_MEMORY;
    p->exprs = grown;
    if (!(p->exprs[p->n_exprs] = strdup(name_expression)))
        return NVRTC_ERROR_OUT_OF_MEMORY;
    p->exprs[++p->n_exprs] = NULL;
    return NVRTC_SUCCESS;
}

SHIM_API nvrtcResult nvrtcSetFlowCallback(nvrtcProgram prog,
                                          int (*callback)(void *, void *), void *payload)
{
    struct prog *p = (struct prog *)prog;
    /* A callback can cancel the compile halfway: such a program is never cached. */
    if (p && !p->passthrough && !p->compiled)
        count(R_FLOW_CALLBACK);
    FORWARD(p, SetFlowCallback(p ? p->real : NULL, callback, payload));
}

/* ---- compiling ------------------------------------------------------------ */

static int opt_is(const char *opt, const char *const *names)
{
    for (; *names; names++) {
        size_t n = strlen(*names);
        if (!strncmp(opt, *names, n) && (opt[n] == '\0' || opt[n] == '='))
            return 1;
    }
    return 0;
}

/*
 * A reason not to cache, from the options alone, or -1. out_kind gets the
 * output the compile makes.
 */
static int option_reason(int n, const char *const *opts, kcache_kind *out_kind)
{
    static const char *const pch[] = {"-pch", "--pch", "-create-pch", "--create-pch",
                                      "-use-pch", "--use-pch", "-pch-dir", "--pch-dir", NULL};
    static const char *const optix[] = {"-optix-ir", "--optix-ir", NULL};
    /* Options that write files or print, which a hit would not do. */
    static const char *const side[] = {"-time", "--time", "-fdevice-time-trace",
                                       "--fdevice-time-trace", "-opt-info", "--optimization-info",
                                       "-fdevice-syntax-only", "--fdevice-syntax-only", NULL};
    static const char *const dlto[] = {"-dlto", "--dlto", "-dlink-time-opt", "--dlink-time-opt",
                                       NULL};
    static const char *const arch[] = {"-arch", "--gpu-architecture", NULL};
    int has_arch = 0, lto = 0, is_virtual = 0;
    const char *first_arch = NULL;
    for (int i = 0; i < n; i++) {
        const char *o = opts[i];
        /* NVRTC strips white space around each option (" -lineinfo" is -lineinfo), which
         * every test here would miss: such a program is left to NVRTC. */
        if (!o || (*o && (isspace((unsigned char)o[0]) ||
                          isspace((unsigned char)o[strlen(o) - 1]))))
            return R_ODD_ARGUMENTS;
        if (opt_is(o, pch))
            return R_PCH;
        if (opt_is(o, optix))
            return R_OPTIX;
        if (opt_is(o, side))
            return R_SIDE_EFFECT;
        if (opt_is(o, dlto))
            lto = 1;
        if (opt_is(o, arch)) {
            const char *v = strchr(o, '=');
            if (!v && i + 1 < n)
                v = opts[i + 1];
            else if (v)
                v++;
            if (!v || !strcmp(v, "native"))
                return R_NO_ARCH;
            if (has_arch && strcmp(v, first_arch) != 0)
                return R_SEVERAL_ARCHS;
            has_arch = 1;
            first_arch = v;
            is_virtual = !strncmp(v, "compute_", 8);
        }
    }
    if (!has_arch)
        return R_NO_ARCH; /* NVRTC's default target: left to NVRTC */
    *out_kind = lto ? KCACHE_KIND_LTOIR : is_virtual ? KCACHE_KIND_PTX : KCACHE_KIND_CUBIN;
    return -1;
}

/*
 * The working directory as NVRTC names it in line information (PTX's .file
 * holds the absolute path of every file) and in LTO-IR (which holds it with
 * no option at all): $PWD when it is the same directory, else getcwd(). ""
 * when the compile makes neither, whose bytes do not depend on it.
 */
static void line_info_dir(char *out, size_t size, const struct prog *p)
{
    static const char *const line_info[] = {"-lineinfo", "--generate-line-info", "-G",
                                            "--device-debug", "-dlto", "--dlto",
                                            "-dlink-time-opt", "--dlink-time-opt", NULL};
    int on = 0;
    for (int i = 0; i < p->n_opts && !on; i++)
        on = opt_is(p->opts[i], line_info);
    out[0] = '\0';
    if (on)
        kc_nvrtc_workdir(out, size);
}

/*
 * What keys a compile made here apart from the same inputs compiled elsewhere.
 * Not the real library's path: its build is in the key already (the compiler
 * keys the library it was given by its GNU build-id), and a byte-identical
 * NVRTC in another venv must hit. The working directory only where NVRTC
 * writes it into the bytes.
 */
static int extra_material(char **out, size_t *size, const struct prog *p)
{
    char dir[PATH_MAX];
    line_info_dir(dir, sizeof(dir), p);
    size_t n = strlen("kcache nvrtc drop-in 2") + 1 + strlen(dir) + 1;
    for (int i = 0; i < p->n_opts; i++)
        n += strlen(p->opts[i]) + 1;
    for (int i = 0; i < p->n_headers; i++)
        n += strlen(p->include_names[i]) + 1;
    char *b = malloc(n), *q = b;
    if (!b)
        return -1;
    /* Each string with its NUL. */
    q = stpcpy(q, "kcache nvrtc drop-in 2") + 1;
    q = stpcpy(q, dir) + 1;
    for (int i = 0; i < p->n_opts; i++)
        q = stpcpy(q, p->opts[i]) + 1;
    for (int i = 0; i < p->n_headers; i++)
        q = stpcpy(q, p->include_names[i]) + 1;
    *out = b;
    *size = n;
    return 0;
}

/* One output of NVIDIA's compiled program, as kcache keeps it (PTX without its NUL). */
struct output_buf {
    char *data;
    size_t size;
};

static nvrtcResult read_output(struct output_buf *out, const kc_real_nvrtc *api,
                               nvrtcProgram real, kcache_kind kind)
{
    size_t size = 0;
    out->data = NULL;
    out->size = 0;
    nvrtcResult rc = kind == KCACHE_KIND_CUBIN ? api->GetCUBINSize(real, &size)
                     : kind == KCACHE_KIND_PTX ? api->GetPTXSize(real, &size)
                                               : api->GetLTOIRSize(real, &size);
    if (rc != NVRTC_SUCCESS || size == 0)
        return rc != NVRTC_SUCCESS ? rc : NVRTC_ERROR_INTERNAL_ERROR;
    if (!(out->data = malloc(size)))
        return NVRTC_ERROR_OUT_OF_MEMORY;
    rc = kind == KCACHE_KIND_CUBIN ? api->GetCUBIN(real, out->data)
         : kind == KCACHE_KIND_PTX ? api->GetPTX(real, out->data)
                                   : api->GetLTOIR(real, out->data);
    out->size = size;
    if (kind == KCACHE_KIND_PTX && out->data[size - 1] == '\0')
        out->size--;
    return rc;
}

/* What a miss hands kcache, and what it learnt of NVIDIA's answer. */
struct miss {
    struct prog *p;
    kcache_kind kind;
    int compile;             /* compile p first (else it is compiled already) */
    int beside;              /* the PTX kept beside a CUBIN: not a lookup of its own */
    const kcache_result *like; /* the sm_XX miss whose resolution the PTX beside it reuses */
    int ran;                 /* kcache called us: a miss */
    nvrtcResult rc;          /* NVIDIA's answer to the compile */
    struct output_buf out;
    char *log;
    const char **lowered;
    char toolchain[PATH_MAX + 64];
    char cwd[PATH_MAX];      /* where the request was resolved */
    unsigned long dir_epoch; /* kc_observe_dir_epoch() before cwd was read */
};

static enum reason reason_of(const char *name)
{
    for (int i = 0; i < R_COUNT; i++)
        if (!strcmp(reason_names[i], name))
            return (enum reason)i;
    return R_OBS_INCOMPLETE;
}

/*
 * 1 if the NVRTC loaded is the build the keys name: the compiler read the
 * build-id from the file, maybe long before the first miss loaded it (a hit
 * and the facts never load it), and an upgrade in between replaces the file.
 */
static int loaded_is_keyed(void)
{
    const char *id = kcache_compiler_nvrtc_id(get_compiler());
    const char *named = id ? strstr(id, " build-id ") : NULL;
    const char *loaded = kc_real_build_id();
    return named && loaded && !strcmp(named + strlen(" build-id "), loaded);
}

/*
 * Whether what NVRTC read while compiling p (p->obs) is covered by the key
 * kcache derived (made's closure): if not, made->no_store says why.
 */
static void judge(struct miss *m, kcache_made *made, const char *why_not_observed)
{
    const char *why = why_not_observed;
    if (!why)
        why = kc_observe_verdict(m->p->obs, made,
                                 m->p->name && *m->p->name ? m->p->name : "default_program",
                                 (const char *const *)m->p->include_names,
                                 (size_t)m->p->n_headers);
    if (why) {
        made->no_store = reason_names[reason_of(why)];
    } else if (m->log && strstr(m->log, "using precompiled header")) {
        made->no_store = reason_names[R_STALE_PCH];
    } else if (!loaded_is_keyed()) {
        made->no_store = reason_names[R_NVRTC_REPLACED];
    }
}

/*
 * kcache_request.compile for the drop-in: NVIDIA's library compiles the
 * program exactly as the program asked (its options, its -I, its name), on a
 * program built from the same arguments, which then answers every later call.
 */
/*
 * The compile kcache keys and stores, with --no-cache added when the program
 * did not give it, as kcache's own compiles run (compile/nvrtc.c): NVRTC's own
 * cache changes no byte, but it reads variables (HOME, its cache's settings)
 * that the environment key would otherwise have to refuse, and it starts the
 * CUDA driver. The program's options follow it, as they are.
 */
static nvrtcResult compile_no_cache(const kc_real_nvrtc *api, const struct prog *p)
{
    int given = 0;
    for (int i = 0; i < p->n_opts && !given; i++)
        given = p->opts[i] && (!strncmp(p->opts[i], "--no-cache", 10) ||
                               !strncmp(p->opts[i], "-no-cache", 9));
    const char **opts = given ? NULL : malloc(((size_t)p->n_opts + 1) * sizeof(*opts));
    if (given || !opts)
        return api->CompileProgram(p->real, p->n_opts, (const char *const *)p->opts);
    /* First: an option whose value is missing at the end takes the next
     * argument, and NVRTC ignores some of those when nothing follows. */
    opts[0] = "--no-cache";
    for (int i = 0; i < p->n_opts; i++)
        opts[i + 1] = p->opts[i];
    nvrtcResult rc = api->CompileProgram(p->real, p->n_opts + 1, opts);
    free(opts);
    return rc;
}

/* NVRTC's flow callback on an overlapped miss: cancel once kcache found the entry. */
static int stop_if_found(void *payload, void *reserved)
{
    (void)reserved;
    const struct prog *p = payload;
    const kcache_made *made = atomic_load(&p->stopping);
    return made && made->stop_asked(made) ? 1 : 0;
}

/*
 * NVIDIA's compile of p, observed: what NVRTC reads while it compiles is what
 * the key must have covered. On an overlapped miss it may be cancelled once
 * kcache finds the entry (served instead). NULL, or why it was not observed.
 */
static const char *observed_compile(struct miss *m, const kc_real_nvrtc *api, kcache_made *made)
{
    struct prog *p = m->p;
    kc_observe_free(p->obs);
    const char *unobserved = kc_observe_begin(&p->obs, m->cwd, m->dir_epoch);
    if (made->stop_asked) {
        atomic_store(&p->stopping, made);
        api->SetFlowCallback(p->real, stop_if_found, p);
    }
    m->rc = compile_no_cache(api, p);
    atomic_store(&p->stopping, NULL);
    kc_observe_end(p->obs);
    return unobserved;
}

/*
 * The compile of a miss, and whether its reads can be judged (0: kcache
 * does not store it whatever it says). Overlapped (made->await_closure),
 * NVIDIA's compile ran while kcache resolved the includes; a closure with a
 * file changed since just before is compiled again now, after the
 * resolution, as a miss that was not overlapped is.
 */
static int compile_for_miss(struct miss *m, const kc_real_nvrtc **api, kcache_made *made,
                            const char **unobserved)
{
    struct prog *p = m->p;
    p->compiled = 0; /* the compile is the one below */
    m->rc = kc_prog_materialize(p, api);
    p->compiled = 1;
    if (m->rc == NVRTC_SUCCESS)
        *unobserved = observed_compile(m, *api, made);
    if (m->rc != NVRTC_SUCCESS || !made->await_closure)
        return 1;
    int again = made->await_closure(made);
    if (again < 0)
        return 0;
    if (again == 1) {
        (*api)->DestroyProgram(&p->real);
        p->passthrough = 0;
        p->compiled = 0;
        m->rc = kc_prog_materialize(p, api);
        p->compiled = 1;
        if (m->rc == NVRTC_SUCCESS)
            *unobserved = observed_compile(m, *api, made);
    }
    return 1;
}

static int compile_miss(void *userdata, kcache_made *made)
{
    struct miss *m = userdata;
    struct prog *p = m->p;
    const kc_real_nvrtc *api;
    const char *unobserved = NULL;
    int judged = 1;
    m->ran = 1;
    if (m->compile) {
        judged = compile_for_miss(m, &api, made, &unobserved);
        p->compile_rc = m->rc;
    } else if ((m->rc = kc_prog_materialize(p, &api)) == NVRTC_SUCCESS) {
        /* Compiled already (an sm_XX compile's PTX): judged on that compile's reads. */
        m->rc = p->compile_rc;
    }
    if (m->rc != NVRTC_SUCCESS && !p->real)
        return KCACHE_EIO;
    size_t log_size = 0;
    if (api->GetProgramLogSize(p->real, &log_size) == NVRTC_SUCCESS && log_size &&
        (m->log = malloc(log_size)) && api->GetProgramLog(p->real, m->log) == NVRTC_SUCCESS)
        m->log[log_size - 1] = '\0';
    made->log = m->log;
    if (m->rc != NVRTC_SUCCESS)
        return m->rc == NVRTC_ERROR_COMPILATION ? KCACHE_ECOMPILE : KCACHE_EIO;
    if (read_output(&m->out, api, p->real, m->kind) != NVRTC_SUCCESS)
        return KCACHE_EIO;
    if (!(m->lowered = calloc(p->n_exprs + 1, sizeof(*m->lowered))))
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < p->n_exprs; i++)
        if (api->GetLoweredName(p->real, p->exprs[i], &m->lowered[i]) != NVRTC_SUCCESS)
            return KCACHE_EIO;
    int major = 0, minor = 0;
    api->Version(&major, &minor);
    snprintf(m->toolchain, sizeof(m->toolchain), "nvrtc %d.%d (drop-in, %s)", major, minor,
             kc_real_path());
    made->data = m->out.data;
    made->size = m->out.size;
    made->n_names = p->n_exprs;
    made->name_exprs = (const char *const *)p->exprs;
    made->lowered_names = m->lowered;
    made->toolchain = m->toolchain;
    if (judged)
        judge(m, made, unobserved);
    return 0;
}

static void miss_free(struct miss *m)
{
    free(m->out.data);
    free(m->log);
    free(m->lowered);
}

/*
 * p's compile of one output kind through kcache: a hit is *out; a miss runs
 * compile_miss. What makes the key is the public compile API's: the source,
 * the in-memory headers, every header read from disk by content, the
 * options, the name expressions, NVIDIA's library by its build-id; and, in
 * extra_digest, what kcache would otherwise canonicalise away but NVRTC puts
 * in the bytes or the log (the options verbatim, -I paths included, the
 * header names) and the real library's path.
 */
static int through_cache(kcache_result **out, kcache_compiler *c, struct prog *p,
                         struct miss *m)
{
    char *extra = NULL;
    size_t extra_size = 0;
    *out = NULL;
    /* The closure's relative paths mean this directory (observe.c compares against it). */
    m->dir_epoch = kc_observe_dir_epoch();
    if (!getcwd(m->cwd, sizeof(m->cwd)))
        m->cwd[0] = '\0';
    if (extra_material(&extra, &extra_size, p))
        return KCACHE_ENOMEM;
    kcache_request req = KCACHE_REQUEST_INIT;
    req.source = p->src;
    req.source_name = p->name && *p->name ? p->name : "default_program";
    /* NVRTC searches the directory of the program's name for "quoted" includes. */
    req.source_path = req.source_name;
    req.output = m->kind;
    req.n_options = (size_t)p->n_opts;
    req.options = (const char *const *)p->opts;
    req.n_name_exprs = p->n_exprs;
    req.name_exprs = (const char *const *)p->exprs;
    req.extra_digest = extra;
    req.extra_digest_size = extra_size;
    req.n_headers = (size_t)p->n_headers;
    req.header_names = (const char *const *)p->include_names;
    req.header_contents = (const char *const *)p->headers;
    req.compile = compile_miss;
    req.compile_userdata = m;
    /* Kept so that `kcache verify --recompile` can rebuild the entry with this NVRTC. */
    req.flags = KCACHE_COMPILE_KEEP_INPUTS | KCACHE_COMPILE_NVRTC_NAMES |
                (m->beside ? KCACHE_COMPILE_UNCOUNTED : 0) |
                (m->kind == KCACHE_KIND_CUBIN ? KCACHE_COMPILE_KEEP_RESOLUTION : 0) |
                /* Resolved beside NVIDIA's compile where there are cores for both. */
                (m->compile && !m->beside ? KCACHE_COMPILE_OVERLAP : 0);
    req.resolution_of = m->like;
    kc_shim_enter();
    int rc = kcache_compiler_compile(out, c, &req);
    kc_shim_leave();
    free(extra);
    return rc;
}

/* Compiles p with NVIDIA's library, uncached. */
static nvrtcResult compile_real(struct prog *p)
{
    const kc_real_nvrtc *api;
    p->compiled = 0; /* the compile is this one, below */
    nvrtcResult rc = kc_prog_materialize(p, &api);
    p->compiled = 1;
    if (rc != NVRTC_SUCCESS)
        return rc;
    return p->compile_rc = api->CompileProgram(p->real, p->n_opts, (const char *const *)p->opts);
}

/*
 * After a miss kcache overlapped with NVIDIA's compile: an entry it found
 * meanwhile is served (m no longer counts as run), and NVIDIA's program,
 * finished or cancelled, goes; one cancelled for an entry that does not fit
 * the program is compiled again by NVIDIA, whose answer it then gets.
 */
static void settle_overlap(struct prog *p, struct miss *m, int served)
{
    if (!m->ran || (!served && m->rc != NVRTC_ERROR_CANCELLED))
        return;
    const kc_real_nvrtc *api = kc_real();
    if (api && p->real)
        api->DestroyProgram(&p->real);
    p->real = NULL;
    p->passthrough = 0;
    if (served)
        m->ran = 0;
    else
        m->rc = compile_real(p);
}

/*
 * nvrtcVersion on a hit, without loading NVIDIA's library (PyTorch asks it
 * around each compile, and pip's libnvrtc.so.13 has no version in its name).
 * Sound because of what a hit is: its key holds the build-id of the very
 * file this process would load (kc_real_path(), read without loading it)
 * and that path itself, and the entry's toolchain, "nvrtc X.Y (drop-in,
 * PATH)", is what a library of that build answered when it made the entry.
 * One build answers one version. An entry whose toolchain names another
 * path, or is in another form (not the drop-in's), answers nothing: NVRTC
 * is asked. The toolchain text is not part of the key: an entry from a
 * bundle carries what its maker wrote, as it carries its artifact.
 */
static kcache_key last_hit;
static int have_hit;

static void note_hit(const kcache_key *key)
{
    pthread_mutex_lock(&state_lock);
    last_hit = *key;
    have_hit = 1;
    pthread_mutex_unlock(&state_lock);
}

int kc_shim_hit_version(int *major, int *minor)
{
    pthread_mutex_lock(&state_lock);
    kcache_key key = last_hit;
    int known = have_hit;
    kcache_compiler *c = compiler;
    pthread_mutex_unlock(&state_lock);
    const char *path = kc_real_path();
    kcache_store *s = c ? kcache_compiler_store(c) : NULL;
    kcache_entry *e = NULL;
    if (!known || !path || !s)
        return -1;
    kc_shim_enter();
    int rc = kcache_store_get(&e, s, &key, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
    kc_shim_leave();
    int ma, mi, end = 0, ok = 0;
    if (rc == 0 && e->toolchain &&
        sscanf(e->toolchain, "nvrtc %d.%d (drop-in, %n", &ma, &mi, &end) == 2 && end > 0) {
        size_t n = strlen(path);
        ok = !strncmp(e->toolchain + end, path, n) && !strcmp(e->toolchain + end + n, ")");
    }
    kcache_entry_free(e);
    if (!ok)
        return -1;
    *major = ma;
    *minor = mi;
    return 0;
}

SHIM_API nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
                                         const char *const *options)
{
    struct prog *p = (struct prog *)prog;
    /* Before any compile reaches NVIDIA's library, whichever way it goes. */
    if (numOptions > 0 && options)
        kc_nvrtc_note_options((size_t)numOptions, options);
    if (!p || p->passthrough || p->compiled || numOptions < 0 || (numOptions > 0 && !options))
        FORWARD(p, CompileProgram(p ? p->real : NULL, numOptions, options));
    kcache_kind kind = KCACHE_KIND_CUBIN;
    int why = option_reason(numOptions, options, &kind);
    int ok = 1;
    p->opts = why == R_ODD_ARGUMENTS ? NULL : copy_strv(options, (size_t)numOptions, &ok);
    p->n_opts = p->opts ? numOptions : 0;
    if (!ok)
        return NVRTC_ERROR_OUT_OF_MEMORY;
    if (why == R_ODD_ARGUMENTS) {
        count(R_ODD_ARGUMENTS);
        p->compiled = 1;
        FORWARD(p, CompileProgram(p->real, numOptions, options));
    }
    p->compiled = 1;
    if (is_disabled())
        return compile_real(p);
    if (why >= 0) {
        count((enum reason)why);
        return compile_real(p);
    }
    if (kc_nvrtc_restrict_kept() && !kc_nvrtc_opts_restrict((size_t)numOptions, options)) {
        count(R_RESTRICT_KEPT);
        return compile_real(p);
    }
    kcache_compiler *c = get_compiler();
    if (!c || !kcache_compiler_store(c)) {
        count(R_NO_STORE);
        return compile_real(p);
    }
    struct miss m = {.p = p, .kind = kind, .compile = 1};
    kcache_result *res = NULL;
    int rc = through_cache(&res, c, p, &m);
    nvrtcResult nrc;
    int keyed = res && res->keyed;
    int served = rc == 0 && res->hit && res->kind == kind && res->n_names == p->n_exprs;
    settle_overlap(p, &m, served);
    if (m.ran) {
        /* NVIDIA's program answers from now on, whatever kcache made of it. */
        nrc = m.rc;
        if (res && !keyed && !strncmp(res->store_message, "not stored: ", 12))
            count(reason_of(res->store_message + 12)); /* judge(), or kcache's own check */
        else if (keyed)
            atomic_fetch_add(&miss_count, 1);
        else
            count(R_NOT_KEYED);
    } else if (served) {
        atomic_fetch_add(&hit_count, 1);
        note_hit(&res->key);
        p->hit = res;
        res = NULL;
        p->compile_rc = nrc = NVRTC_SUCCESS;
    } else if (rc == KCACHE_ENOTFOUND && res && strstr(res->message, "require_hit")) {
        /* KCACHE_REQUIRE_HIT: a miss fails as a compile NVRTC refused would, with
         * the reason as the program's log, so that a cold start fails loudly. */
        size_t n = strlen(res->message) + sizeof("kcache: \n");
        p->refusal = malloc(n);
        if (!p->refusal) {
            nrc = NVRTC_ERROR_OUT_OF_MEMORY;
        } else {
            snprintf(p->refusal, n, "kcache: %s\n", res->message);
            count(R_REQUIRE_HIT);
            nrc = NVRTC_ERROR_COMPILATION;
        }
        p->compile_rc = nrc;
    } else {
        /* kcache could not take the request (an option it does not know, ...). */
        count(R_NOT_KEYED);
        nrc = compile_real(p);
    }
    /* An sm_XX compile also makes PTX: kept with its resolution, for kc_prog_store_ptx(). */
    if (m.ran && keyed && nrc == NVRTC_SUCCESS && kind == KCACHE_KIND_CUBIN && p->real) {
        p->miss = res;
        res = NULL;
    }
    miss_free(&m);
    kcache_result_free(res);
    /* NVIDIA's library is loaded now: what it says of itself, for processes that only hit. */
    if (m.ran)
        kc_facts_note(kc_shim_compiler(), kc_real());
    return nrc;
}

/*
 * The PTX of an sm_XX miss, stored under the key of its own kind when the
 * program asks for it, not at every miss: most programs ask for the CUBIN
 * alone (CuPy, cuda.core), and one that asks for both asks in every
 * process, so its later hits find the PTX too (kc_prog_load_hit_ptx()
 * compiles it otherwise). Keyed from the CUBIN's own resolution (the
 * PTX is the bytes of that compile, which was judged on what NVIDIA's
 * NVRTC read then), so no header is resolved again, and a header edited
 * since leaves it unstored (its closure is checked again).
 */
void kc_prog_store_ptx(struct prog *p)
{
    kcache_compiler *c = get_compiler();
    kcache_result *miss = p->miss, *res = NULL;
    p->miss = NULL;
    if (c && kcache_compiler_store(c)) {
        struct miss ptx = {.p = p, .kind = KCACHE_KIND_PTX, .beside = 1, .like = miss};
        through_cache(&res, c, p, &ptx);
        miss_free(&ptx);
        kcache_result_free(res);
    }
    kcache_result_free(miss);
}

/* The PTX entry of an sm_XX hit, looked up when the program first asks for PTX. */
void kc_prog_load_hit_ptx(struct prog *p)
{
    kcache_compiler *c = get_compiler();
    if (!c || !kcache_compiler_store(c))
        return;
    /* A miss here compiles (compile_miss), and NVIDIA's program answers from then on. */
    struct miss m = {.p = p, .kind = KCACHE_KIND_PTX, .compile = 1, .beside = 1};
    kcache_result *res = NULL;
    if (through_cache(&res, c, p, &m) == 0 && !m.ran && res->hit &&
        res->kind == KCACHE_KIND_PTX) {
        p->hit_ptx = res;
        res = NULL;
    }
    miss_free(&m);
    kcache_result_free(res);
}
