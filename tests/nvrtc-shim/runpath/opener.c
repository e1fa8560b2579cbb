/*
 * A library that dlopen()s its neighbour by name, relying on its own RUNPATH,
 * as PyTorch's and CuPy's libraries do. glibc finds the caller's RUNPATH from
 * dlopen's return address: under the drop-in (which defines dlopen) the
 * neighbour must still be found.
 */
#include <dlfcn.h>
#include <stdio.h>

int kc_opener_load(void);
int kc_opener_load(void)
{
    void *h = dlopen("libkcneighbour.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "opener: %s\n", dlerror());
        return -1;
    }
    int (*fn)(void);
    void *p = dlsym(h, "kc_neighbour");
    *(void **)&fn = p;
    return p ? fn() : -1;
}
