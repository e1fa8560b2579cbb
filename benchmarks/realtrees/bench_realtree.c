/*
 * One kernel of a real header tree, in one process: plain NVRTC reading the
 * disk, then kcache's miss and hits on an empty cache of its own, and whether
 * kcache's bytes are plain NVRTC's. benchmarks/realtrees/run drives it (and
 * times the whole-process hits with the kcache CLI).
 *
 *   bench_realtree --db PATH --source FILE --arch sm_90 [--reps N] [--plain-reps N]
 *                  [--resolve-reps N] [-- NVRTC-OPTIONS]
 *   bench_realtree --serve --db PATH --source FILE
 *
 * Prints one JSON object. The options should carry --frandom-seed so that
 * plain NVRTC and kcache are given the same seed. --resolve-reps N first
 * derives the key alone N times (KCACHE_COMPILE_KEY_ONLY), before anything
 * else: the first is a miss's resolution in a fresh process (every header
 * read, hashed and scanned), the median of the others a resolution with the
 * process's header memo warm. Hit times are wall-clock
 * medians and, beside them, the process's CPU time per hit (less moved by
 * other work on a shared machine).
 *
 * --serve keeps one compiler (and so the process's header memo) open while
 * realtrees/run edits the tree between requests, one per line on stdin,
 * fields separated by tabs:
 *
 *   kcache OUT ARCH OPTION...   through the compiler kept open
 *   plain OUT ARCH OPTION...    plain NVRTC reading the disk
 *
 * Each writes the artifact (CUBIN for sm_XX, PTX for compute_XX; nothing when
 * the compile fails) to OUT and answers one JSON line.
 */
#include <kcache/compile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/toolkit.h"
#include "util/common.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double median_ms(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return (n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2) / 1e6;
}

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Plain NVRTC: the source by its path (so "quoted" includes are found beside it), -I as given. */
static char *plain(const kc_nvrtc *api, const char *path, const char *text, const char *arch,
                   const char *const *opts, size_t n_opts, size_t *size, uint64_t *ns,
                   char **log)
{
    const char **argv = calloc(n_opts + 2, sizeof(char *));
    char archopt[64];
    snprintf(archopt, sizeof(archopt), "-arch=%s", arch);
    argv[0] = archopt;
    for (size_t i = 0; i < n_opts; i++)
        argv[i + 1] = opts[i];
    nvrtcProgram p;
    char *out = NULL;
    *log = NULL;
    if (api->CreateProgram(&p, text, path, 0, NULL, NULL) != NVRTC_SUCCESS) {
        free(argv);
        return NULL;
    }
    uint64_t t0 = kc_mono_ns();
    nvrtcResult rc = api->CompileProgram(p, (int)n_opts + 1, argv);
    *ns = kc_mono_ns() - t0;
    size_t ls = 0;
    if (api->GetProgramLogSize(p, &ls) == NVRTC_SUCCESS && ls > 1 && (*log = malloc(ls)))
        api->GetProgramLog(p, *log);
    if (rc == NVRTC_SUCCESS && !strncmp(arch, "compute_", 8)) {
        if (api->GetPTXSize(p, size) == NVRTC_SUCCESS && (out = malloc(*size)))
            api->GetPTX(p, out);
        /* kcache's PTX artifact is the text without NVRTC's terminating NUL. */
        if (out && *size && out[*size - 1] == '\0')
            (*size)--;
    } else if (rc == NVRTC_SUCCESS && api->GetCUBINSize(p, size) == NVRTC_SUCCESS &&
               (out = malloc(*size))) {
        api->GetCUBIN(p, out);
    }
    api->DestroyProgram(&p);
    free(argv);
    return out;
}

static void json_str(const char *k, const char *v)
{
    printf("\"%s\": \"", k);
    for (const char *p = v ? v : ""; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20)
            printf(" ");
        else
            putchar(*p);
    }
    printf("\"");
}

static int write_out(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = (!size || fwrite(data, 1, size, f) == size);
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Splits a request line at tabs, in place: fields[0..*n). */
static size_t split_tabs(char *line, char **fields, size_t max)
{
    size_t n = 0;
    line[strcspn(line, "\n")] = '\0';
    while (n < max) {
        fields[n++] = line;
        char *tab = strchr(line, '\t');
        if (!tab)
            break;
        *tab = '\0';
        line = tab + 1;
    }
    return n;
}

/* --serve: see the top of this file. */
static int serve(const kc_nvrtc *api, kcache_compiler *c, const char *source)
{
    static char line[1 << 16];
    char *f[256];
    while (fgets(line, sizeof(line), stdin)) {
        size_t n = split_tabs(line, f, 256);
        if (n < 3 || (strcmp(f[0], "kcache") != 0 && strcmp(f[0], "plain") != 0)) {
            printf("{\"error\": \"bad request\"}\n");
            fflush(stdout);
            continue;
        }
        const char *out = f[1], *arch = f[2];
        const char *const *opts = (const char *const *)f + 3;
        size_t n_opts = n - 3;
        uint64_t t0 = kc_mono_ns();
        if (!strcmp(f[0], "plain")) {
            char *text = NULL, *log = NULL, *bytes = NULL;
            size_t text_n = 0, size = 0;
            uint64_t ns = 0;
            if (!kc_read_file(source, 256u << 20, &text, &text_n))
                bytes = plain(api, source, text, arch, opts, n_opts, &size, &ns, &log);
            int wrote = write_out(out, bytes, bytes ? size : 0);
            printf("{\"ok\": %s, \"size\": %zu, \"ms\": %.3f, ", bytes && !wrote ? "true" : "false",
                   bytes ? size : 0, (double)(kc_mono_ns() - t0) / 1e6);
            json_str("log", log ? log : "");
            printf("}\n");
            free(text);
            free(log);
            free(bytes);
        } else {
            kcache_request q = KCACHE_REQUEST_INIT;
            q.source_path = source;
            q.arch = arch;
            q.options = opts;
            q.n_options = n_opts;
            kcache_result *r = NULL;
            kcache_compiler_compile(&r, c, &q);
            int ok = r && r->status == 0 && r->data;
            int wrote = write_out(out, ok ? r->data : NULL, ok ? r->size : 0);
            printf("{\"ok\": %s, \"hit\": %s, \"keyed\": %s, \"size\": %zu, \"headers\": %zu, "
                   "\"ms\": %.3f, ",
                   ok && !wrote ? "true" : "false", r && r->hit ? "true" : "false",
                   r && r->keyed ? "true" : "false", ok ? r->size : 0, r ? r->n_headers : 0,
                   (double)(kc_mono_ns() - t0) / 1e6);
            json_str("store_message", r ? r->store_message : "no result");
            printf(", ");
            json_str("message", r ? r->message : "");
            printf("}\n");
            kcache_result_free(r);
        }
        fflush(stdout);
    }
    return 0;
}

/* The command line: --db, --source and the rest, NVRTC's options after "--". */
struct args {
    const char *db, *source, *arch;
    int reps, plain_reps, resolve_reps, serving;
    const char *const *opts;
    size_t n_opts;
};

/* 0, or 2 after printing the usage. */
static int read_args(struct args *o, int argc, char **argv)
{
    *o = (struct args){.arch = "sm_90", .reps = 21, .plain_reps = 1};
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--") ) {
            i++;
            break;
        }
        if (!strcmp(argv[i], "--serve")) {
            o->serving = 1;
            continue;
        }
        if (i + 1 >= argc)
            break;
        if (!strcmp(argv[i], "--db"))
            o->db = argv[++i];
        else if (!strcmp(argv[i], "--source"))
            o->source = argv[++i];
        else if (!strcmp(argv[i], "--arch"))
            o->arch = argv[++i];
        else if (!strcmp(argv[i], "--reps"))
            o->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plain-reps"))
            o->plain_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--resolve-reps"))
            o->resolve_reps = atoi(argv[++i]);
    }
    if (!o->db || !o->source || o->reps < 1 || o->plain_reps < 0 || o->resolve_reps < 0) {
        fprintf(stderr, "usage: bench_realtree --db PATH --source FILE [--arch A] [--reps N] "
                        "[--plain-reps N] [-- OPTIONS]\n"
                        "       bench_realtree --serve --db PATH --source FILE\n");
        return 2;
    }
    o->opts = (const char *const *)argv + i;
    o->n_opts = (size_t)(argc - i);
    return 0;
}

/* reps resolutions of q (key only) into ns[]; the headers the first one found. */
static size_t time_resolve(kcache_compiler *c, const kcache_request *q, int reps, uint64_t *ns)
{
    size_t headers = 0;
    for (int k = 0; k < reps; k++) {
        kcache_request kq = *q;
        kq.flags |= KCACHE_COMPILE_KEY_ONLY;
        kcache_result *kr = NULL;
        uint64_t t0 = kc_mono_ns();
        kcache_compiler_compile(&kr, c, &kq);
        ns[k] = kc_mono_ns() - t0;
        if (k == 0)
            headers = kr ? kr->n_headers : 0;
        kcache_result_free(kr);
    }
    return headers;
}

/* reps hits of q, each timed (wall and CPU) and checked against the miss's bytes. */
static void time_hits(kcache_compiler *c, const kcache_request *q, const kcache_result *miss,
                      int reps, uint64_t *hit_ns, uint64_t *hit_cpu, int *all_hits,
                      int *hits_equal)
{
    for (int k = 0; k < reps; k++) {
        kcache_result *h = NULL;
        uint64_t t0 = kc_mono_ns(), c0 = cpu_ns();
        kcache_compiler_compile(&h, c, q);
        hit_ns[k] = kc_mono_ns() - t0;
        hit_cpu[k] = cpu_ns() - c0;
        *all_hits &= h && h->hit;
        *hits_equal &= h && miss && h->size == miss->size && miss->data &&
                       memcmp(h->data, miss->data, h->size) == 0;
        kcache_result_free(h);
    }
}

/* The store at db and a compiler over it: 0, or 1 after saying why. */
static int open_compiler(kcache_store **s, kcache_compiler **c, const char *db)
{
    char msg[512];
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    if (kcache_store_open(s, &so, msg, sizeof(msg))) {
        fprintf(stderr, "bench_realtree: %s\n", msg);
        return 1;
    }
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = *s;
    if (kcache_compiler_new(c, &co, msg, sizeof(msg))) {
        fprintf(stderr, "bench_realtree: %s\n", msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct args o;
    if (read_args(&o, argc, argv))
        return 2;
    const char *db = o.db, *source = o.source, *arch = o.arch;
    const char *const *opts = o.opts;
    size_t n_opts = o.n_opts;
    int reps = o.reps, plain_reps = o.plain_reps, resolve_reps = o.resolve_reps;
    int serving = o.serving;
    kc_toolkit tk;
    const kc_nvrtc *api;
    char msg[512];
    if (kc_toolkit_find(&tk, NULL, msg, sizeof(msg)) || kc_nvrtc_get(&tk, &api, msg, sizeof(msg))) {
        fprintf(stderr, "bench_realtree: %s\n", msg);
        return 1;
    }
    char *text = NULL;
    size_t text_n;
    if (kc_read_file(source, 256u << 20, &text, &text_n)) {
        fprintf(stderr, "bench_realtree: cannot read %s\n", source);
        return 1;
    }
    uint64_t plain_ns = 0, best = UINT64_MAX;
    size_t plain_n = 0;
    char *plain_out = NULL, *plain_log = NULL;
    for (int k = 0; k < (serving ? 0 : plain_reps); k++) {
        free(plain_out);
        free(plain_log);
        plain_out = plain(api, source, text, arch, opts, n_opts, &plain_n, &plain_ns, &plain_log);
        best = KC_MIN(best, plain_ns);
    }

    kcache_store *s = NULL;
    kcache_compiler *c = NULL;
    if (open_compiler(&s, &c, db))
        return 1;
    if (serving) {
        int rc = serve(api, c, source);
        kcache_compiler_free(c);
        kcache_store_close(s);
        kc_toolkit_free(&tk);
        free(text);
        free(plain_out);
        free(plain_log);
        return rc;
    }
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = source;
    q.arch = arch;
    q.options = opts;
    q.n_options = n_opts;
    uint64_t *resolve_ns = calloc((size_t)resolve_reps + 1, sizeof(uint64_t));
    size_t resolve_headers = time_resolve(c, &q, resolve_reps, resolve_ns);
    uint64_t resolve_cold = resolve_reps > 0 ? resolve_ns[0] : 0;
    kcache_result *miss = NULL;
    kcache_compiler_compile(&miss, c, &q);
    uint64_t *hit_ns = calloc((size_t)reps, sizeof(uint64_t));
    uint64_t *hit_cpu = calloc((size_t)reps, sizeof(uint64_t));
    int all_hits = 1, hits_equal = 1;
    time_hits(c, &q, miss, reps, hit_ns, hit_cpu, &all_hits, &hits_equal);
    int equal = plain_out && miss && miss->status == 0 && miss->size == plain_n &&
                memcmp(miss->data, plain_out, plain_n) == 0;
    printf("{");
    json_str("source", source);
    printf(", \"plain_ok\": %s, \"plain_ms\": %.3f", plain_out ? "true" : "false",
           plain_reps ? (double)best / 1e6 : 0.0);
    printf(", \"miss_ok\": %s, \"miss_ms\": %.3f, \"keyed\": %s",
           miss && miss->status == 0 ? "true" : "false",
           miss ? (double)miss->elapsed_ns / 1e6 : 0.0, miss && miss->keyed ? "true" : "false");
    printf(", \"headers\": %zu, ", miss ? miss->n_headers : 0);
    json_str("store_message", miss ? miss->store_message : "");
    printf(", ");
    json_str("message", miss ? miss->message : "");
    printf(", ");
    json_str("plain_log_head", plain_log ? plain_log : "");
    printf(", \"hit_inproc_ms\": %.4f, \"hit_inproc_cpu_ms\": %.4f", median_ms(hit_ns, (size_t)reps),
           median_ms(hit_cpu, (size_t)reps));
    if (resolve_reps > 0)
        printf(", \"resolve_cold_ms\": %.3f, \"resolve_warm_ms\": %.3f, \"resolve_headers\": %zu",
               (double)resolve_cold / 1e6,
               resolve_reps > 1 ? median_ms(resolve_ns + 1, (size_t)resolve_reps - 1) : 0.0,
               resolve_headers);
    printf(", \"all_hits\": %s, \"hits_equal_miss\": %s", all_hits ? "true" : "false",
           hits_equal ? "true" : "false");
    printf(", \"bytes_equal_plain\": %s}\n", equal ? "true" : "false");
    kcache_result_free(miss);
    kcache_compiler_free(c);
    kcache_store_close(s);
    kc_toolkit_free(&tk);
    free(hit_ns);
    free(hit_cpu);
    free(resolve_ns);
    free(text);
    free(plain_out);
    free(plain_log);
    return 0;
}
