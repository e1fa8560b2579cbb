/*
 * One process of the GPU hot-start benchmark (hotstart.py runs it many times,
 * each in a fresh process), or the in-process memo figures.
 *
 *   bench_gpu_start launch --corpus DIR [--cuda DIR] [--cubin FILE --symbol NAME]
 *       From main() to the first completed launch (cuCtxSynchronize returned)
 *       of block_sort.cu's sort_then_scan<128, 4>, through kcache (the cache
 *       is $KCACHE_DIR), or with --cubin straight from a CUBIN file (the floor:
 *       no cache, no compiler, the driver alone). Prints one JSON line with
 *       CLOCK_MONOTONIC timestamps: hotstart.py subtracts its own timestamp,
 *       taken just before it started this process.
 *
 *   bench_gpu_start memo --corpus DIR [--cuda DIR] [--iters N] [--write-cubin FILE]
 *       The cost of a memoised kcache_gpu_function call (a key derivation and
 *       a lookup), of kcache_gpu_function_by_key (a lookup), of a cache hit
 *       without the memo (kcache_compiler_compile), and of a module load (what the memo
 *       saves): medians over N calls. One JSON line.
 *
 * The launched result is checked after the clock stops: a benchmark of a
 * launch that computes nonsense is worth nothing.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cudaTypedefs.h>

#include <kcache/compile.h>
#include <kcache/gpu.h>
#include <kcache/store.h>

#define EXPR "sort_then_scan<128, 4>"
#define BLOCK 128
#define ITEMS 4
#define BLOCKS 64

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct {
    PFN_cuMemAlloc_v3020 mem_alloc;
    PFN_cuMemcpyHtoD_v3020 memcpy_htod;
    PFN_cuMemcpyDtoH_v3020 memcpy_dtoh;
    PFN_cuLaunchKernel_v4000 launch;
    PFN_cuCtxSynchronize_v2000 synchronize;
    PFN_cuModuleLoadData_v2000 module_load_data;
    PFN_cuModuleUnload_v2000 module_unload;
    PFN_cuModuleGetFunction_v2000 module_get_function;
} cu;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_gpu_start: %s: %s\n", what, why);
    exit(1);
}

#define CU(expr)                                                                                   \
    do {                                                                                           \
        CUresult cr_ = (expr);                                                                     \
        if (cr_ != CUDA_SUCCESS) {                                                                 \
            char n_[32];                                                                           \
            snprintf(n_, sizeof(n_), "CUresult %d", (int)cr_);                                     \
            die(#expr, n_);                                                                        \
        }                                                                                          \
    } while (0)

static void sym(kcache_gpu *gpu, void *dst, const char *name)
{
    void *p = NULL;
    if (kcache_gpu_driver_symbol(&p, gpu, name))
        die(name, kcache_gpu_errmsg(gpu));
    memcpy(dst, &p, sizeof(p));
}

static void load_api(kcache_gpu *gpu)
{
    sym(gpu, &cu.mem_alloc, "cuMemAlloc");
    sym(gpu, &cu.memcpy_htod, "cuMemcpyHtoD");
    sym(gpu, &cu.memcpy_dtoh, "cuMemcpyDtoH");
    sym(gpu, &cu.launch, "cuLaunchKernel");
    sym(gpu, &cu.synchronize, "cuCtxSynchronize");
    sym(gpu, &cu.module_load_data, "cuModuleLoadData");
    sym(gpu, &cu.module_unload, "cuModuleUnload");
    sym(gpu, &cu.module_get_function, "cuModuleGetFunction");
}

static int in_keys[BLOCKS * BLOCK * ITEMS];

/* Allocates, copies the keys in, launches, waits. */
static CUdeviceptr launch_sort(CUfunction fn)
{
    CUdeviceptr din = 0, dout = 0;
    CU(cu.mem_alloc(&din, sizeof(in_keys)));
    CU(cu.mem_alloc(&dout, sizeof(in_keys)));
    CU(cu.memcpy_htod(din, in_keys, sizeof(in_keys)));
    void *params[] = {&din, &dout};
    CU(cu.launch(fn, BLOCKS, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
    CU(cu.synchronize());
    return dout;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int check_sort(CUdeviceptr dout)
{
    static int got[BLOCKS * BLOCK * ITEMS], want[BLOCKS * BLOCK * ITEMS];
    CU(cu.memcpy_dtoh(got, dout, sizeof(got)));
    memcpy(want, in_keys, sizeof(want));
    for (int b = 0; b < BLOCKS; b++) {
        int *t = want + b * BLOCK * ITEMS, sum = 0;
        qsort(t, BLOCK * ITEMS, sizeof(int), cmp_int);
        for (int i = 0; i < BLOCK * ITEMS; i++) {
            int v = t[i];
            t[i] = sum;
            sum += v;
        }
    }
    return memcmp(got, want, sizeof(got)) == 0;
}

struct args {
    const char *mode, *corpus, *cuda, *cubin, *symbol, *write_cubin;
    int iters;
};

static char source_path[1024], cccl[1100];

static kcache_request sort_request(const char *const *opts, const char *const *exprs,
                                   const char *arch)
{
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = source_path;
    q.arch = arch;
    q.options = opts;
    q.n_options = 2;
    q.name_exprs = exprs;
    q.n_name_exprs = 1;
    return q;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t median(uint64_t *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return v[n / 2];
}

/*
 * A compiler (without a store when no_store) and a GPU over it, with the
 * driver's entry points loaded: 0, or 77, said, where there is no GPU.
 */
static int open_gpu(kcache_compiler **c, kcache_gpu **gpu, int no_store)
{
    char err[512];
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.no_store = no_store;
    *c = NULL;
    *gpu = NULL;
    if (kcache_compiler_new(c, &co, err, sizeof(err)))
        die("kcache_compiler_new", err);
    if (kcache_gpu_new(gpu, *c, NULL, err, sizeof(err)))
        die("kcache_gpu_new", err);
    if (!kcache_gpu_available(*gpu)) {
        fprintf(stderr, "bench_gpu_start: %s\n", kcache_gpu_errmsg(*gpu));
        return 77;
    }
    load_api(*gpu);
    return 0;
}

static int run_launch(const struct args *a, uint64_t t_main)
{
    kcache_compiler *c;
    kcache_gpu *gpu;
    if (open_gpu(&c, &gpu, a->cubin != NULL))
        return 77;
    kcache_store *store = kcache_compiler_store(c);
    kcache_stats *before = NULL, *after = NULL;
    CUfunction fn = NULL;
    CUmodule mod = NULL;
    char arch[16];
    const char *opts[] = {cccl, "-std=c++17"};
    const char *exprs[] = {EXPR};
    for (int i = 0; i < BLOCKS * BLOCK * ITEMS; i++)
        in_keys[i] = (int)((i * 2654435761u) % 200001) - 100000;
    uint64_t t_fn;
    if (a->cubin) {
        /* The floor: the bytes are at hand, the driver loads them. */
        FILE *f = fopen(a->cubin, "rb");
        if (!f)
            die(a->cubin, "cannot open");
        static char image[8 << 20];
        size_t n = fread(image, 1, sizeof(image), f);
        fclose(f);
        if (n == 0 || n == sizeof(image))
            die(a->cubin, "empty or larger than 8 MiB");
        struct CUctx_st *ctx;
        if (kcache_gpu_context(&ctx, gpu))
            die("kcache_gpu_context", kcache_gpu_errmsg(gpu));
        CU(cu.module_load_data(&mod, image));
        CU(cu.module_get_function(&fn, mod, a->symbol));
        t_fn = now_ns();
    } else {
        if (store && kcache_store_stats(&before, store))
            die("stats", kcache_store_errmsg(store));
        if (kcache_gpu_arch(arch, sizeof(arch), gpu, 0, 0))
            die("kcache_gpu_arch", kcache_gpu_errmsg(gpu));
        kcache_request q = sort_request(opts, exprs, arch);
        if (kcache_gpu_function(&fn, gpu, &q, EXPR))
            die("kcache_gpu_function", kcache_gpu_errmsg(gpu));
        t_fn = now_ns();
    }
    CUdeviceptr dout = launch_sort(fn);
    uint64_t t_done = now_ns();
    if (store && kcache_store_stats(&after, store))
        die("stats", kcache_store_errmsg(store));
    int ok = check_sort(dout);
    long misses = before && after ? (long)(after->misses - before->misses) : -1;
    long hits = before && after ? (long)(after->hits - before->hits) : -1;
    printf("{\"mode\": \"%s\", \"main_ns\": %" PRIu64 ", \"function_ns\": %" PRIu64
           ", \"done_ns\": %" PRIu64 ", \"hits\": %ld, \"misses\": %ld, \"correct\": %s}\n",
           a->cubin ? "floor" : "kcache", t_main, t_fn, t_done, hits, misses,
           ok ? "true" : "false");
    kcache_stats_free(before);
    kcache_stats_free(after);
    if (mod)
        cu.module_unload(mod);
    kcache_gpu_free(gpu);
    kcache_compiler_free(c);
    return ok ? 0 : 1;
}

static int run_memo(const struct args *a)
{
    kcache_compiler *c;
    kcache_gpu *gpu;
    if (open_gpu(&c, &gpu, 0))
        return 77;
    char arch[16];
    if (kcache_gpu_arch(arch, sizeof(arch), gpu, 0, 0))
        die("kcache_gpu_arch", kcache_gpu_errmsg(gpu));
    const char *opts[] = {cccl, "-std=c++17"};
    const char *exprs[] = {EXPR};
    kcache_request q = sort_request(opts, exprs, arch);
    CUfunction first = NULL, fn = NULL;
    uint64_t t0 = now_ns();
    if (kcache_gpu_function(&first, gpu, &q, EXPR))
        die("kcache_gpu_function", kcache_gpu_errmsg(gpu));
    uint64_t first_ns = now_ns() - t0;

    kcache_result *r = NULL;
    if (kcache_compiler_compile(&r, c, &q))
        die("kcache_compiler_compile", r ? r->message : "out of memory");
    kcache_key key = r->key;
    const char *lowered = kcache_result_lowered_name(r, EXPR);
    char symbol[256];
    snprintf(symbol, sizeof(symbol), "%s", lowered ? lowered : "");
    if (a->write_cubin) {
        FILE *f = fopen(a->write_cubin, "wb");
        if (!f || fwrite(r->data, 1, r->size, f) != r->size || fclose(f))
            die(a->write_cubin, "cannot write");
    }
    int n = a->iters;
    uint64_t *memo = calloc(n, sizeof(uint64_t)), *bykey = calloc(n, sizeof(uint64_t));
    uint64_t *hit = calloc(n, sizeof(uint64_t)), *load = calloc(n, sizeof(uint64_t));
    if (!memo || !bykey || !hit || !load)
        die("calloc", "out of memory");
    for (int i = 0; i < n; i++) {
        t0 = now_ns();
        if (kcache_gpu_function(&fn, gpu, &q, EXPR) || fn != first)
            die("memoised kcache_gpu_function", kcache_gpu_errmsg(gpu));
        memo[i] = now_ns() - t0;
    }
    for (int i = 0; i < n; i++) {
        t0 = now_ns();
        if (kcache_gpu_function_by_key(&fn, gpu, &key, EXPR) || fn != first)
            die("kcache_gpu_function_by_key", kcache_gpu_errmsg(gpu));
        bykey[i] = now_ns() - t0;
    }
    /* What a call would cost without the memo: a cache hit, then a load. */
    int n_slow = n < 200 ? n : 200;
    for (int i = 0; i < n_slow; i++) {
        kcache_result *h = NULL;
        t0 = now_ns();
        if (kcache_compiler_compile(&h, c, &q) || !h->hit)
            die("kcache_compiler_compile", "not a hit");
        hit[i] = now_ns() - t0;
        CUmodule m = NULL;
        t0 = now_ns();
        CU(cu.module_load_data(&m, h->data));
        load[i] = now_ns() - t0;
        CU(cu.module_unload(m));
        kcache_result_free(h);
    }
    printf("{\"mode\": \"memo\", \"arch\": \"%s\", \"symbol\": \"%s\", \"iters\": %d, "
           "\"first_call_ns\": %" PRIu64 ", \"memo_function_ns\": %" PRIu64
           ", \"by_key_ns\": %" PRIu64 ", \"compile_hit_ns\": %" PRIu64
           ", \"module_load_ns\": %" PRIu64 ", \"artifact_bytes\": %zu}\n",
           arch, symbol, n, first_ns, median(memo, n), median(bykey, n), median(hit, n_slow),
           median(load, n_slow), r->size);
    free(memo);
    free(bykey);
    free(hit);
    free(load);
    kcache_result_free(r);
    kcache_gpu_free(gpu);
    kcache_compiler_free(c);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_gpu_start launch|memo --corpus DIR [--cuda DIR] [--iters N]\n"
                    "       [--cubin FILE --symbol NAME] [--write-cubin FILE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t t_main = now_ns();
    struct args a = {0};
    a.iters = 10000;
    if (argc < 2)
        usage();
    a.mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(argv[i], "--corpus"))
            a.corpus = v;
        else if (!strcmp(argv[i], "--cuda"))
            a.cuda = v;
        else if (!strcmp(argv[i], "--cubin"))
            a.cubin = v;
        else if (!strcmp(argv[i], "--symbol"))
            a.symbol = v;
        else if (!strcmp(argv[i], "--write-cubin"))
            a.write_cubin = v;
        else if (!strcmp(argv[i], "--iters"))
            a.iters = atoi(v);
        else
            usage();
        i++;
    }
    if (!a.corpus || a.iters < 1 || (a.cubin && !a.symbol))
        usage();
    const char *cuda = a.cuda ? a.cuda : getenv("CUDA_HOME");
    snprintf(source_path, sizeof(source_path), "%s/block_sort.cu", a.corpus);
    snprintf(cccl, sizeof(cccl), "-I%s/include/cccl", cuda && *cuda ? cuda : "/usr/local/cuda");
    if (!strcmp(a.mode, "launch"))
        return run_launch(&a, t_main);
    if (!strcmp(a.mode, "memo"))
        return run_memo(&a);
    usage();
    return 2;
}
