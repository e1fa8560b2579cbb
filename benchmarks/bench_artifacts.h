/*
 * The artifacts the store benchmarks store (bench_artifacts.c): compiled
 * corpus CUBINs, or bytes shaped like them.
 */
#ifndef BENCH_ARTIFACTS_H
#define BENCH_ARTIFACTS_H

#include <stddef.h>
#include <stdint.h>

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)

/* The level and frame flags the library writes with zstd (lib/util/frames.h),
 * so that the floor decodes bytes of the same shape as the store hands back. */
#define FLOOR_ZSTD_LEVEL 3

struct blob {
    uint8_t *data;
    size_t size;
    int real;           /* compiled by nvcc, not made up */
    char what[96];
    char fallback[256]; /* when not real: why, for a note under the results */
};

/* Where corpus_cubin finds nvcc and the corpus, and writes what it compiles. */
void artifacts_configure(const char *nvcc, const char *corpus, const char *workdir);

/* The sm_90 CUBIN of src in the corpus (compiled once into the workdir), or
 * fallback_size synthetic bytes when nvcc or the corpus is missing (said in
 * b->fallback). */
void corpus_cubin(struct blob *b, const char *name, const char *src, int cccl,
                  size_t fallback_size);
/* size bytes of src's 16-byte words, shuffled per seed: a CUBIN-like artifact. */
void cubin_like(struct blob *out, const struct blob *src, size_t size, uint64_t seed);
void free_blob(struct blob *b);
/* A zstd frame of data as the store writes it with zstd (*out: the caller frees). */
size_t zstd_frame(uint8_t **out, const void *data, size_t n);

#endif
