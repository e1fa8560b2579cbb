/*
 * A program without NVRTC that dlopen()s a module needing it (nvrtc_one.c
 * built with NVRTC_ONE_MODULE), as Python loads CuPy's extension modules:
 * the module finds libnvrtc through its own RUNPATH.
 *
 * nvrtc_loader MODULE ARGS...   (runs the module's nvrtc_one_main(MODULE ARGS...))
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nvrtc_loader MODULE ARGS...\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nvrtc_loader: %s\n", dlerror());
        return 2;
    }
    int (*fn)(int, char **);
    void *p = dlsym(h, "nvrtc_one_main");
    *(void **)&fn = p;
    return p ? fn(argc - 1, argv + 1) : 2;
}
