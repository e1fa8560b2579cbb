/*
 * nvrtcVersion and one kernel's PTX, as a program that brings its own NVRTC
 * (pip's, say) gets them, for test_pip_nvrtc.py: OUT gets the version and the
 * PTX, OUT.maps the NVRTC files mapped at exit (libnvrtc, libnvrtc-builtins).
 *
 * nvrtc_pip OUT [LIBNVRTC]
 *
 * Built with NVRTC_PIP_DLOPEN, it finds NVRTC as cuda.pathfinder does: it asks
 * whether libnvrtc.so.13 is loaded already (RTLD_NOLOAD) and uses that one if
 * so, else it dlopen()s LIBNVRTC by full path. Else it is linked with NVRTC.
 */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NVRTC_PIP_DLOPEN
#include <dlfcn.h>

static nvrtcResult (*p_version)(int *, int *);
static nvrtcResult (*p_create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
static nvrtcResult (*p_compile)(nvrtcProgram, int, const char *const *);
static nvrtcResult (*p_ptx_size)(nvrtcProgram, size_t *);
static nvrtcResult (*p_ptx)(nvrtcProgram, char *);
static nvrtcResult (*p_destroy)(nvrtcProgram *);

static int sym(void *h, const char *name, void *out)
{
    void *s = dlsym(h, name);
    memcpy(out, &s, sizeof(s));
    return s ? 0 : -1;
}

static int load_nvrtc(const char *path)
{
    void *h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_NOLOAD);
    const char *how = "already loaded";
    if (!h) {
        h = path ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
        how = "by path";
    }
    if (!h) {
        fprintf(stderr, "nvrtc_pip: %s\n", path ? dlerror() : "no LIBNVRTC to dlopen");
        return -1;
    }
    fprintf(stderr, "nvrtc_pip: NVRTC %s\n", how);
    return sym(h, "nvrtcVersion", &p_version) | sym(h, "nvrtcCreateProgram", &p_create) |
           sym(h, "nvrtcCompileProgram", &p_compile) | sym(h, "nvrtcGetPTXSize", &p_ptx_size) |
           sym(h, "nvrtcGetPTX", &p_ptx) | sym(h, "nvrtcDestroyProgram", &p_destroy);
}
#define nvrtcVersion p_version
#define nvrtcCreateProgram p_create
#define nvrtcCompileProgram p_compile
#define nvrtcGetPTXSize p_ptx_size
#define nvrtcGetPTX p_ptx
#define nvrtcDestroyProgram p_destroy
#else
static int load_nvrtc(const char *path)
{
    (void)path;
    return 0;
}
#endif

static const char kernel[] =
    "extern \"C\" __global__ void axpy(float a, const float *x, float *y)\n"
    "{\n"
    "    y[threadIdx.x] += a * x[threadIdx.x];\n"
    "}\n";

/* The NVRTC files this process maps, one a line (the kernel's real paths). */
static int write_maps(const char *out)
{
    char maps_out[4096];
    snprintf(maps_out, sizeof(maps_out), "%s.maps", out);
    FILE *m = fopen("/proc/self/maps", "r"), *o = fopen(maps_out, "w");
    char line[8192];
    while (m && o && fgets(line, sizeof(line), m)) {
        char *path = strchr(line, '/');
        if (path && strstr(path, "/libnvrtc"))
            fputs(path, o);
    }
    int ok = m && o;
    if (m)
        fclose(m);
    if (o && fclose(o) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nvrtc_pip OUT [LIBNVRTC]\n");
        return 2;
    }
    if (load_nvrtc(argc > 2 ? argv[2] : NULL) != 0)
        return 4;
    int major = -1, minor = -1;
    nvrtcResult vrc = nvrtcVersion(&major, &minor);
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, kernel, "axpy.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return 3;
    const char *const opts[] = {"-arch=compute_90"};
    nvrtcResult rc = nvrtcCompileProgram(p, 1, opts);
    size_t n = 0;
    char *ptx = NULL;
    if (rc == NVRTC_SUCCESS && nvrtcGetPTXSize(p, &n) == NVRTC_SUCCESS && (ptx = malloc(n + 1)))
        rc = nvrtcGetPTX(p, ptx);
    FILE *f = fopen(argv[1], "wb");
    if (!f)
        return 2;
    fprintf(f, "version rc %d %d.%d\ncompile rc %d\n", (int)vrc, major, minor, (int)rc);
    if (ptx && rc == NVRTC_SUCCESS)
        fwrite(ptx, 1, n, f);
    free(ptx);
    nvrtcDestroyProgram(&p);
    if (fclose(f) != 0 || write_maps(argv[1]) != 0)
        return 2;
    return rc == NVRTC_SUCCESS ? 0 : 1;
}
