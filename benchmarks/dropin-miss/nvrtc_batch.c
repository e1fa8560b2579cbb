/*
 * A program that JIT-compiles kernels with NVRTC, as CuPy does, for
 * benchmarks/dropin-miss/run: linked with -lnvrtc, so that `kcache run`
 * puts the drop-in in front of it unchanged.
 *
 *   nvrtc_batch [--passes N] SOURCE... -- OPTION...
 *
 * Each pass compiles every SOURCE (its own program, named by its path, as
 * CuPy names kern.cu) to the output the options ask for, reads the CUBIN (or
 * the PTX for compute_XX) and destroys the program. Prints one JSON object:
 * per pass, the wall time of each compile (create to destroy) in ms, and the
 * CPU time of this thread over it (NVRTC and the drop-in both work on the
 * calling thread: less moved than wall time by other work on the machine),
 * and the FNV-1a digest of every output, so that two runs can be compared.
 */
#include <nvrtc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* One compile; 0 and its output's digest, or -1 (the log on stderr). */
static int compile_one(const char *path, const char *src, int n_opts, const char *const *opts,
                       int ptx, uint64_t *digest)
{
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, src, path, 0, NULL, NULL) != NVRTC_SUCCESS)
        return -1;
    int rc = -1;
    size_t size = 0;
    char *out = NULL;
    if (nvrtcCompileProgram(prog, n_opts, opts) != NVRTC_SUCCESS) {
        size_t log_size = 0;
        nvrtcGetProgramLogSize(prog, &log_size);
        char *log = malloc(log_size + 1);
        if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
            fprintf(stderr, "nvrtc_batch: %s:\n%s\n", path, log);
        free(log);
        goto out;
    }
    if ((ptx ? nvrtcGetPTXSize(prog, &size) : nvrtcGetCUBINSize(prog, &size)) != NVRTC_SUCCESS ||
        !(out = malloc(size)) ||
        (ptx ? nvrtcGetPTX(prog, out) : nvrtcGetCUBIN(prog, out)) != NVRTC_SUCCESS)
        goto out;
    *digest = fnv1a(out, size);
    rc = 0;
out:
    free(out);
    nvrtcDestroyProgram(&prog);
    return rc;
}

int main(int argc, char **argv)
{
    int passes = 1, first = 1;
    if (argc > 2 && !strcmp(argv[1], "--passes")) {
        passes = atoi(argv[2]);
        first = 3;
    }
    int dash = first;
    while (dash < argc && strcmp(argv[dash], "--") != 0)
        dash++;
    int n_src = dash - first, n_opts = dash < argc ? argc - dash - 1 : 0;
    const char *const *opts = (const char *const *)argv + dash + 1;
    if (n_src <= 0 || passes <= 0) {
        fprintf(stderr, "usage: nvrtc_batch [--passes N] SOURCE... -- OPTION...\n");
        return 2;
    }
    int ptx = 0;
    for (int i = 0; i < n_opts; i++)
        ptx |= strstr(opts[i], "compute_") != NULL;
    char **srcs = calloc((size_t)n_src, sizeof(*srcs));
    for (int i = 0; i < n_src; i++)
        if (!(srcs[i] = slurp(argv[first + i]))) {
            fprintf(stderr, "nvrtc_batch: cannot read %s\n", argv[first + i]);
            return 1;
        }
    uint64_t *digests = calloc((size_t)n_src, sizeof(*digests));
    double *cpu = calloc((size_t)passes * (size_t)n_src, sizeof(*cpu));
    if (!digests || !cpu)
        return 1;
    printf("{\"passes\": [");
    for (int p = 0; p < passes; p++) {
        printf("%s[", p ? ", " : "");
        for (int i = 0; i < n_src; i++) {
            double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
            if (compile_one(argv[first + i], srcs[i], n_opts, opts, ptx, &digests[i]))
                return 1;
            cpu[p * n_src + i] = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
            printf("%s%.3f", i ? ", " : "", clock_ms(CLOCK_MONOTONIC) - t0);
        }
        printf("]");
    }
    printf("], \"cpu_passes\": [");
    for (int p = 0; p < passes; p++) {
        printf("%s[", p ? ", " : "");
        for (int i = 0; i < n_src; i++)
            printf("%s%.3f", i ? ", " : "", cpu[p * n_src + i]);
        printf("]");
    }
    printf("], \"digests\": [");
    for (int i = 0; i < n_src; i++)
        printf("%s\"%016llx\"", i ? ", " : "", (unsigned long long)digests[i]);
    printf("]}\n");
    for (int i = 0; i < n_src; i++)
        free(srcs[i]);
    free(srcs);
    free(digests);
    free(cpu);
    return 0;
}
