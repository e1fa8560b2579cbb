/*
 * The option walk's compiler (test_opts_walk.py): compiles one small kernel
 * once per line of CASES, the line's options separated by tabs, and writes
 * one line per case to OUT: "rc KIND SIZE HASH" (KIND cubin, ltoir or ptx;
 * HASH the FNV-1a of the bytes, PTX without its NUL), or "rc - 0 0" when the
 * compile failed.
 *
 * nvrtc_walk CASES OUT
 * nvrtc_walk --source      (writes the kernel, for `kcache compile`)
 *
 * Built linked with -lnvrtc it asks NVRTC (NVIDIA's, or the drop-in under
 * `kcache run`); built with NVRTC_WALK_LIB it asks libkcache's compile API,
 * with the options as `kcache compile -- OPTIONS` hands them, through the
 * cache in $KCACHE_DIR (walk.db).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NVRTC_WALK_LIB
#include <kcache/compile.h>
#else
#include <nvrtc.h>
#endif

static const char source[] =
    "#ifdef X\n"
    "#define SCALE X\n"
    "#else\n"
    "#define SCALE 3\n"
    "#endif\n"
    "#ifdef P\n"
    "#undef SCALE\n"
    "#define SCALE (P + 5)\n"
    "#endif\n"
    "extern \"C\" __global__ void k(float *x)\n"
    "{\n"
    "    x[threadIdx.x] = sqrtf(x[threadIdx.x]) / SCALE + __fdividef(1.0f, x[1]);\n"
    "}\n";

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void emit(FILE *out, int rc, const char *kind, const void *data, size_t size)
{
    if (!data) {
        fprintf(out, "%d - 0 0\n", rc);
        return;
    }
    if (!strcmp(kind, "ptx"))
        size = strnlen(data, size);
    fprintf(out, "%d %s %zu %016llx\n", rc, kind, size,
            (unsigned long long)fnv(data, size));
}

#ifdef NVRTC_WALK_LIB
static kcache_compiler *compiler;

static void compile(FILE *out, const char *const *opts, int n)
{
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source = source;
    r.source_name = "k.cu";
    r.options = opts;
    r.n_options = (size_t)n;
    kcache_result *res = NULL;
    kcache_compiler_compile(&res, compiler, &r);
    if (!res || res->status) {
        emit(out, res ? res->status : -1, "-", NULL, 0);
    } else {
        const char *kind = res->kind == KCACHE_KIND_CUBIN ? "cubin"
                           : res->kind == KCACHE_KIND_LTOIR ? "ltoir" : "ptx";
        emit(out, 0, kind, res->data, res->size);
    }
    kcache_result_free(res);
}
#else
static void compile(FILE *out, const char *const *opts, int n)
{
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, source, "k.cu", 0, NULL, NULL) != NVRTC_SUCCESS) {
        emit(out, -1, "-", NULL, 0);
        return;
    }
    nvrtcResult rc = nvrtcCompileProgram(p, n, opts);
    size_t size = 0;
    const char *kind = "-";
    char *data = NULL;
    if (rc == NVRTC_SUCCESS) {
        /* The kind a program asks for first: a CUBIN, if NVRTC made one. */
        if (nvrtcGetCUBINSize(p, &size) == NVRTC_SUCCESS && size) {
            kind = "cubin";
            if ((data = malloc(size)) && nvrtcGetCUBIN(p, data) != NVRTC_SUCCESS)
                kind = "cubin-unreadable";
        } else if (nvrtcGetLTOIRSize(p, &size) == NVRTC_SUCCESS && size) {
            kind = "ltoir";
            if ((data = malloc(size)) && nvrtcGetLTOIR(p, data) != NVRTC_SUCCESS)
                kind = "ltoir-unreadable";
        } else if (nvrtcGetPTXSize(p, &size) == NVRTC_SUCCESS && size) {
            kind = "ptx";
            if ((data = malloc(size)) && nvrtcGetPTX(p, data) != NVRTC_SUCCESS)
                kind = "ptx-unreadable";
        }
    }
    emit(out, (int)rc, kind, data, size);
    free(data);
    nvrtcDestroyProgram(&p);
}
#endif

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--source"))
        return fputs(source, stdout) >= 0 ? 0 : 2;
    if (argc != 3) {
        fprintf(stderr, "usage: nvrtc_walk CASES OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "r"), *out = fopen(argv[2], "w");
    if (!in || !out) {
        perror("nvrtc_walk");
        return 2;
    }
#ifdef NVRTC_WALK_LIB
    const char *dir = getenv("KCACHE_DIR");
    char db[4096], err[512];
    snprintf(db, sizeof(db), "%s/walk.db", dir ? dir : ".");
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.store_path = db;
    if (kcache_compiler_new(&compiler, &o, err, sizeof(err)) != 0) {
        fprintf(stderr, "nvrtc_walk: %s\n", err);
        return 2;
    }
#endif
    size_t cap = 0;
    char *line = NULL;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) >= 0) {
        if (len && line[len - 1] == '\n')
            line[--len] = '\0';
        const char **opts = malloc(((size_t)len / 2 + 2) * sizeof(char *));
        int n = 0;
        if (!opts)
            return 2;
        for (char *s = line, *tab; len && s; s = tab ? tab + 1 : NULL) {
            tab = strchr(s, '\t');
            if (tab)
                *tab = '\0';
            opts[n++] = s;
        }
        compile(out, opts, n);
        fflush(out);
        free(opts);
    }
    free(line);
    fclose(in);
#ifdef NVRTC_WALK_LIB
    kcache_compiler_free(compiler);
#endif
    return fclose(out) == 0 ? 0 : 2;
}
