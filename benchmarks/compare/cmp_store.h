/* Store-level comparison (cmp_store.c) and compile-level (cmp_compile.c). */
#ifndef KCACHE_BENCH_CMP_STORE_H
#define KCACHE_BENCH_CMP_STORE_H

#include <stddef.h>
#include <stdint.h>

struct cmp_store_args {
    const char *workdir;          /* scratch directory, removed and recreated */
    const char *const *cubins;    /* real CUBINs whose words make the artifacts */
    size_t n_cubins;
    uint64_t entries;             /* distinct entries */
    size_t per_bin;               /* sampled entries per size bin */
    size_t hit_iters;             /* warm gets per bin and system */
    size_t cold_iters;            /* cold gets per bin and system */
    double seconds;               /* per throughput run */
    uint64_t cap;                 /* size cap for the cap run */
    uint64_t cap_factor;          /* raw bytes written = cap_factor * cap */
    const char *sizes_out;        /* optional: one size per line, for the Python run */
    const char *samples_out;      /* optional: "bin index" per line */
    int ratio_only;               /* stop after the compressibility figures */
};

int cmp_store_main(const struct cmp_store_args *args);

struct cmp_compile_args {
    const char *workdir;
    const char *corpus;
    const char *cuda;             /* toolkit root */
    int runs;                     /* NVRTC runs per kernel (block_sort: fewer) */
    int hit_runs;
};

int cmp_compile_main(const struct cmp_compile_args *args);

#endif
