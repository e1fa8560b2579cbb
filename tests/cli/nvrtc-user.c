/*
 * A program that uses NVRTC as an application does: dlopen("libnvrtc.so.N")
 * by its soname, one compile of a file to an sm_XX CUBIN, the CUBIN's size,
 * and (with a third argument) nvrtcVersion. Run under 'kcache run', the
 * drop-in answers; built like the rest of the tests (sanitizers included),
 * so that the drop-in's runtime finds its own first.
 *
 *   nvrtc-user FILE.cu ARCH [version]
 *
 * Prints "rc SIZE" (and "version MAJOR.MINOR"; after a failed compile, the
 * program's log); exit 0 when NVRTC said yes.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

typedef int (*create_fn)(void **, const char *, const char *, int, const char *const *,
                         const char *const *);
typedef int (*compile_fn)(void *, int, const char *const *);
typedef int (*size_fn)(void *, size_t *);
typedef int (*destroy_fn)(void **);
typedef int (*version_fn)(int *, int *);

/* dlsym's object pointer as a function pointer, the way POSIX allows. */
#define LOAD(var, h, name)                                                                         \
    do {                                                                                           \
        void *sym_ = dlsym(h, name);                                                               \
        memcpy(&(var), &sym_, sizeof(var));                                                        \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc-user FILE.cu ARCH [version]\n");
        return 2;
    }
    void *h = dlopen("libnvrtc.so." STR(KC_CUDA_MAJOR), RTLD_NOW);
    if (!h) {
        fprintf(stderr, "nvrtc-user: %s\n", dlerror());
        return 1;
    }
    FILE *f = fopen(argv[1], "rb");
    static char src[1 << 20];
    size_t n = f ? fread(src, 1, sizeof(src) - 1, f) : 0;
    if (f)
        fclose(f);
    src[n] = '\0';
    char arch[64];
    snprintf(arch, sizeof(arch), "-arch=%s", argv[2]);
    const char *opts[] = {arch};
    create_fn create;
    compile_fn compile;
    size_fn cubin_size;
    destroy_fn destroy;
    version_fn version;
    LOAD(create, h, "nvrtcCreateProgram");
    LOAD(compile, h, "nvrtcCompileProgram");
    LOAD(cubin_size, h, "nvrtcGetCUBINSize");
    LOAD(destroy, h, "nvrtcDestroyProgram");
    LOAD(version, h, "nvrtcVersion");
    size_fn log_size;
    int (*get_log)(void *, char *);
    LOAD(log_size, h, "nvrtcGetProgramLogSize");
    LOAD(get_log, h, "nvrtcGetProgramLog");
    void *prog = NULL;
    int rc = create(&prog, src, argv[1], 0, NULL, NULL);
    if (!rc)
        rc = compile(prog, 1, opts);
    size_t size = 0;
    int compiled = rc;
    if (!rc)
        rc = cubin_size(prog, &size);
    printf("%d %zu\n", rc, size);
    static char log[1 << 16];
    size_t log_n = 0;
    if (compiled && prog && log_size(prog, &log_n) == 0 && log_n <= sizeof(log) &&
        get_log(prog, log) == 0)
        fputs(log, stdout);
    if (argc > 3) {
        int major = 0, minor = 0;
        version(&major, &minor);
        printf("version %d.%d\n", major, minor);
    }
    destroy(&prog);
    return rc ? 1 : 0;
}
