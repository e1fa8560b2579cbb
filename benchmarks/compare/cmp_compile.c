/*
 * Compile level, on the corpus kernels: NVRTC called directly (dlopen, the
 * pure no-cache baseline), kcache_compiler_compile with KCACHE_COMPILE_NO_CACHE
 * (NVRTC plus header hashing), kcache's miss and hit, and the file-per-entry
 * cache keyed the way CuPy keys its cache (source, options, name expressions
 * and NVRTC version: headers are not hashed), its miss and hit.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <blake2.h>

#include <kcache/compile.h>

#include "cmp_store.h"
#include "cmp_util.h"
#include "fpe.h"

typedef int (*nvrtc_create_fn)(void **, const char *, const char *, int, const char *const *,
                               const char *const *);
typedef int (*nvrtc_compile_fn)(void *, int, const char *const *);
typedef int (*nvrtc_size_fn)(void *, size_t *);
typedef int (*nvrtc_get_fn)(void *, char *);
typedef int (*nvrtc_destroy_fn)(void **);
typedef int (*nvrtc_name_fn)(void *, const char *);
typedef int (*nvrtc_lowered_fn)(void *, const char *, const char **);
typedef int (*nvrtc_version_fn)(int *, int *);

static struct {
    nvrtc_create_fn create;
    nvrtc_compile_fn compile;
    nvrtc_size_fn cubin_size;
    nvrtc_get_fn cubin;
    nvrtc_size_fn log_size;
    nvrtc_get_fn log;
    nvrtc_destroy_fn destroy;
    nvrtc_name_fn add_name;
    nvrtc_lowered_fn lowered;
    nvrtc_version_fn version;
} nv;

static void load_nvrtc(const char *cuda)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/lib64/libnvrtc.so.13", cuda);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        cmp_fail("cannot load %s: %s", path, dlerror());
#define SYM(field, name)                                                                          \
    do {                                                                                          \
        void *p_ = dlsym(h, name);                                                                \
        if (!p_)                                                                                  \
            cmp_fail("NVRTC lacks %s", name);                                                     \
        memcpy(&nv.field, &p_, sizeof(p_));                                                       \
    } while (0)
    SYM(create, "nvrtcCreateProgram");
    SYM(compile, "nvrtcCompileProgram");
    SYM(cubin_size, "nvrtcGetCUBINSize");
    SYM(cubin, "nvrtcGetCUBIN");
    SYM(log_size, "nvrtcGetProgramLogSize");
    SYM(log, "nvrtcGetProgramLog");
    SYM(destroy, "nvrtcDestroyProgram");
    SYM(add_name, "nvrtcAddNameExpression");
    SYM(lowered, "nvrtcGetLoweredName");
    SYM(version, "nvrtcVersion");
#undef SYM
}

struct kernel {
    const char *name;
    const char *file;
    const char *opts[4];
    size_t n_opts;
    const char *names[2];
    size_t n_names;
    int heavy; /* seconds per compile: fewer runs */
};

/* One NVRTC compile of src; returns the CUBIN (malloc'd) and its size. */
static uint8_t *nvrtc_cubin(const struct kernel *k, const char *src, const char *src_name,
                            const char *const *opts, int n_opts, size_t *size)
{
    void *prog;
    if (nv.create(&prog, src, src_name, 0, NULL, NULL) != 0)
        cmp_fail("nvrtcCreateProgram failed");
    for (size_t i = 0; i < k->n_names; i++)
        nv.add_name(prog, k->names[i]);
    int rc = nv.compile(prog, n_opts, opts);
    if (rc != 0) {
        size_t ln = 0;
        nv.log_size(prog, &ln);
        char *log = cmp_xmalloc(ln + 1);
        nv.log(prog, log);
        log[ln] = 0;
        cmp_fail("NVRTC could not compile %s:\n%s", k->name, log);
    }
    for (size_t i = 0; i < k->n_names; i++) {
        const char *low;
        if (nv.lowered(prog, k->names[i], &low) != 0)
            cmp_fail("no lowered name for %s", k->names[i]);
    }
    nv.cubin_size(prog, size);
    uint8_t *out = cmp_xmalloc(*size);
    nv.cubin(prog, (char *)out);
    nv.destroy(&prog);
    return out;
}

/* The CuPy-style key: what the program text says, not what it includes. */
static void fpe_key(uint8_t key[32], const struct kernel *k, const char *src,
                    const char *const *opts, int n_opts, int major, int minor)
{
    blake2b_state st;
    blake2b_init(&st, 32);
    char ver[32];
    int vn = snprintf(ver, sizeof(ver), "nvrtc %d.%d", major, minor);
    blake2b_update(&st, (const uint8_t *)ver, (size_t)vn + 1);
    for (int i = 0; i < n_opts; i++)
        blake2b_update(&st, (const uint8_t *)opts[i], strlen(opts[i]) + 1);
    for (size_t i = 0; i < k->n_names; i++)
        blake2b_update(&st, (const uint8_t *)k->names[i], strlen(k->names[i]) + 1);
    blake2b_update(&st, (const uint8_t *)src, strlen(src));
    blake2b_final(&st, key, 32);
}

/* One kernel's run: the compilers, the buffers of times, the request. */
struct one {
    const struct cmp_compile_args *a;
    kcache_compiler *kc;
    fpe_cache *fc;
    int major, minor;   /* NVRTC's version */
    double *t1, *t2;    /* hit_runs + runs each */
    const struct kernel *k;
    const char *path;   /* the kernel's source file */
    const char *src;
    const char *opts[6];
    int n_opts;
    kcache_request rq;
};

/* No cache: NVRTC directly, and through kcache with NO_CACHE, interleaved. */
static void no_cache(struct one *x)
{
    const struct kernel *k = x->k;
    int runs = k->heavy ? (x->a->runs + 1) / 2 : x->a->runs;
    size_t cubin_n = 0;
    uint8_t *cubin = NULL;
    for (int r = 0; r < runs; r++) {
        double t0 = cmp_now();
        free(cubin);
        cubin = nvrtc_cubin(k, x->src, x->path, x->opts, x->n_opts, &cubin_n);
        x->t1[r] = cmp_now() - t0;
        kcache_result *res;
        x->rq.flags = KCACHE_COMPILE_NO_CACHE;
        t0 = cmp_now();
        if (kcache_compiler_compile(&res, x->kc, &x->rq) != 0)
            cmp_fail("kcache compile %s: %s", k->name, res ? res->message : "?");
        x->t2[r] = cmp_now() - t0;
        kcache_result_free(res);
    }
    cmp_rec("compile", "nvrtc", k->name, "median_ms",
            cmp_quantile(x->t1, (size_t)runs, 0.5) * 1e3, "ms");
    cmp_rec("compile", "kcache no-cache", k->name, "median_ms",
            cmp_quantile(x->t2, (size_t)runs, 0.5) * 1e3, "ms");
    cmp_rec("compile", "-", k->name, "cubin_bytes", (double)cubin_n, "B");
    free(cubin);
}

/* Misses: kcache (compile + store) and NVRTC + fpe put, once each. Returns kcache's key. */
static kcache_key misses(struct one *x)
{
    const struct kernel *k = x->k;
    x->rq.flags = 0;
    kcache_result *res;
    double t0 = cmp_now();
    if (kcache_compiler_compile(&res, x->kc, &x->rq) != 0 || res->hit)
        cmp_fail("kcache miss %s", k->name);
    cmp_rec("compile", "kcache", k->name, "miss_ms", (cmp_now() - t0) * 1e3, "ms");
    /* What a hit is made of: the entry's store get alone, and how many
     * headers the hit resolves and hashes besides (the results page's
     * reason when kcache's compile hit is behind a cache that hashes
     * only the source). */
    kcache_key entry_key = res->key;
    cmp_rec("compile", "kcache", k->name, "headers", (double)res->n_headers, "");
    kcache_result_free(res);
    uint8_t key[32];
    t0 = cmp_now();
    fpe_key(key, k, x->src, x->opts, x->n_opts, x->major, x->minor);
    size_t fn = 0;
    uint8_t *fb = nvrtc_cubin(k, x->src, x->path, x->opts, x->n_opts, &fn);
    if (fpe_put(x->fc, key, fb, fn) != 0)
        cmp_fail("file-per-entry put");
    cmp_rec("compile", "file-per-entry", k->name, "miss_ms", (cmp_now() - t0) * 1e3, "ms");
    free(fb);
    return entry_key;
}

/* Hits, interleaved; t3: the same entry's store get alone. */
static void hits(struct one *x, const kcache_key *entry_key)
{
    const struct kernel *k = x->k;
    const int hit_runs = x->a->hit_runs;
    double *t3 = cmp_xmalloc(sizeof(double) * (size_t)hit_runs);
    uint8_t key[32];
    kcache_result *res;
    for (int r = 0; r < hit_runs; r++) {
        kcache_entry *e = NULL;
        double t0 = cmp_now();
        if (kcache_store_get(&e, kcache_compiler_store(x->kc), entry_key, KCACHE_GET_NO_TOUCH))
            cmp_fail("expected the entry of %s in the store", k->name);
        t3[r] = cmp_now() - t0;
        kcache_entry_free(e);
        for (int w = 0; w < 2; w++) {
            if ((w ^ (r & 1)) == 0) {
                t0 = cmp_now();
                if (kcache_compiler_compile(&res, x->kc, &x->rq) != 0 || !res->hit)
                    cmp_fail("expected a kcache hit on %s", k->name);
                x->t1[r] = cmp_now() - t0;
                kcache_result_free(res);
            } else {
                void *d;
                size_t dn;
                t0 = cmp_now();
                fpe_key(key, k, x->src, x->opts, x->n_opts, x->major, x->minor);
                if (fpe_get(x->fc, key, &d, &dn) != 0)
                    cmp_fail("expected a file-per-entry hit on %s", k->name);
                x->t2[r] = cmp_now() - t0;
                free(d);
            }
        }
    }
    cmp_rec("compile", "kcache", k->name, "hit_median_us",
            cmp_quantile(x->t1, (size_t)hit_runs, 0.5) * 1e6, "us");
    cmp_rec("compile", "kcache", k->name, "hit_p99_us",
            cmp_quantile(x->t1, (size_t)hit_runs, 0.99) * 1e6, "us");
    cmp_rec("compile", "kcache", k->name, "store_get_median_us",
            cmp_quantile(t3, (size_t)hit_runs, 0.5) * 1e6, "us");
    free(t3);
    cmp_rec("compile", "file-per-entry", k->name, "hit_median_us",
            cmp_quantile(x->t2, (size_t)hit_runs, 0.5) * 1e6, "us");
    cmp_rec("compile", "file-per-entry", k->name, "hit_p99_us",
            cmp_quantile(x->t2, (size_t)hit_runs, 0.99) * 1e6, "us");
}

/* Kernel k without a cache, missed, then hit, in kcache and in the file-per-entry cache. */
static void bench_kernel(struct one *x, const struct kernel *k)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", x->a->corpus, k->file);
    uint8_t *srcb;
    size_t src_n;
    if (cmp_load_file(path, &srcb, &src_n) != 0)
        cmp_fail("cannot read %s", path);
    x->k = k;
    x->path = path;
    x->src = (const char *)srcb;
    x->n_opts = 0;
    x->opts[x->n_opts++] = "--gpu-architecture=sm_90";
    for (size_t i = 0; i < k->n_opts; i++)
        x->opts[x->n_opts++] = k->opts[i];
    x->rq = (kcache_request)KCACHE_REQUEST_INIT;
    x->rq.source_path = path;
    x->rq.arch = "sm_90";
    x->rq.options = k->opts;
    x->rq.n_options = k->n_opts;
    x->rq.name_exprs = k->names;
    x->rq.n_name_exprs = k->n_names;
    no_cache(x);
    kcache_key entry_key = misses(x);
    hits(x, &entry_key);
    free(srcb);
}

int cmp_compile_main(const struct cmp_compile_args *a)
{
    load_nvrtc(a->cuda);
    int major = 0, minor = 0;
    nv.version(&major, &minor);
    char cccl[4200], hdr_inc[4200];
    snprintf(cccl, sizeof(cccl), "-I%s/include/cccl", a->cuda);
    snprintf(hdr_inc, sizeof(hdr_inc), "-I%s/headers/include", a->corpus);
    const struct kernel kernels[] = {
        {"saxpy", "saxpy.cu", {0}, 0, {0}, 0, 0},
        {"block_sort", "block_sort.cu", {cccl, "-std=c++17"}, 2, {0}, 0, 1},
        {"tiled_gemm", "tiled_gemm.cu", {0}, 0,
         {"tiled_gemm<float, 16>", "tiled_gemm<double, 8>"}, 2, 0},
        {"headers", "headers/main.cu", {hdr_inc}, 1, {0}, 0, 0},
    };
    char db[4200], dir[4200];
    snprintf(db, sizeof(db), "%s/compile-kcache.db", a->workdir);
    snprintf(dir, sizeof(dir), "%s/compile-fpe", a->workdir);
    char cmd[9000];
    cmp_fmt(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s-wal' '%s-shm'", dir, db, db, db);
    if (system(cmd) != 0)
        cmp_fail("cannot clean %s", a->workdir);
    mkdir(a->workdir, 0700);

    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    kcache_store *store;
    char err[512];
    if (kcache_store_open(&store, &so, err, sizeof(err)) != 0)
        cmp_fail("%s", err);
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = store;
    co.toolkit_root = a->cuda;
    kcache_compiler *kc;
    if (kcache_compiler_new(&kc, &co, err, sizeof(err)) != 0)
        cmp_fail("%s", err);
    fpe_cache *fc;
    if (fpe_open(&fc, dir, 0) != 0)
        cmp_fail("cannot open %s", dir);

    struct one x = {.a = a, .kc = kc, .fc = fc, .major = major, .minor = minor};
    x.t1 = cmp_xmalloc((size_t)(a->hit_runs + a->runs) * sizeof(double));
    x.t2 = cmp_xmalloc((size_t)(a->hit_runs + a->runs) * sizeof(double));
    for (size_t ki = 0; ki < sizeof(kernels) / sizeof(kernels[0]); ki++)
        bench_kernel(&x, &kernels[ki]);
    cmp_note("compile: the file-per-entry cache is keyed as CuPy keys its cache (source text, "
             "options, name expressions, NVRTC version); it does not hash headers, so an edited "
             "header is a stale hit there, while kcache's hit resolves and hashes every header");
    cmp_rec("meta", "nvrtc", "version", "major", major, "");
    cmp_rec("meta", "nvrtc", "version", "minor", minor, "");
    free(x.t1);
    free(x.t2);
    fpe_close(fc);
    kcache_compiler_free(kc);
    kcache_store_close(store);
    cmp_fmt(cmd, sizeof(cmd), "rm -rf '%s' '%s' '%s-wal' '%s-shm'", dir, db, db, db);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_compare: could not remove %s\n", dir);
    return 0;
}
