/*
 * Helpers shared by the comparison benchmarks: timing, quantiles, a
 * deterministic generator, and the JSON records every figure is written as.
 *
 * A record is one measured figure: {group, system, case, metric, value,
 * unit}. benchmarks/compare/gen_results.py builds every table from them.
 */
#ifndef KCACHE_BENCH_CMP_UTIL_H
#define KCACHE_BENCH_CMP_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)

void cmp_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *cmp_xmalloc(size_t n);
double cmp_now(void);
uint64_t cmp_splitmix(uint64_t *state);
void cmp_fill_random(void *dst, size_t n, uint64_t seed);
/* Sorts v in increasing order. */
void cmp_sort(double *v, size_t n);
/* Sorts v; q in [0, 1] (0.5: the median, the mean of the middle two when even). */
double cmp_quantile(double *v, size_t n, double q);
/*
 * The synthetic entries the store benchmarks share: entry i's size
 * (log-normal around 40 KiB, 4 KiB .. 1 MiB) and its bytes, 16-byte words
 * of a pool of real CUBINs (one sm_90 instruction each), so that zstd works
 * on them as hard as on real ones; the entry number leads, so no two are
 * equal.
 */
size_t cmp_entry_size(uint64_t i);
void cmp_entry_bytes(uint64_t i, uint8_t *out, size_t size, const uint8_t *pool,
                     size_t pool_words);
/* snprintf that fails the run on truncation (paths). */
void cmp_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int cmp_load_file(const char *path, uint8_t **out, size_t *size);
void cmp_write_file(const char *path, const void *data, size_t n);
uint64_t cmp_file_size(const char *path);
uint64_t cmp_file_blocks(const char *path); /* st_blocks * 512, 0 if missing */
/* Drops a file's clean pages from the page cache (posix_fadvise DONTNEED). */
void cmp_drop_cache(const char *path);
/* Bytes this process has had read from storage (/proc/self/io read_bytes): what a
 * cold get really fetched from the disk, page cache hits not counted. 0 where unknown. */
uint64_t cmp_disk_read_bytes(void);
/* Reads a file through once, so that it is in the page cache. */
void cmp_warm_file(const char *path);

/* s as a JSON string, quoted and escaped. */
void cmp_json_string(FILE *f, const char *s);

/* The record sink: opened once per program, closed by cmp_json_close(). */
void cmp_json_open(const char *path, const char *benchmark, int quick);
void cmp_rec(const char *group, const char *system, const char *casename, const char *metric,
             double value, const char *unit);
/* A free-form note (shown under the tables). */
void cmp_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cmp_json_close(void);

#endif
