/*
 * One NVRTC compile, as a program would make it, for the drop-in's soundness
 * tests (test_sound.py): writes the compile's return code, log and output to
 * OUT, and the files of every libnvrtc mapped in the process at exit (which
 * NVRTC answered) to OUT.maps.
 *
 * nvrtc_one OUT SOURCE NAME [-H NAME=FILE]... [-E EXPR]... [--] [OPTION]...
 *
 * SOURCE is read from disk and handed over in memory under NAME; each -H hands
 * over FILE's text as the in-memory header NAME; each -E adds a name
 * expression, whose lowered name is written after the log. With -dlto the
 * output is LTO-IR, else with -arch=compute_XX PTX, else CUBIN. With $NVRTC_ONE_VERSION set, the program first
 * asks what PyTorch and CuPy ask before they compile (nvrtcVersion, the
 * supported architectures) and writes the answers first; set to "only", it
 * then stops. With $NVRTC_ONE_PAUSE=FILE, it then makes FILE.ready and waits
 * for FILE before it compiles (a test replaces NVRTC meanwhile). With
 * $NVRTC_ONE_PTX_TOO set, an sm_XX compile's PTX is asked for too and written
 * to OUT.ptx; set to FILE (not "1"), it first makes FILE.ready and waits for
 * FILE (a test edits a header between the compile and the PTX). Built with
 * NVRTC_ONE_DLOPEN, it dlopen()s libnvrtc.so.13 by name (found through its
 * own RUNPATH, as PyTorch does).
 */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef NVRTC_ONE_DLOPEN
#include <dlfcn.h>

#define NVRTC_ONE_FUNCS(X)                                                                         \
    X(nvrtcCreateProgram)                                                                          \
    X(nvrtcCompileProgram)                                                                         \
    X(nvrtcGetProgramLogSize)                                                                      \
    X(nvrtcGetProgramLog)                                                                          \
    X(nvrtcGetPTXSize)                                                                             \
    X(nvrtcGetPTX)                                                                                 \
    X(nvrtcGetCUBINSize)                                                                           \
    X(nvrtcGetCUBIN)                                                                               \
    X(nvrtcGetLTOIRSize)                                                                           \
    X(nvrtcGetLTOIR)                                                                               \
    X(nvrtcDestroyProgram)                                                                         \
    X(nvrtcAddNameExpression)                                                                      \
    X(nvrtcGetLoweredName)                                                                         \
    X(nvrtcVersion)                                                                                \
    X(nvrtcGetNumSupportedArchs)                                                                   \
    X(nvrtcGetSupportedArchs)
#define DECLARE(f) static __typeof__(&f) p_##f;
NVRTC_ONE_FUNCS(DECLARE)
#define LOAD(f)                                                                                    \
    do {                                                                                           \
        void *s_ = dlsym(h, #f);                                                                   \
        if (!s_)                                                                                   \
            return -1;                                                                             \
        memcpy(&p_##f, &s_, sizeof(s_));                                                           \
    } while (0);

static int load_nvrtc(void)
{
    void *h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nvrtc_one: %s\n", dlerror());
        return -1;
    }
    NVRTC_ONE_FUNCS(LOAD)
    return 0;
}
#define nvrtcCreateProgram p_nvrtcCreateProgram
#define nvrtcCompileProgram p_nvrtcCompileProgram
#define nvrtcGetProgramLogSize p_nvrtcGetProgramLogSize
#define nvrtcGetProgramLog p_nvrtcGetProgramLog
#define nvrtcGetPTXSize p_nvrtcGetPTXSize
#define nvrtcGetPTX p_nvrtcGetPTX
#define nvrtcGetCUBINSize p_nvrtcGetCUBINSize
#define nvrtcGetCUBIN p_nvrtcGetCUBIN
#define nvrtcGetLTOIRSize p_nvrtcGetLTOIRSize
#define nvrtcGetLTOIR p_nvrtcGetLTOIR
#define nvrtcDestroyProgram p_nvrtcDestroyProgram
#define nvrtcAddNameExpression p_nvrtcAddNameExpression
#define nvrtcGetLoweredName p_nvrtcGetLoweredName
#define nvrtcVersion p_nvrtcVersion
#define nvrtcGetNumSupportedArchs p_nvrtcGetNumSupportedArchs
#define nvrtcGetSupportedArchs p_nvrtcGetSupportedArchs
#else
static int load_nvrtc(void)
{
    return 0;
}
#endif

#ifdef NVRTC_ONE_MODULE
/* Built as a module a loader dlopen()s (nvrtc_loader.c), as Python loads an extension. */
#define main nvrtc_one_main
__attribute__((visibility("default"))) int nvrtc_one_main(int argc, char **argv);
#endif

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2)
            b = realloc(b, cap *= 2);
    }
    fclose(f);
    if (!b)
        exit(2);
    b[n] = '\0';
    return b;
}

/* Makes AT.ready, then waits for AT to appear: 0, or an exit status. */
static int pause_for(const char *at)
{
    char ready[4096];
    snprintf(ready, sizeof(ready), "%s.ready", at);
    FILE *r = fopen(ready, "w");
    if (!r || fclose(r) != 0)
        return 2;
    for (int waited = 0; access(at, F_OK) != 0; waited++)
        if (waited > 6000 || usleep(10000) != 0)
            return 5;
    return 0;
}

int main(int argc, char **argv)
{
    int rc_pause;
    if (argc < 4) {
        fprintf(stderr, "usage: nvrtc_one OUT SOURCE NAME [-H NAME=FILE]... [--] [OPTION]...\n");
        return 2;
    }
    const char *out = argv[1];
    char *src = slurp(argv[2]);
    const char *name = argv[3];
    const char *hnames[64], *htexts[64], *exprs[64];
    int nh = 0, ne = 0, i = 4;
    for (; i < argc && nh < 64 && ne < 64; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        }
        if (!strcmp(argv[i], "-E") && i + 1 < argc) {
            exprs[ne++] = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "-H") != 0 || i + 1 >= argc)
            break;
        char *eq = strchr(argv[++i], '=');
        if (!eq)
            return 2;
        *eq = '\0';
        hnames[nh] = argv[i];
        htexts[nh++] = slurp(eq + 1);
    }
    int ptx = 0, lto = 0;
    for (int k = i; k < argc; k++) {
        ptx |= strstr(argv[k], "compute_") != NULL;
        lto |= !strcmp(argv[k], "-dlto") || !strcmp(argv[k], "--dlto");
    }
    nvrtcProgram p;
    if (load_nvrtc() != 0)
        return 4;
    const char *ask = getenv("NVRTC_ONE_VERSION");
    char asked[1024] = "";
    if (ask && *ask) {
        int major = -1, minor = -1, n = 0, archs[128];
        nvrtcResult vrc = nvrtcVersion(&major, &minor);
        int at = snprintf(asked, sizeof(asked), "version rc %d %d.%d", (int)vrc, major, minor);
        nvrtcResult nrc = nvrtcGetNumSupportedArchs(&n);
        if (nrc != NVRTC_SUCCESS || n < 0 || n > 128)
            n = 0;
        at += snprintf(asked + at, sizeof(asked) - (size_t)at, " archs rc %d %d:", (int)nrc, n);
        nrc = nvrtcGetSupportedArchs(archs);
        for (int k = 0; k < n && nrc == NVRTC_SUCCESS && at < (int)sizeof(asked) - 8; k++)
            at += snprintf(asked + at, sizeof(asked) - (size_t)at, " %d", archs[k]);
        if (!strcmp(ask, "only")) {
            FILE *f = fopen(out, "wb");
            if (!f)
                return 2;
            fprintf(f, "%s\n", asked);
            free(src);
            for (int k = 0; k < nh; k++)
                free((void *)htexts[k]);
            return fclose(f) == 0 ? 0 : 2;
        }
    }
    const char *pause_at = getenv("NVRTC_ONE_PAUSE");
    if (pause_at && *pause_at && (rc_pause = pause_for(pause_at)) != 0)
        return rc_pause;
    if (nvrtcCreateProgram(&p, src, name, nh, htexts, hnames) != NVRTC_SUCCESS)
        return 3;
    for (int k = 0; k < ne; k++)
        nvrtcAddNameExpression(p, exprs[k]);
    nvrtcResult rc = nvrtcCompileProgram(p, argc - i, (const char *const *)(argv + i));
    FILE *f = fopen(out, "wb");
    if (!f)
        return 2;
    if (asked[0])
        fprintf(f, "%s\n", asked);
    fprintf(f, "rc %d\n", (int)rc);
    size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    char *log = malloc(n + 1);
    nvrtcGetProgramLog(p, log);
    fprintf(f, "log %s\n", log);
    for (int k = 0; k < ne && rc == NVRTC_SUCCESS; k++) {
        const char *lowered = NULL;
        fprintf(f, "lowered %d %s\n", (int)nvrtcGetLoweredName(p, exprs[k], &lowered),
                lowered ? lowered : "");
    }
    if (rc == NVRTC_SUCCESS) {
        n = 0;
        if (lto)
            nvrtcGetLTOIRSize(p, &n);
        else if (ptx)
            nvrtcGetPTXSize(p, &n);
        else
            nvrtcGetCUBINSize(p, &n);
        char *bytes = malloc(n ? n : 1);
        if (lto)
            nvrtcGetLTOIR(p, bytes);
        else if (ptx)
            nvrtcGetPTX(p, bytes);
        else
            nvrtcGetCUBIN(p, bytes);
        fwrite(bytes, 1, n, f);
        free(bytes);
    }
    fclose(f);
    /* The PTX of an sm_XX compile too, to OUT.ptx, after a pause at the variable's
     * value unless it is "1". */
    const char *ptx_too = getenv("NVRTC_ONE_PTX_TOO");
    if (ptx_too && *ptx_too && rc == NVRTC_SUCCESS && !ptx && !lto) {
        if (strcmp(ptx_too, "1") != 0 && (rc_pause = pause_for(ptx_too)) != 0)
            return rc_pause;
        char ptx_out[4096];
        snprintf(ptx_out, sizeof(ptx_out), "%s.ptx", out);
        n = 0;
        nvrtcGetPTXSize(p, &n);
        char *text = malloc(n ? n : 1);
        FILE *pf = fopen(ptx_out, "wb");
        if (!text || !pf || nvrtcGetPTX(p, text) != NVRTC_SUCCESS || fwrite(text, 1, n, pf) != n)
            return 2;
        fclose(pf);
        free(text);
    }
    nvrtcDestroyProgram(&p);
    /* Which NVRTC files the process mapped: the one that compiled is among them. */
    char maps_out[4096];
    snprintf(maps_out, sizeof(maps_out), "%s.maps", out);
    FILE *m = fopen("/proc/self/maps", "r"), *o = fopen(maps_out, "w");
    char line[8192];
    while (m && o && fgets(line, sizeof(line), m)) {
        char *path = strchr(line, '/');
        if (path && strstr(path, "libnvrtc.so"))
            fputs(path, o);
    }
    if (m)
        fclose(m);
    if (o)
        fclose(o);
    free(log);
    free(src);
    for (int k = 0; k < nh; k++)
        free((void *)htexts[k]);
    return 0;
}
