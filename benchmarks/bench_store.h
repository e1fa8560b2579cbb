/*
 * What bench_store.c and bench_artifacts.c share: the options, failing, and
 * the artifacts the benchmarks store (compiled corpus CUBINs, or bytes shaped
 * like them).
 */
#ifndef BENCH_STORE_H
#define BENCH_STORE_H

#include <stddef.h>
#include <stdint.h>

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)

/* The level and frame flags the library writes with zstd (lib/util/frames.h),
 * so that the floor decodes bytes of the same shape as the store hands back. */
#define FLOOR_ZSTD_LEVEL 3

struct bench_opt {
    int quick;
    int no_touch;
    const char *json_path;
    const char *workdir;
    const char *corpus;
    const char *nvcc;
    const char *tiled_wrapper;
    const char *kcache_exe;
};
extern struct bench_opt opt;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xmalloc(size_t n);
/* A line under the results table. */
void add_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

struct blob {
    uint8_t *data;
    size_t size;
    int real;       /* compiled by nvcc, not made up */
    char what[96];
};

/* The sm_90 CUBIN of src in the corpus (compiled once into the workdir), or
 * fallback_size synthetic bytes when nvcc or the corpus is missing (noted). */
void corpus_cubin(struct blob *b, const char *name, const char *src, int cccl,
                  size_t fallback_size);
/* size bytes of src's 16-byte words, shuffled per seed: a CUBIN-like artifact. */
void cubin_like(struct blob *out, const struct blob *src, size_t size, uint64_t seed);
void free_blob(struct blob *b);
/* A zstd frame of data as the store writes it with zstd (*out: the caller frees). */
size_t zstd_frame(uint8_t **out, const void *data, size_t n);

#endif
