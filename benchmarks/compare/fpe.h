/*
 * A file-per-entry kernel cache, written for the comparison benchmark as a
 * faithful small version of the design CuPy's, Triton's and cuda.core's
 * caches share:
 *
 *   - one file per key, under a two-level fan-out (DIR/ab/cd/abcd...);
 *   - a put writes a temporary file in the same directory and renames it over
 *     the entry, so that a reader sees the whole old entry or the whole new
 *     one (no fsync: CuPy does none, and kcache's synchronous=NORMAL does not
 *     sync each put either);
 *   - each file starts with a header holding the payload's size and its
 *     BLAKE2b-256 (CuPy keeps a content hash at the top of the file); a read
 *     checks it and deletes a damaged file (a miss);
 *   - payloads are stored raw, not compressed (as all three do);
 *   - a hit sets the file's atime (cuda.core does, since relatime would not),
 *     and eviction to a size cap scans the directory, sorts by atime and
 *     deletes the oldest until the files fit (cuda.core's enforcer); the scan
 *     runs when this process's running total passes the cap.
 *
 * Not thread safe: one fpe_cache per thread. Any number of processes may use
 * one directory.
 */
#ifndef KCACHE_BENCH_FPE_H
#define KCACHE_BENCH_FPE_H

#include <stddef.h>
#include <stdint.h>

#define FPE_KEY_SIZE 32
#define FPE_HEADER_SIZE 48 /* magic (8), payload size (8), BLAKE2b-256 (32) */

typedef struct fpe_cache fpe_cache;

/* Opens (creating) a cache directory; max_size 0: no cap. Returns 0 or -errno. */
int fpe_open(fpe_cache **out, const char *dir, uint64_t max_size);
void fpe_close(fpe_cache *cache);

/*
 * Looks up a key. On a hit returns 0 and *data (malloc'd, the caller frees)
 * and *size; on a miss (also a damaged file, which is deleted) returns 1;
 * on an error -errno.
 */
int fpe_get(fpe_cache *cache, const uint8_t key[FPE_KEY_SIZE], void **data, size_t *size);

/* Stores an entry, replacing one with the same key, then enforces the cap. */
int fpe_put(fpe_cache *cache, const uint8_t key[FPE_KEY_SIZE], const void *data, size_t size);

typedef struct fpe_prune_result {
    uint64_t evicted;
    uint64_t bytes_before; /* file sizes before */
    uint64_t bytes_after;
    uint64_t scanned;      /* files looked at */
} fpe_prune_result;

/* Evicts least recently used (atime) files until they total at most max_size. */
int fpe_prune(fpe_cache *cache, uint64_t max_size, fpe_prune_result *out);

/* The file an entry lives in (for page-cache control). */
void fpe_entry_path(const fpe_cache *cache, const uint8_t key[FPE_KEY_SIZE], char *buf,
                    size_t n);

typedef struct fpe_usage {
    uint64_t files;
    uint64_t dirs;
    uint64_t apparent_bytes;  /* st_size of files and directories */
    uint64_t allocated_bytes; /* st_blocks * 512 of files and directories */
} fpe_usage;

/* Walks a cache directory (no handle needed). Returns 0 or -errno. */
int fpe_disk_usage(const char *dir, fpe_usage *out);

#endif
