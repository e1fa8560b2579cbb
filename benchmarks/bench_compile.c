/*
 * What a hit saves: a compile of corpus/block_sort.cu through the cache,
 * cold against hit, in process and as a whole `kcache compile` process; and
 * what resolving headers costs as a share of a hit (corpus/headers/main.cu).
 *
 * usage: bench_compile --kcache PATH --corpus DIR [--runs N] [--json FILE]
 *
 * Every figure is a median of runs in this process, and each ratio is taken
 * between figures of the same run. The process floor (`kcache --version`,
 * which loads the same libraries and opens nothing) is measured alongside so
 * that the share of a whole-process hit that is process start is visible.
 */
#include <errno.h>
#include <fcntl.h>
#include <kcache/compile.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compare/cmp_util.h"
#include "resolve/deps.h"

extern char **environ;

static void die(const char *what)
{
    fprintf(stderr, "bench_compile: %s\n", what);
    exit(1);
}

/* Runs argv with stdout and stderr to /dev/null; returns the wall time. */
static double run_process(char *const argv[], const char *cache_dir)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    setenv("KCACHE_DIR", cache_dir, 1);
    pid_t pid;
    double t0 = cmp_now();
    if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0)
        die("cannot start a process");
    int status;
    waitpid(pid, &status, 0);
    double t = cmp_now() - t0;
    posix_spawn_file_actions_destroy(&fa);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("a kcache process failed");
    return t;
}

struct row {
    const char *what;
    double value;
    const char *unit;
};
static struct row rows[32];
static size_t n_rows;

static void add(const char *what, double value, const char *unit)
{
    rows[n_rows++] = (struct row){what, value, unit};
}

/* A request for path on sm_90 with these NVRTC options. */
static kcache_request request(const char *path, const char **opts, size_t n_opts)
{
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = path;
    q.arch = "sm_90";
    q.options = opts;
    q.n_options = n_opts;
    return q;
}

/* In process: block_sort cold (NVRTC) against hit. */
static void in_process(kcache_compiler *c, const char *block_sort, int runs)
{
    const char *bs_opts[] = {"-I/usr/local/cuda/include/cccl", "-std=c++17"};
    kcache_request bs = request(block_sort, bs_opts, 2);
    double cold[3];
    for (int i = 0; i < 3; i++) {
        kcache_result *r;
        bs.flags = KCACHE_COMPILE_REFRESH;
        if (kcache_compiler_compile(&r, c, &bs) != 0)
            die(r ? r->message : "compile failed");
        cold[i] = (double)r->elapsed_ns * 1e-9;
        kcache_result_free(r);
    }
    bs.flags = 0;
    double *hit = malloc(sizeof(double) * (size_t)runs * 10);
    for (int i = 0; i < runs * 10; i++) {
        kcache_result *r;
        double t0 = cmp_now();
        if (kcache_compiler_compile(&r, c, &bs) != 0 || !r->hit)
            die("expected a hit");
        hit[i] = cmp_now() - t0;
        kcache_result_free(r);
    }
    double cold_s = cmp_quantile(cold, 3, 0.5);
    double hit_s = cmp_quantile(hit, (size_t)runs * 10, 0.5);
    add("block_sort.cu cold compile, in process (median of 3)", cold_s * 1e3, "ms");
    add("block_sort.cu hit, in process", hit_s * 1e6, "us");
    add("  cold / hit", cold_s / hit_s, "x (goal >= 1000)");
    free(hit);
}

/* Whole processes: kcache compile ... against kcache --version. */
static void whole_processes(const char *kcache, char *block_sort, const char *dir, int runs)
{
    char *cli_hit[] = {(char *)kcache, "compile", block_sort, "--arch", "sm_90",
                       "-I", "/usr/local/cuda/include/cccl", "--std", "c++17", "-q", NULL};
    char *cli_cold[] = {(char *)kcache, "compile", block_sort, "--arch", "sm_90",
                        "-I", "/usr/local/cuda/include/cccl", "--std", "c++17", "-q",
                        "--refresh", NULL};
    char *cli_floor[] = {(char *)kcache, "--version", NULL};
    double *proc = malloc(sizeof(double) * (size_t)runs);
    double *flr = malloc(sizeof(double) * (size_t)runs);
    run_process(cli_hit, dir); /* the first may still see the file cold */
    for (int i = 0; i < runs; i++) {
        flr[i] = run_process(cli_floor, dir);
        proc[i] = run_process(cli_hit, dir);
    }
    double pcold[3];
    for (int i = 0; i < 3; i++)
        pcold[i] = run_process(cli_cold, dir);
    double proc_s = cmp_quantile(proc, (size_t)runs, 0.5);
    double floor_s = cmp_quantile(flr, (size_t)runs, 0.5);
    double pcold_s = cmp_quantile(pcold, 3, 0.5);
    add("kcache compile block_sort.cu, cold process (median of 3)", pcold_s * 1e3, "ms");
    add("kcache compile block_sort.cu, hit process", proc_s * 1e3, "ms (goal <= 10)");
    add("kcache --version process (process floor)", floor_s * 1e3, "ms");
    add("  cold / hit, whole processes", pcold_s / proc_s, "x");
    free(proc);
    free(flr);
}

/* Header resolution on headers/main.cu as a share of a hit. */
static void resolution_share(kcache_compiler *c, const char *corpus, const char *include,
                             const char *main_cu, int runs)
{
    const char *h_opts[] = {include};
    kcache_request hq = request(main_cu, h_opts, 1);
    char err[512];
    kcache_result *r;
    if (kcache_compiler_compile(&r, c, &hq) != 0)
        die(r ? r->message : "compile failed");
    kcache_result_free(r);
    char *src = NULL;
    size_t src_n = 0;
    FILE *f = fopen(main_cu, "rb");
    if (!f)
        die("cannot read headers/main.cu");
    src = malloc(1 << 16);
    src_n = fread(src, 1, (1 << 16) - 1, f);
    fclose(f);
    char src_dir[1100];
    snprintf(src_dir, sizeof(src_dir), "%s/headers", corpus);
    const char *inc_dirs[] = {include + 2};
    kc_deps_request dq = {.source = src, .source_size = src_n, .source_dir = src_dir,
                          .include_dirs = inc_dirs, .n_include_dirs = 1};
    size_t n = (size_t)runs * 20;
    double *res_t = malloc(sizeof(double) * n), *hit_t = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) {
        kc_deps deps;
        double t0 = cmp_now();
        if (kc_deps_resolve(&deps, &dq, err, sizeof(err)) != 0)
            die(err);
        res_t[i] = cmp_now() - t0;
        kc_deps_free(&deps);
        t0 = cmp_now();
        if (kcache_compiler_compile(&r, c, &hq) != 0 || !r->hit)
            die("expected a hit");
        hit_t[i] = cmp_now() - t0;
        kcache_result_free(r);
    }
    double res_s = cmp_quantile(res_t, n, 0.5), hq_s = cmp_quantile(hit_t, n, 0.5);
    add("headers/main.cu hit, in process", hq_s * 1e6, "us");
    add("  of which header resolution", res_s * 1e6, "us");
    add("  resolution share of the hit", 100.0 * res_s / hq_s, "%");
    free(res_t);
    free(hit_t);
    free(src);
}

/* The figures on stdout, and into json when given. */
static void print_rows(const char *json, int runs)
{
    printf("%-58s %12s  %s\n", "figure", "median", "unit");
    for (size_t i = 0; i < n_rows; i++)
        printf("%-58s %12.3f  %s\n", rows[i].what, rows[i].value, rows[i].unit);
    if (json) {
        FILE *j = fopen(json, "w");
        if (!j)
            die("cannot write the JSON file");
        fprintf(j, "{\"runs\": %d, \"rows\": [\n", runs);
        for (size_t i = 0; i < n_rows; i++)
            fprintf(j, "  {\"figure\": \"%s\", \"value\": %.6g, \"unit\": \"%s\"}%s\n",
                    rows[i].what, rows[i].value, rows[i].unit, i + 1 < n_rows ? "," : "");
        fprintf(j, "]}\n");
        fclose(j);
    }
}

int main(int argc, char **argv)
{
    const char *kcache = NULL, *corpus = NULL, *json = NULL;
    int runs = 31;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kcache") && i + 1 < argc)
            kcache = argv[++i];
        else if (!strcmp(argv[i], "--corpus") && i + 1 < argc)
            corpus = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else
            die("usage: bench_compile --kcache PATH --corpus DIR [--runs N] [--json FILE]");
    }
    if (!kcache || !corpus || runs < 3)
        die("usage: bench_compile --kcache PATH --corpus DIR [--runs N] [--json FILE]");

    char dir[] = "/tmp/kcache-bench-compile-XXXXXX";
    if (!mkdtemp(dir))
        die("cannot make a temporary directory");
    char db[256], block_sort[1024], main_cu[1024], include[1100];
    snprintf(db, sizeof(db), "%s/kcache.db", dir);
    snprintf(block_sort, sizeof(block_sort), "%s/block_sort.cu", corpus);
    snprintf(main_cu, sizeof(main_cu), "%s/headers/main.cu", corpus);
    snprintf(include, sizeof(include), "-I%s/headers/include", corpus);

    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    kcache_store *store;
    char err[512];
    if (kcache_store_open(&store, &so, err, sizeof(err)) != 0)
        die(err);
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = store;
    kcache_compiler *c;
    if (kcache_compiler_new(&c, &co, err, sizeof(err)) != 0)
        die(err);

    in_process(c, block_sort, runs);
    whole_processes(kcache, block_sort, dir, runs);
    resolution_share(c, corpus, include, main_cu, runs);
    print_rows(json, runs);
    kcache_compiler_free(c);
    kcache_store_close(store);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_compile: could not remove %s\n", dir);
    return 0;
}
