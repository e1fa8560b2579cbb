/* Internal helpers shared by every part of the library. */
#ifndef KC_COMMON_H
#define KC_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kcache/kcache.h"

#define KC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KC_MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__GNUC__)
#define KC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KC_PRINTF(f, a)
#endif

#define KC_ERRMSG_SIZE 512

/*
 * A result struct the caller owns: NULL, or one whose version this build
 * knows (its fields after version may be fewer in an older caller's).
 */
#define KC_RESULT_VERSION_OK(out, max)                                                             \
    (!(out) || ((out)->version >= 1 && (out)->version <= (max)))

/*
 * The one place allocation happens, so that a failure is always noticed and
 * tests can count or fail allocations in one spot.
 */
void *kc_malloc(size_t size);
void *kc_calloc(size_t n, size_t size);
void *kc_realloc(void *p, size_t size);
char *kc_strdup(const char *s);
char *kc_memdup(const void *p, size_t size);

/*
 * Room for element n of an array p of *cap elements of elem bytes: p itself
 * while n < *cap, else p grown (to first, then doubling) with *cap updated.
 * NULL when out of memory, p then untouched. The one way arrays grow.
 */
void *kc_grow(void *p, size_t *cap, size_t n, size_t elem, size_t first);

/* A list of n strings of its own: push appends a copy of s; free frees the strings and v. */
int kc_strv_push(char ***v, size_t *n, const char *s);
void kc_strv_free(char **v, size_t n);

/* Formats into a fixed buffer, always NUL-terminated. Returns code. */
int kc_fmt(char *buf, size_t size, int code, const char *fmt, ...) KC_PRINTF(4, 5);

/*
 * What a handle's public _errmsg() returns: its last message (errmsg, NULL
 * when there is no handle), "no error" before any, absent ("no store")
 * without a handle. Never NULL.
 */
const char *kc_errmsg_of(const char *errmsg, const char *absent);

/* Milliseconds since the Unix epoch, and a monotonic clock in nanoseconds. */
int64_t kc_now_ms(void);
uint64_t kc_mono_ns(void);

/* A growable byte buffer. */
typedef struct kc_buf {
    uint8_t *data;
    size_t size;
    size_t cap;
} kc_buf;

int kc_buf_reserve(kc_buf *b, size_t extra);
int kc_buf_append(kc_buf *b, const void *p, size_t n);
int kc_buf_append_u32(kc_buf *b, uint32_t v);
void kc_buf_free(kc_buf *b);

/*
 * Reads a whole regular file of at most max bytes into a new NUL-terminated
 * buffer. Returns 0; KCACHE_EIO with errno set when it cannot be opened or
 * read; KCACHE_EINVAL when it is not a regular file or is larger than max;
 * KCACHE_ENOMEM.
 */
int kc_read_file(const char *path, uint64_t max, char **out, size_t *size);
/* kc_read_file(), and what fstat() said of the file opened (when st is not NULL). */
struct stat;
int kc_read_file_stat(const char *path, uint64_t max, char **out, size_t *size,
                      struct stat *st);

/* Reads little-endian integers. */
uint32_t kc_read_u32(const uint8_t *p);

#endif
