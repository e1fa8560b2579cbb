/*
 * Calls NVRTC the way a program does, and writes every answer (return code,
 * sizes, every output byte, logs, lowered names) to a file, so that a run
 * against NVIDIA's library and runs against the drop-in can be compared
 * byte for byte (run_shim_test.py).
 *
 * OUT.fork gets what a forked child sees.
 *
 *   nvrtc_calls OUT INCLUDE_DIR               linked with -lnvrtc
 *   nvrtc_calls OUT INCLUDE_DIR LIBNVRTC_PATH  (built with NVRTC_BY_DLOPEN) dlopen by full path
 */
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct api {
    __typeof__(&nvrtcCreateProgram) CreateProgram;
    __typeof__(&nvrtcDestroyProgram) DestroyProgram;
    __typeof__(&nvrtcCompileProgram) CompileProgram;
    __typeof__(&nvrtcAddNameExpression) AddNameExpression;
    __typeof__(&nvrtcGetLoweredName) GetLoweredName;
    __typeof__(&nvrtcGetProgramLogSize) GetProgramLogSize;
    __typeof__(&nvrtcGetProgramLog) GetProgramLog;
    __typeof__(&nvrtcGetPTXSize) GetPTXSize;
    __typeof__(&nvrtcGetPTX) GetPTX;
    __typeof__(&nvrtcGetCUBINSize) GetCUBINSize;
    __typeof__(&nvrtcGetCUBIN) GetCUBIN;
    __typeof__(&nvrtcGetLTOIRSize) GetLTOIRSize;
    __typeof__(&nvrtcGetLTOIR) GetLTOIR;
    __typeof__(&nvrtcGetOptiXIRSize) GetOptiXIRSize;
    __typeof__(&nvrtcGetOptiXIR) GetOptiXIR;
    __typeof__(&nvrtcVersion) Version;
    __typeof__(&nvrtcSetFlowCallback) SetFlowCallback;
} nv;

/* One growing record per case, written in case order at the end. */
struct record {
    char *data;
    size_t size, cap;
};

static void put(struct record *r, const void *p, size_t n)
{
    if (r->size + n > r->cap) {
        r->cap = 2 * (r->size + n) + 256;
        r->data = realloc(r->data, r->cap);
        if (!r->data)
            abort();
    }
    memcpy(r->data + r->size, p, n);
    r->size += n;
}

static void putf(struct record *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct record *r, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    put(r, line, (size_t)n);
}

typedef nvrtcResult (*size_fn)(nvrtcProgram, size_t *);
typedef nvrtcResult (*data_fn)(nvrtcProgram, char *);

static void output(struct record *r, nvrtcProgram p, const char *what, size_fn sz, data_fn get)
{
    size_t n = 0;
    nvrtcResult rc = sz(p, &n);
    putf(r, "%s size rc %d size %zu\n", what, (int)rc, n);
    if (rc != NVRTC_SUCCESS)
        return;
    /* A guard past the end shows a write beyond the size given. */
    char *buf = malloc(n + 8);
    memset(buf, 0xa5, n + 8);
    rc = get(p, buf);
    putf(r, "%s rc %d\n", what, (int)rc);
    put(r, buf, n + 8);
    put(r, "\n", 1);
    free(buf);
}

struct spec {
    const char *name;
    const char *src;
    int n_headers;
    const char *headers[2], *include_names[2];
    const char *opts[5];
    const char *exprs[4];
    int flow_callback;
    int null_name;           /* created with name NULL, as CuPy does: NVRTC's "default_program" */
    struct record rec;
};

static int flow_calls;

/* Never cancels; counts that NVRTC called it (the drop-in must pass it on). */
static int flow(void *param1, void *param2)
{
    (void)param1;
    (void)param2;
    __atomic_add_fetch(&flow_calls, 1, __ATOMIC_RELAXED);
    return 0;
}

static void run_case(struct spec *s)
{
    struct record *r = &s->rec;
    nvrtcProgram p = NULL;
    int n_opts = 0;
    while (n_opts < 5 && s->opts[n_opts])
        n_opts++;
    putf(r, "== %s\n", s->name);
    nvrtcResult rc = nv.CreateProgram(&p, s->src, s->null_name ? NULL : s->name, s->n_headers,
                                      s->headers,
                                      s->include_names);
    putf(r, "create rc %d\n", (int)rc);
    if (rc != NVRTC_SUCCESS)
        return;
    for (int i = 0; s->exprs[i]; i++)
        putf(r, "add %s rc %d\n", s->exprs[i], (int)nv.AddNameExpression(p, s->exprs[i]));
    if (s->flow_callback)
        putf(r, "flow rc %d\n", (int)nv.SetFlowCallback(p, flow, NULL));
    flow_calls = 0;
    putf(r, "compile rc %d\n", (int)nv.CompileProgram(p, n_opts, s->opts));
    if (s->flow_callback)
        putf(r, "flow called %s\n", flow_calls > 0 ? "yes" : "no");
    output(r, p, "log", nv.GetProgramLogSize, nv.GetProgramLog);
    output(r, p, "cubin", nv.GetCUBINSize, nv.GetCUBIN);
    output(r, p, "ltoir", nv.GetLTOIRSize, nv.GetLTOIR);
    output(r, p, "optix", nv.GetOptiXIRSize, nv.GetOptiXIR);
    for (int i = 0; s->exprs[i]; i++) {
        const char *lowered = NULL;
        rc = nv.GetLoweredName(p, s->exprs[i], &lowered);
        putf(r, "lowered %s rc %d %s\n", s->exprs[i], (int)rc, lowered ? lowered : "(null)");
    }
    const char *lowered = NULL;
    rc = nv.GetLoweredName(p, "never_added<int>", &lowered);
    putf(r, "lowered never_added rc %d\n", (int)rc);
    /* PTX last: from an sm_XX hit it is the one output kept apart. */
    output(r, p, "ptx", nv.GetPTXSize, nv.GetPTX);
    putf(r, "destroy rc %d\n", (int)nv.DestroyProgram(&p));
}

static void *thread_main(void *arg)
{
    run_case(arg);
    return NULL;
}

#define SAXPY                                                                                      \
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n)\n"               \
    "{\n"                                                                                          \
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                                         \
    "    if (i < n)\n"                                                                             \
    "        y[i] = a * x[i] + y[i];\n"                                                            \
    "}\n"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc_calls OUT INCLUDE_DIR [LIBNVRTC]\n");
        return 2;
    }
#ifdef NVRTC_BY_DLOPEN
    if (argc < 4) {
        fprintf(stderr, "nvrtc_calls: give the NVRTC library's full path\n");
        return 2;
    }
    void *h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nvrtc_calls: %s\n", dlerror());
        return 1;
    }
#define LOAD(f) *(void **)&nv.f = dlsym(h, "nvrtc" #f)
#else
#define LOAD(f) nv.f = nvrtc##f
#endif
    LOAD(CreateProgram);
    LOAD(DestroyProgram);
    LOAD(CompileProgram);
    LOAD(AddNameExpression);
    LOAD(GetLoweredName);
    LOAD(GetProgramLogSize);
    LOAD(GetProgramLog);
    LOAD(GetPTXSize);
    LOAD(GetPTX);
    LOAD(GetCUBINSize);
    LOAD(GetCUBIN);
    LOAD(GetLTOIRSize);
    LOAD(GetLTOIR);
    LOAD(GetOptiXIRSize);
    LOAD(GetOptiXIR);
    LOAD(Version);
    LOAD(SetFlowCallback);
    char inc[4096];
    snprintf(inc, sizeof(inc), "-I%s", argv[2]);
    static const char *tmpl =
        "template <typename T, int N> __global__ void scale(T *p) { p[threadIdx.x] *= N; }\n"
        "__device__ float gain;\n";
    struct spec cases[] = {
        {.name = "saxpy.cu", .src = SAXPY, .opts = {"-arch=sm_90"}},
        {.name = "names.cu", .src = tmpl, .opts = {"--gpu-architecture=sm_90", "-std=c++17"},
         .exprs = {"scale<float, 2>", "scale<int, 3>", "&gain"}},
        {.name = "memory.cu",
         .src = "#include \"vec.h\"\n__global__ void k(float *p) { p[0] = twice(p[1]); }\n",
         .n_headers = 1,
         .headers = {"#pragma once\n__device__ float twice(float x) { return 2 * x; }\n"},
         .include_names = {"vec.h"},
         .opts = {"-arch=sm_90", inc}},
        {.name = "include_dir.cu",
         .src = "#include <shim_axpb.h>\n__global__ void k(float *p) { p[0] = axpb(p[1], p[2], "
                "p[3]); if (p[0] < 0) __trap(); }\n",
         .opts = {"-arch=sm_90", inc, "-lineinfo"}},
        {.name = "broken.cu", .src = "__global__ void k(int *p) { p[0] = undeclared; }\n",
         .opts = {"-arch=sm_90"}},
        {.name = "ptx.cu", .src = SAXPY, .opts = {"-arch=compute_90"}},
        {.name = "lto.cu", .src = SAXPY, .opts = {"-arch=sm_90", "-dlto"}},
        /* CuPy's RawModule without its disk cache: no name, name expressions. */
        {.name = "(unnamed)", .null_name = 1, .src = tmpl,
         .opts = {"-std=c++17", inc, "-arch=sm_90"}, .exprs = {"scale<float, 4>"}},
        {.name = "thread_a.cu", .src = SAXPY "__global__ void a(int *p) { p[0] = 1; }\n",
         .opts = {"-arch=sm_90"}},
        {.name = "thread_b.cu", .src = tmpl, .opts = {"-arch=sm_90"}, .exprs = {"scale<double, 4>"}},
    };
    size_t n_cases = sizeof(cases) / sizeof(*cases);
    /* What the drop-in must not cache: it forwards, and counts each by reason. */
    struct spec uncached[] = {
        {.name = "optix.cu", .src = SAXPY, .opts = {"-arch=sm_90", "-optix-ir"}},
        {.name = "no_arch.cu", .src = SAXPY, .opts = {"-std=c++17"}},
        {.name = "flow.cu", .src = SAXPY, .opts = {"-arch=sm_90"}, .flow_callback = 1},
        {.name = "computed.cu",
         .src = "#define STR(x) #x\n#define XSTR(x) STR(x)\n#include XSTR(shim_axpb.h)\n"
                "__global__ void k(float *p) { p[0] = axpb(p[1], p[2], p[3]); }\n",
         .opts = {"-arch=sm_90", inc}},
        {.name = "thread_a.cu", .src = "", .opts = {"-arch=sm_90"}},
        {.name = "thread_b.cu", .src = "", .opts = {"-arch=sm_90"}},
    };
    if (getenv("NVRTC_CALLS_UNCACHED")) {
        memcpy(cases, uncached, sizeof(uncached));
        n_cases = sizeof(uncached) / sizeof(*uncached);
    }
    /* nvrtcVersion loads NVIDIA's library unless its file is named
     * libnvrtc.so.X.Y.Z: the warm run (NVRTC_CALLS_SKIP) asks only what a hit answers. */
    if (!getenv("NVRTC_CALLS_SKIP")) {
        int major = -1, minor = -1;
        nvrtcResult vrc = nv.Version(&major, &minor);
        putf(&cases[0].rec, "version rc %d %d.%d\n", (int)vrc, major, minor);
    }
    /* A compile error is never cached: without it, a warm run never needs NVRTC. */
    const char *skip = getenv("NVRTC_CALLS_SKIP");
    for (size_t i = 0; i + 2 < n_cases; i++)
        if (!skip || strcmp(skip, cases[i].name) != 0)
            run_case(&cases[i]);
    /* Two threads compiling at once, each on its own program. */
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, thread_main, &cases[n_cases - 2 + (size_t)i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    /* After fork, the child compiles what the parent compiled first: with the
     * drop-in, on a cache of its own opening (a hit), never the parent's handle. */
    char fork_out[4096];
    snprintf(fork_out, sizeof(fork_out), "%s.fork", argv[1]);
    pid_t pid = fork();
    if (pid == 0) {
        struct spec again = {.name = "saxpy.cu", .src = SAXPY, .opts = {"-arch=sm_90"}};
        run_case(&again);
        FILE *cf = fopen(fork_out, "wb");
        int ok = cf && fwrite(again.rec.data, 1, again.rec.size, cf) == again.rec.size;
        free(again.rec.data);
        for (size_t i = 0; i < n_cases; i++)
            free(cases[i].rec.data);
        exit(cf && fclose(cf) == 0 && ok ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "nvrtc_calls: the forked child failed\n");
        return 1;
    }
    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    for (size_t i = 0; i < n_cases; i++) {
        fwrite(cases[i].rec.data, 1, cases[i].rec.size, f);
        free(cases[i].rec.data);
    }
    return fclose(f) == 0 ? 0 : 1;
}
