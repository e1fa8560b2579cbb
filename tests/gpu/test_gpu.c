/*
 * The GPU side end to end, on a real GPU (exit 77 without one): every example
 * kernel compiled through kcache, loaded, launched on fresh random inputs and
 * checked against a CPU reference; then a second process (this program again,
 * with --second) served from the same cache file gets the same bytes without
 * a single miss. Also: name expressions resolved from a cache hit, the
 * LTO-linked kernel, a thread without a context, the memo (same CUfunction,
 * by key too), and the errors a user can run into.
 *
 * Inputs come from a seed printed at the start ($KCACHE_TEST_SEED replays it).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <kcache/compile.h>
#include <kcache/gpu.h>
#include <kcache/store.h>

#include "testutil.h"
#include "gputest.h"

static const char *corpus;
static char cccl_inc[600];
static char arch[16];
static gpu_api api;
static kcache_compiler *compiler;
static kcache_store *store;
static uint64_t seed;
static int second; /* this is the second process */

/* splitmix64: the same seed gives the same inputs in both processes. */
static uint64_t rng;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rndf(void) /* [-1, 1) */
{
    return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* What each kernel produced, to compare across processes. */
static struct {
    char name[64];
    uint64_t hash;
} digests[32];
static size_t n_digests;

static void digest(const char *name, const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    REQUIRE(n_digests < 32);
    snprintf(digests[n_digests].name, sizeof(digests[0].name), "%s", name);
    digests[n_digests++].hash = h;
}

static CUdeviceptr to_device(const void *p, size_t n)
{
    CUdeviceptr d = 0;
    CU_OK(&api, api.mem_alloc(&d, n));
    if (p)
        CU_OK(&api, api.memcpy_htod(d, p, n));
    return d;
}

static void *from_device(CUdeviceptr d, size_t n)
{
    void *p = malloc(n);
    REQUIRE(p);
    CU_OK(&api, api.memcpy_dtoh(p, d, n));
    return p;
}

static void launch(CUfunction fn, unsigned gx, unsigned gy, unsigned bx, unsigned by, void **params)
{
    CU_OK(&api, api.launch(fn, gx, gy, 1, bx, by, 1, 0, NULL, params, NULL));
    CU_OK(&api, api.synchronize());
}

/* Float results may differ from the CPU's by contraction into FMA: a few ulps. */
static int close_enough(double got, double want, double rel)
{
    return fabs(got - want) <= rel * (1.0 + fabs(want));
}

static const char *corpus_path(const char *name)
{
    static char bufs[4][700];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof(bufs[0]), "%s/%s", corpus, name);
    return b;
}

static kcache_request request(const char *file)
{
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = corpus_path(file);
    q.arch = arch;
    return q;
}

static CUfunction get_function(kcache_gpu *gpu, const kcache_request *q, const char *name)
{
    CUfunction fn = NULL;
    int rc = kcache_gpu_function(&fn, gpu, q, name);
    if (rc)
        fprintf(stderr, "kcache_gpu_function %s: %s\n", name, kcache_gpu_errmsg(gpu));
    REQUIRE(rc == 0 && fn);
    return fn;
}

static kcache_stats *stats_now(void)
{
    kcache_stats *s = NULL;
    REQUIRE(kcache_store_stats(&s, store) == 0);
    return s;
}

/* y = a*x + y; the memo hands back the same function the second time. */
static CUfunction saxpy_fn;
static void run_saxpy(kcache_gpu *gpu, int n, const char *tag)
{
    kcache_request q = request("saxpy.cu");
    CUfunction fn = get_function(gpu, &q, "saxpy");
    float a = 2.5f;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    REQUIRE(x && y);
    for (int i = 0; i < n; i++) {
        x[i] = rndf();
        y[i] = rndf();
    }
    CUdeviceptr dx = to_device(x, n * sizeof(float)), dy = to_device(y, n * sizeof(float));
    void *params[] = {&a, &dx, &dy, &n};
    launch(fn, (n + 255) / 256, 1, 256, 1, params);
    float *got = from_device(dy, n * sizeof(float));
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += !close_enough(got[i], (double)a * x[i] + y[i], 1e-6);
    CHECK(bad == 0);
    digest(tag, got, n * sizeof(float));
    CU_OK(&api, api.mem_free(dx));
    CU_OK(&api, api.mem_free(dy));
    free(x);
    free(y);
    free(got);
    if (!saxpy_fn)
        saxpy_fn = fn;
    CHECK(fn == saxpy_fn);
}

/*
 * Runs a kernel (const float *a, const float *b, float *out, int n) on fresh
 * random inputs and checks every output against ref on the CPU.
 */
static void check_elementwise(const char *name, CUfunction fn, int n, int block,
                              double (*ref)(double a, double b))
{
    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes);
    REQUIRE(a && b);
    for (int i = 0; i < n; i++) {
        a[i] = rndf();
        b[i] = rndf();
    }
    CUdeviceptr da = to_device(a, bytes), db = to_device(b, bytes), dout = to_device(NULL, bytes);
    void *params[] = {&da, &db, &dout, &n};
    launch(fn, (unsigned)((n + block - 1) / block), 1, (unsigned)block, 1, params);
    float *got = from_device(dout, bytes);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += !close_enough(got[i], ref(a[i], b[i]), 1e-6);
    if (bad)
        fprintf(stderr, "%s: %d of %d outputs wrong\n", name, bad, n);
    CHECK(bad == 0);
    digest(name, got, bytes);
    CU_OK(&api, api.mem_free(da));
    CU_OK(&api, api.mem_free(db));
    CU_OK(&api, api.mem_free(dout));
    free(a);
    free(b);
    free(got);
}

/* blend computes 2 * (a + 0.25 * (b - a)); apply computes x * y + 1. */
static double blend_ref(double a, double b)
{
    return 2.0 * (a + 0.25 * (b - a));
}

static double apply_ref(double x, double y)
{
    return x * y + 1.0;
}

/* headers/main.cu: a header beside the source and one through -I. */
static void run_blend(kcache_gpu *gpu)
{
    char inc[700];
    snprintf(inc, sizeof(inc), "-I%s/headers/include", corpus);
    const char *opts[] = {inc};
    kcache_request q = request("headers/main.cu");
    q.options = opts;
    q.n_options = 1;
    check_elementwise("blend", get_function(gpu, &q, "blend"), 300007, 128, blend_ref);
}

/* computed_include.cu: #include MACRO, resolved and keyed by kcache. */
static void run_scale(kcache_gpu *gpu)
{
    kcache_request q = request("computed_include.cu");
    CUfunction fn = get_function(gpu, &q, "scale");
    int n = 65537;
    size_t bytes = n * sizeof(float);
    float *v = malloc(bytes);
    REQUIRE(v);
    for (int i = 0; i < n; i++)
        v[i] = rndf();
    CUdeviceptr dv = to_device(v, bytes);
    void *params[] = {&dv, &n};
    launch(fn, (n + 255) / 256, 1, 256, 1, params);
    float *got = from_device(dv, bytes);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += got[i] != 2.0f * v[i]; /* exact: a power of two */
    CHECK(bad == 0);
    digest("scale", got, bytes);
    CU_OK(&api, api.mem_free(dv));
    free(v);
    free(got);
}

static const char *const gemm_exprs[] = {"tiled_gemm<float, 16>", "tiled_gemm<double, 8>"};

#define GEMM(T, NAME, TILE, REL)                                                                   \
    static void gemm_##T(CUfunction fn)                                                            \
    {                                                                                              \
        int n = 100; /* not a multiple of the tile: the edges are checked too */                   \
        size_t bytes = (size_t)n * n * sizeof(T);                                                  \
        T *a = malloc(bytes), *b = malloc(bytes);                                                  \
        REQUIRE(a != NULL && b != NULL);                                                           \
        for (int i = 0; i < n * n; i++) {                                                          \
            a[i] = (T)rndf();                                                                      \
            b[i] = (T)rndf();                                                                      \
        }                                                                                          \
        CUdeviceptr da = to_device(a, bytes), db = to_device(b, bytes),                            \
                    dc = to_device(NULL, bytes);                                                   \
        void *params[] = {&da, &db, &dc, &n};                                                      \
        launch(fn, (n + TILE - 1) / TILE, (n + TILE - 1) / TILE, TILE, TILE, params);              \
        T *c = from_device(dc, bytes);                                                             \
        int bad = 0;                                                                               \
        for (int i = 0; i < n; i++)                                                                \
            for (int j = 0; j < n; j++) {                                                          \
                double want = 0;                                                                   \
                for (int k = 0; k < n; k++)                                                        \
                    want += (double)a[i * n + k] * b[k * n + j];                                   \
                bad += !close_enough(c[i * n + j], want, REL);                                     \
            }                                                                                      \
        CHECK(bad == 0);                                                                           \
        digest(NAME, c, bytes);                                                                    \
        CU_OK(&api, api.mem_free(da));                                                             \
        CU_OK(&api, api.mem_free(db));                                                             \
        CU_OK(&api, api.mem_free(dc));                                                             \
        free(a);                                                                                   \
        free(b);                                                                                   \
        free(c);                                                                                   \
    }
GEMM(float, "tiled_gemm<float, 16>", 16, 1e-4)
GEMM(double, "tiled_gemm<double, 8>", 8, 1e-12)

/* Both instantiations by name expression, from a cache hit (the lowered names are stored). */
static void run_gemm(kcache_gpu *gpu)
{
    kcache_request q = request("tiled_gemm.cu");
    q.name_exprs = gemm_exprs;
    q.n_name_exprs = 2;
    kcache_result *r = NULL;
    CHECK_RC(kcache_compiler_compile(&r, compiler, &q), 0); /* now it is in the cache */
    kcache_result_free(r);
    kcache_stats *before = stats_now();
    CUfunction f = get_function(gpu, &q, gemm_exprs[0]);
    CUfunction d = get_function(gpu, &q, gemm_exprs[1]);
    kcache_stats *after = stats_now();
    CHECK(after->misses == before->misses);
    CHECK(after->hits >= before->hits + 1);
    kcache_stats_free(before);
    kcache_stats_free(after);
    CHECK(f != d);
    /* One module for both: loaded once per (key, context). */
    CUmodule mf = NULL, md = NULL;
    CU_OK(&api, api.func_get_module(&mf, f));
    CU_OK(&api, api.func_get_module(&md, d));
    CHECK(mf && mf == md);
    gemm_float(f);
    gemm_double(d);
}

static const char *const sort_exprs[] = {"sort_then_scan<128, 4>", "sort_then_scan<256, 8>",
                                         "sort_then_scan<512, 4>"};

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* block_sort.cu: CUB radix sort then exclusive scan, per block. */
static void run_sort(kcache_gpu *gpu)
{
    const char *opts[] = {cccl_inc, "-std=c++17"};
    kcache_request q = request("block_sort.cu");
    q.options = opts;
    q.n_options = 2;
    q.name_exprs = sort_exprs;
    q.n_name_exprs = 3;
    static const int shape[3][2] = {{128, 4}, {256, 8}, {512, 4}};
    for (int s = 0; s < 3; s++) {
        CUfunction fn = get_function(gpu, &q, sort_exprs[s]);
        int block = shape[s][0], items = shape[s][1], blocks = 7;
        int tile = block * items, n = blocks * tile;
        int *in = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
        REQUIRE(in && want);
        for (int i = 0; i < n; i++)
            in[i] = (int)(rnd() % 200001) - 100000;
        CUdeviceptr din = to_device(in, n * sizeof(int)), dout = to_device(NULL, n * sizeof(int));
        void *params[] = {&din, &dout};
        launch(fn, blocks, 1, block, 1, params);
        int *got = from_device(dout, n * sizeof(int));
        memcpy(want, in, n * sizeof(int));
        for (int b = 0; b < blocks; b++) {
            int *t = want + b * tile;
            qsort(t, tile, sizeof(int), cmp_int);
            int sum = 0;
            for (int i = 0; i < tile; i++) {
                int v = t[i];
                t[i] = sum;
                sum += v;
            }
        }
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += got[i] != want[i];
        if (bad)
            fprintf(stderr, "%s: %d of %d wrong\n", sort_exprs[s], bad, n);
        CHECK(bad == 0);
        digest(sort_exprs[s], got, n * sizeof(int));
        CU_OK(&api, api.mem_free(din));
        CU_OK(&api, api.mem_free(dout));
        free(in);
        free(want);
        free(got);
    }
}

/* lto/vec_ops.cu + lto/launch.cu, LTO-linked by nvJitLink: apply = x*y + 1. */
static void run_lto(kcache_gpu *gpu)
{
    kcache_request ra = request("lto/vec_ops.cu"), rb = request("lto/launch.cu");
    ra.arch = rb.arch = NULL; /* the link names the target */
    kcache_link_input in[2] = {{.request = &ra}, {.request = &rb}};
    kcache_link_request lr = KCACHE_LINK_REQUEST_INIT;
    lr.arch = arch;
    lr.lto = 1;
    lr.inputs = in;
    lr.n_inputs = 2;
    CUfunction fn = NULL;
    int rc = kcache_gpu_link_function(&fn, gpu, &lr, "apply");
    if (rc)
        fprintf(stderr, "link apply: %s\n", kcache_gpu_errmsg(gpu));
    REQUIRE(rc == 0 && fn);
    CUfunction again = NULL;
    CHECK_RC(kcache_gpu_link_function(&again, gpu, &lr, "apply"), 0);
    CHECK(again == fn);
    check_elementwise("apply", fn, 100003, 256, apply_ref);
}

static void run_all(kcache_gpu *gpu)
{
    rng = seed;
    run_saxpy(gpu, 1000003, "saxpy");
    run_blend(gpu);
    run_scale(gpu);
    run_gemm(gpu);
    run_sort(gpu);
    run_lto(gpu);
}

/* A thread that starts with no context: kcache gives it the primary one. */
struct thread_arg {
    kcache_gpu *gpu;
    CUcontext before;
    CUfunction fn;
    int ok;
};

static void *thread_main(void *p)
{
    struct thread_arg *t = p;
    CU_OK(&api, api.ctx_get_current(&t->before));
    kcache_request q = request("saxpy.cu");
    if (kcache_gpu_function(&t->fn, t->gpu, &q, "saxpy") != 0) {
        fprintf(stderr, "thread: %s\n", kcache_gpu_errmsg(t->gpu));
        return NULL;
    }
    int failures = test_failures;
    run_saxpy(t->gpu, 4099, "saxpy-thread");
    t->ok = test_failures == failures;
    return NULL;
}

static void test_thread(kcache_gpu *gpu)
{
    static char not_yet;
    struct thread_arg t = {gpu, (CUcontext)(void *)&not_yet, NULL, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, thread_main, &t) == 0);
    REQUIRE(pthread_join(th, NULL) == 0);
    CHECK(t.before == NULL); /* the premise: a fresh thread has no context */
    CHECK(t.ok);
    CHECK(t.fn == saxpy_fn); /* the same primary context: served from the memo */
}

/* Many threads, none with a context, race for the same kernels: one load, one answer. */
struct race_arg {
    kcache_gpu *gpu;
    CUfunction saxpy, gemm;
    int failures;
    char first[400]; /* what went wrong first, for the log */
};

static void *race_main(void *p)
{
    struct race_arg *t = p;
    /* Requests of this thread's own: request() and corpus_path() hand out
     * shared buffers, which another thread would overwrite. */
    char saxpy_path[700], gemm_path[700];
    snprintf(saxpy_path, sizeof(saxpy_path), "%s/saxpy.cu", corpus);
    snprintf(gemm_path, sizeof(gemm_path), "%s/tiled_gemm.cu", corpus);
    kcache_request s = KCACHE_REQUEST_INIT, g = KCACHE_REQUEST_INIT;
    s.source_path = saxpy_path;
    s.arch = arch;
    g.source_path = gemm_path;
    g.arch = arch;
    g.name_exprs = gemm_exprs;
    g.n_name_exprs = 2;
    for (int i = 0; i < 50; i++) {
        CUfunction a = NULL, b = NULL;
        int ra = kcache_gpu_function(&a, t->gpu, &s, "saxpy");
        int rb = ra ? 0 : kcache_gpu_function(&b, t->gpu, &g, gemm_exprs[1]);
        if (ra || rb || !a || !b || (t->saxpy && a != t->saxpy) || (t->gemm && b != t->gemm)) {
            if (!t->failures++)
                snprintf(t->first, sizeof(t->first),
                         "iteration %d: saxpy rc %d fn %p (was %p), gemm rc %d fn %p (was %p): %s",
                         i, ra, (void *)a, (void *)t->saxpy, rb, (void *)b, (void *)t->gemm,
                         ra || rb ? kcache_gpu_errmsg(t->gpu) : "");
        }
        t->saxpy = a;
        t->gemm = b;
    }
    return NULL;
}

static void test_race(void)
{
    /* A fresh handle: nothing memoised yet, so the threads really race for the loads. */
    kcache_gpu *gpu = NULL;
    REQUIRE(kcache_gpu_new(&gpu, compiler, NULL, NULL, 0) == 0);
    struct race_arg args[6];
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        args[i] = (struct race_arg){gpu, NULL, NULL, 0};
        REQUIRE(pthread_create(&th[i], NULL, race_main, &args[i]) == 0);
    }
    for (int i = 0; i < 6; i++) {
        REQUIRE(pthread_join(th[i], NULL) == 0);
        if (args[i].failures)
            fprintf(stderr, "race thread %d: %d failures; first: %s\n", i, args[i].failures,
                    args[i].first);
        CHECK(args[i].failures == 0);
        CHECK(args[i].saxpy == args[0].saxpy && args[i].gemm == args[0].gemm);
    }
    kcache_gpu_free(gpu);
}

/* The memo, by key, and what a user gets wrong. */
static void test_api(kcache_gpu *gpu)
{
    kcache_request q = request("saxpy.cu");
    q.flags = KCACHE_COMPILE_KEY_ONLY;
    kcache_result *r = NULL;
    CHECK_RC(kcache_compiler_compile(&r, compiler, &q), 0);
    REQUIRE(r);
    kcache_key key = r->key;
    kcache_result_free(r);
    CUfunction fn = NULL;
    CHECK_RC(kcache_gpu_function_by_key(&fn, gpu, &key, "saxpy"), 0);
    CHECK(fn == saxpy_fn);
    CUmodule mod = NULL;
    CU_OK(&api, api.func_get_module(&mod, fn));
    CHECK(mod != NULL);

    /* A second handle on the same compiler loads by key from the store. */
    kcache_gpu *other = NULL;
    REQUIRE(kcache_gpu_new(&other, compiler, NULL, NULL, 0) == 0);
    CUfunction fn2 = NULL;
    CHECK_RC(kcache_gpu_function_by_key(&fn2, other, &key, "saxpy"), 0);
    CHECK(fn2 && fn2 != fn); /* its own module */
    CUfunction fn3 = NULL;
    CHECK_RC(kcache_gpu_function_by_key(&fn3, other, &key, "saxpy"), 0);
    CHECK(fn3 == fn2);
    kcache_gpu_free(other);

    kcache_key unknown;
    memset(&unknown, 0x5a, sizeof(unknown));
    CHECK_RC(kcache_gpu_function_by_key(&fn, gpu, &unknown, "saxpy"), KCACHE_ENOTFOUND);
    CHECK(fn == NULL && strstr(kcache_gpu_errmsg(gpu), "compile it first"));

    q.flags = 0;
    CHECK_RC(kcache_gpu_function(&fn, gpu, &q, "no_such_kernel"), KCACHE_ENOTFOUND);
    CHECK(strstr(kcache_gpu_errmsg(gpu), "no_such_kernel"));
    /* A template without its name expression: told what to add. */
    kcache_request t = request("tiled_gemm.cu");
    t.name_exprs = gemm_exprs;
    t.n_name_exprs = 1;
    CHECK_RC(kcache_gpu_function(&fn, gpu, &t, "tiled_gemm<double, 8>"), KCACHE_ENOTFOUND);
    CHECK(strstr(kcache_gpu_errmsg(gpu), "name_exprs"));
    /* LTO-IR cannot be loaded. */
    const char *rdc[] = {"-rdc=true"};
    kcache_request l = request("lto/vec_ops.cu");
    l.output = KCACHE_KIND_LTOIR;
    l.options = rdc;
    l.n_options = 1;
    CHECK_RC(kcache_gpu_function(&fn, gpu, &l, "mul_add_one"), KCACHE_EINVAL);
    CHECK(strstr(kcache_gpu_errmsg(gpu), "LTO-IR"));
    /* A compile error reaches the caller with the compiler's line. */
    kcache_request b = request("broken.cu");
    CHECK_RC(kcache_gpu_function(&fn, gpu, &b, "broken"), KCACHE_ECOMPILE);
    CHECK(strstr(kcache_gpu_errmsg(gpu), "error"));
    CHECK_RC(kcache_gpu_function(&fn, gpu, NULL, "saxpy"), KCACHE_EINVAL);
    CHECK_RC(kcache_gpu_function(&fn, gpu, &q, ""), KCACHE_EINVAL);

    void *p = NULL;
    CHECK_RC(kcache_gpu_driver_symbol(&p, gpu, "cuNoSuchEntryPoint"), KCACHE_ENOTFOUND);
    CHECK_RC(kcache_gpu_driver_symbol(&p, gpu, "cuMemAlloc_v2"), 0); /* versioned: dlsym */
    CHECK(p != NULL);
    /* A fixed ABI: CUDA 13.0's cuCtxSynchronize takes a context, the default is 12.0's. */
    PFN_cuDriverGetVersion_v2020 driver_version;
    GPU_SYM(driver_version, gpu, "cuDriverGetVersion");
    int version = 0;
    CU_OK(&api, driver_version(&version));
    void *sync12 = NULL, *sync13 = NULL;
    CHECK_RC(kcache_gpu_driver_symbol(&sync12, gpu, "cuCtxSynchronize"), 0);
    CHECK_RC(kcache_gpu_driver_symbol_version(&sync13, gpu, "cuCtxSynchronize", 13000), 0);
    CHECK(memcmp(&sync12, &api.synchronize, sizeof(sync12)) == 0);
    if (version >= 13000)
        CHECK(sync12 != sync13);
    CHECK_RC(kcache_gpu_driver_symbol_version(&p, gpu, "cuCtxSynchronize", -1), KCACHE_EINVAL);

    char a2[16];
    CHECK_RC(kcache_gpu_arch(a2, sizeof(a2), gpu, 0, 1), 0);
    CHECK(strncmp(a2, arch, strlen(arch)) == 0 && a2[strlen(arch)] == 'a');
    CHECK_RC(kcache_gpu_arch(a2, sizeof(a2), gpu, 4096, 0), KCACHE_ENOTSUP);
    /* --arch native goes through the same driver. */
    kcache_request nat = request("saxpy.cu");
    nat.arch = "native";
    kcache_result *nr = NULL;
    CHECK_RC(kcache_compiler_compile(&nr, compiler, &nat), 0);
    CHECK(nr && strcmp(nr->arch, arch) == 0);
    kcache_result_free(nr);
}

static kcache_store *open_store(const char *path)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    char err[512];
    kcache_store *s = NULL;
    if (kcache_store_open(&s, &o, err, sizeof(err)))
        fprintf(stderr, "open %s: %s\n", path, err);
    REQUIRE(s);
    return s;
}

/* Runs this program again on the same cache file; compares what it computed. */
static void test_second_process(const char *db)
{
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    char seed_text[32];
    snprintf(seed_text, sizeof(seed_text), "%" PRIu64, seed);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char *const args[] = {(char *)"test_gpu", (char *)"--second", (char *)db, seed_text, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    REQUIRE(f);
    char line[256];
    size_t matched = 0;
    while (fgets(line, sizeof(line), f)) {
        char name[64];
        uint64_t h;
        if (sscanf(line, "digest %63[^=]=%" SCNx64, name, &h) != 2)
            continue;
        for (size_t i = 0; i < n_digests; i++)
            if (!strcmp(digests[i].name, name)) {
                if (digests[i].hash != h)
                    fprintf(stderr, "%s: the second process computed other bytes\n", name);
                CHECK(digests[i].hash == h);
                matched++;
            }
    }
    fclose(f);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(matched == n_digests);
}

static int second_main(const char *db)
{
    store = open_store(db);
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = store;
    char err[512];
    REQUIRE(kcache_compiler_new(&compiler, &co, err, sizeof(err)) == 0);
    kcache_gpu *gpu = NULL;
    REQUIRE(kcache_gpu_new(&gpu, compiler, NULL, err, sizeof(err)) == 0);
    gpu_api_load(&api, gpu);
    kcache_stats *before = stats_now();
    run_all(gpu);
    kcache_stats *after = stats_now();
    /* Served from the cache: not one compile in this process. */
    if (after->misses != before->misses)
        fprintf(stderr, "second process: %" PRIu64 " misses\n", after->misses - before->misses);
    CHECK(after->misses == before->misses);
    CHECK(after->hits >= before->hits + 8);
    kcache_stats_free(before);
    kcache_stats_free(after);
    for (size_t i = 0; i < n_digests; i++)
        printf("digest %s=%" PRIx64 "\n", digests[i].name, digests[i].hash);
    kcache_gpu_free(gpu);
    kcache_compiler_free(compiler);
    kcache_store_close(store);
    return test_done();
}

int main(int argc, char **argv)
{
    corpus = getenv("CORPUS");
    const char *cuda = getenv("CUDA_HOME");
    snprintf(cccl_inc, sizeof(cccl_inc), "-I%s/include/cccl",
             cuda && *cuda ? cuda : "/usr/local/cuda");
    if (!corpus || access(corpus, R_OK) != 0) {
        fprintf(stderr, "CORPUS must name the examples/ folder (tests/meson.build sets it)\n");
        return 1;
    }
    second = argc == 4 && !strcmp(argv[1], "--second");
    const char *env_seed = getenv("KCACHE_TEST_SEED");
    seed = second     ? strtoull(argv[3], NULL, 10)
           : env_seed ? strtoull(env_seed, NULL, 10)
                      : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);

    /* Without a GPU, skip: the no-driver behaviour has its own test. */
    {
        kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
        co.no_store = 1;
        kcache_compiler *c = NULL;
        kcache_gpu *g = NULL;
        char err[512];
        REQUIRE(kcache_compiler_new(&c, &co, err, sizeof(err)) == 0);
        REQUIRE(kcache_gpu_new(&g, c, NULL, err, sizeof(err)) == 0);
        int have = kcache_gpu_available(g);
        if (have)
            have = kcache_gpu_arch(arch, sizeof(arch), g, 0, 0) == 0;
        if (!have)
            fprintf(stderr, "skipped: %s\n", kcache_gpu_errmsg(g));
        kcache_gpu_free(g);
        kcache_compiler_free(c);
        if (!have)
            return TEST_SKIP;
    }
    if (second)
        return second_main(argv[2]);
    fprintf(stderr, "seed %" PRIu64 " (KCACHE_TEST_SEED replays it), device arch %s\n", seed, arch);

    const char *db = test_path("gpu.db");
    store = open_store(db);
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = store;
    char err[512];
    REQUIRE(kcache_compiler_new(&compiler, &co, err, sizeof(err)) == 0);
    kcache_gpu *gpu = NULL;
    REQUIRE(kcache_gpu_new(&gpu, compiler, NULL, err, sizeof(err)) == 0);
    gpu_api_load(&api, gpu);
    CHECK(kcache_gpu_available(gpu));

    run_all(gpu);
    run_saxpy(gpu, 1000, "saxpy-again"); /* memoised: the same CUfunction */
    test_thread(gpu);
    test_race();
    test_api(gpu);
    kcache_gpu_free(gpu);
    kcache_compiler_free(compiler);
    kcache_store_close(store); /* the second process sees every entry */
    size_t first_digests = n_digests;
    /* Only those run_all made: the second process runs only run_all. */
    n_digests = 0;
    for (size_t i = 0; i < first_digests; i++)
        if (strcmp(digests[i].name, "saxpy-again") && strcmp(digests[i].name, "saxpy-thread"))
            digests[n_digests++] = digests[i];
    test_second_process(db);
    return test_done();
}
