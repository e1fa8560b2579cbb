/* Internal helpers shared by every part of the library. */
#ifndef KC_COMMON_H
#define KC_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "kcache/core.h"

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
 * Whether a caller's versioned struct is of a version this build knows,
 * 1..max: 0 if so, else KCACHE_EINVAL with msg (may be NULL) the one message
 * every function gives for it, naming the struct (type, "kcache_prune_options"),
 * the version given, the versions known, and how to make one it knows
 * (KCACHE_PRUNE_OPTIONS_INIT or kcache_prune_options_init()). A caller built
 * against a newer header, or one that never initialised the struct, learns
 * what to do instead of having its fields misread.
 */
int kc_version_check(char *msg, size_t size, const char *type, unsigned version, unsigned max);

/*
 * The exported kcache_xxx_init(out, version) of a versioned struct (see
 * <kcache/core.h>): zero-fills it as that version laid it out and sets the
 * version. The sizes are the struct's at each version 1..current: the offset
 * of the first field the next version appended, then sizeof, so that a
 * caller built against an older header never has more written than its
 * struct holds.
 */
int kc_init_versioned(void *out, unsigned version, const size_t *sizes, size_t n);
#define KC_DEFINE_INIT(type, ...)                                                                  \
    KCACHE_API int type##_init(type *out, unsigned version)                                        \
    {                                                                                              \
        static const size_t sizes[] = {__VA_ARGS__};                                               \
        int rc = kc_init_versioned(out, version, sizes, KC_ARRAY_SIZE(sizes));                     \
        if (!rc)                                                                                   \
            out->version = version;                                                                \
        return rc;                                                                                 \
    }

/*
 * The one place allocation happens, so that a failure is always noticed and
 * tests can count or fail allocations in one spot.
 */
void *kc_malloc(size_t size);
void *kc_calloc(size_t n, size_t size);
void *kc_realloc(void *p, size_t size);
char *kc_strdup(const char *s);
char *kc_memdup(const void *p, size_t size);
/* The directory part of path ("a/b" -> "a", "b" -> ".", "/b" -> "/"), allocated; NULL: ENOMEM. */
char *kc_path_dir(const char *path);
/* Whether what uid owns may be trusted (create.c): the user's own, or root's. */
int kc_uid_trusted(uid_t uid);

/*
 * Room for element n of an array p of *cap elements of elem bytes: p itself
 * while n < *cap, else p grown (to first, then doubling) with *cap updated.
 * NULL when out of memory, p then untouched. The one way arrays grow.
 */
void *kc_grow(void *p, size_t *cap, size_t n, size_t elem, size_t first);

/* A list of n strings of its own: push appends a copy of s; free frees the strings and v. */
int kc_strv_push(char ***v, size_t *n, const char *s);
/* As kc_strv_push, taking s itself (left to the caller on failure). */
int kc_strv_push_owned(char ***v, size_t *n, char *s);
void kc_strv_free(char **v, size_t n);

/* Formats into a fixed buffer, always NUL-terminated. Returns code. */
int kc_fmt(char *buf, size_t size, int code, const char *fmt, ...) KC_PRINTF(4, 5);

/*
 * What a handle's public _errmsg() returns: its last message (errmsg, NULL
 * when there is no handle), "no error" before any, absent ("no store")
 * without a handle. Never NULL.
 */
const char *kc_errmsg_of(const char *errmsg, const char *absent);

/*
 * A handle shared by threads keeps its last message for every thread, and a
 * thread reading it could see another thread's failure, or a message being
 * rewritten under it. So each failure is also noted for the calling thread
 * (thread-local, one handle at a time), and a handle's _errmsg() gives the
 * caller's own: kc_errmsg_note() records msg as this thread's last failure on
 * owner; kc_errmsg_thread() returns it, or, when this thread's last failure
 * was on another handle, a copy of the shared message (shared, read under
 * lock when one is given). Valid until this thread's next call on owner.
 */
void kc_errmsg_note(const void *owner, const char *msg);
const char *kc_errmsg_thread(const void *owner, const char *shared, pthread_mutex_t *lock,
                             const char *absent);
/* Forgets this thread's note on owner (a handle closed: its address may come back). */
void kc_errmsg_forget(const void *owner);

/*
 * Log messages said while a handle's lock is held, kept until it is
 * released: the caller's log function may call the same handle, and the
 * lock is not recursive. The handle queues under its lock (kc_logq_add),
 * takes the queue as it unlocks (kc_logq_take) and delivers it after
 * (kc_logq_deliver), on the same thread: each message goes out from the
 * call that said it, as that call returns. Bounded at KC_LOGQ_MAX; past
 * that, and when memory runs out, one last message says how many were left
 * out.
 */
#define KC_LOGQ_MAX 64

typedef struct kc_logq {
    struct kc_logq_msg {
        int level;
        char *text;
    } *v;
    size_t n, cap;
    size_t left_out;
} kc_logq;

void kc_logq_add(kc_logq *q, int level, const char *text);
/* What q holds, moved out: q is left empty. */
kc_logq kc_logq_take(kc_logq *q);
/*
 * Calls log (when not NULL) with each message, in order, then frees them;
 * this thread's last failure (kc_errmsg_note()) is what it was before, so
 * a callback's own failing call does not replace the message of the call
 * that said them. While this thread holds a lock under kc_log_hold(), the
 * messages wait instead, and go out when it lets go.
 */
void kc_logq_deliver(kc_logq *q, kcache_log_fn log, void *userdata);
/*
 * A lock that another handle's log must not be delivered under: a remote's,
 * which calls into its store while it holds it (the store's log is often
 * the same callback, and it may use the remote). kc_log_hold() after taking
 * it; kc_log_release() after letting go, which delivers what waited.
 */
void kc_log_hold(void);
void kc_log_release(void);

/* Milliseconds since the Unix epoch, and a monotonic clock in nanoseconds. */
int64_t kc_now_ms(void);

/*
 * The working directory as NVRTC names it in line information (-lineinfo,
 * -G: PTX's .file joins it with each file's name): $PWD when it names this
 * directory, as a shell keeps it, else getcwd(); "?" when neither says.
 */
void kc_nvrtc_workdir(char *out, size_t size);
uint64_t kc_mono_ns(void);

/* A growable byte buffer. */
typedef struct kc_buf {
    uint8_t *data;
    size_t size;
    size_t cap;
} kc_buf;

int kc_buf_reserve(kc_buf *b, size_t extra);
int kc_buf_append(kc_buf *b, const void *p, size_t n);
/* kc_buf_append() of one byte, inline while there is room (scanners add a byte at a time). */
static inline int kc_buf_put(kc_buf *b, char c)
{
    if (b->size < b->cap) {
        b->data[b->size++] = (uint8_t)c;
        return 0;
    }
    return kc_buf_append(b, &c, 1);
}
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

/*
 * Where path lies below the directory dir, both absolute and resolved (what
 * realpath() gives): the part below it ("" for dir itself), or NULL when it
 * is elsewhere ("/usr/local/cuda-13.0x" is not below "/usr/local/cuda-13.0").
 */
static inline const char *kc_path_below(const char *dir, const char *path)
{
    size_t n = dir ? strlen(dir) : 0;
    if (!n || strncmp(path, dir, n) != 0 || (path[n] != '/' && path[n] != '\0'))
        return NULL;
    return path[n] ? path + n + 1 : path + n;
}

#endif
