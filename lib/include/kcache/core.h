/*
 * kcache: a cache of compiled CUDA kernels (CUBIN, PTX, LTO-IR) in one SQLite file.
 *
 * This header holds what every part of the API shares: version, error codes,
 * artifact kinds and the key type. Include <kcache/store.h> for the store.
 */
#ifndef KCACHE_CORE_H
#define KCACHE_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memset, for the KCACHE_xxx_INIT macros in C++ */

#ifdef __cplusplus
extern "C" {
#endif

#define KCACHE_VERSION_MAJOR 0
#define KCACHE_VERSION_MINOR 1
#define KCACHE_VERSION_PATCH 0
#define KCACHE_VERSION_NUMBER                                                                      \
    (KCACHE_VERSION_MAJOR * 10000 + KCACHE_VERSION_MINOR * 100 + KCACHE_VERSION_PATCH)

/*
 * Every options, request and result struct the caller fills starts with a
 * version. Two ways to get one with the version set and every other field
 * zero:
 *   - KCACHE_xxx_INIT, for C and C++ sources:
 *         kcache_request r = KCACHE_REQUEST_INIT;
 *     In C it is a constant initializer, {.version = V}: usable for a static,
 *     and designated, so -Wextra (-Wmissing-field-initializers) is quiet
 *     about the fields left out. C++ has no designated initializers before
 *     C++20 and g++ -Wextra flags a brace list that leaves fields out, so
 *     there it is a lambda called in place giving the same value.
 *   - kcache_xxx_init(&r, KCACHE_xxx_VERSION), exported by the library, for
 *     other languages (ctypes, cffi, a binding generator) that cannot use a
 *     macro: zero-fills the struct as that version of it laid it out and
 *     sets the version. Returns 0, or KCACHE_EINVAL (nothing written) for a
 *     version 0 or newer than this library.
 * A function given a struct of a version it does not know returns
 * KCACHE_EINVAL, and its message names the struct, the version given, the
 * versions this library knows, and the two ways above to make one.
 * tests/api/check_headers.py compiles every macro in C11 and C++11 with -Wall -Wextra.
 */
#ifdef __cplusplus
#define KCACHE_VERSIONED_INIT(type, version_value)                                                 \
    ([]() -> type {                                                                                \
        type kcache_init_value_;                                                                   \
        memset(&kcache_init_value_, 0, sizeof(kcache_init_value_));                                \
        kcache_init_value_.version = (version_value);                                              \
        return kcache_init_value_;                                                                 \
    }())
#else
#define KCACHE_VERSIONED_INIT(type, version_value) {.version = (version_value)}
#endif

#if defined(KCACHE_BUILDING_LIBRARY) && defined(__GNUC__)
#define KCACHE_API __attribute__((visibility("default")))
#else
#define KCACHE_API
#endif

/*
 * Return codes. Every function that can fail returns 0 or one of these, and
 * the object that failed keeps a one-line message about it: the store
 * (kcache_store_errmsg), the config (kcache_config_errmsg), the GPU handle
 * (kcache_gpu_errmsg), a compile's result (its message: a compiler is shared
 * by threads, and each compile's outcome is its own object). A handle that
 * threads share (store, remote, GPU) gives each thread the message of its own
 * last failure, kept thread-local. Constructors, which have no object yet,
 * write it into the errbuf they are given.
 */
enum kcache_status {
    KCACHE_OK = 0,
    KCACHE_ENOTFOUND = -1,   /* no such entry (a miss) */
    KCACHE_EINVAL = -2,      /* an argument is wrong; the message says which */
    KCACHE_ENOMEM = -3,      /* out of memory */
    KCACHE_EIO = -4,         /* the file system refused (permissions, I/O error) */
    KCACHE_EBUSY = -5,       /* the database stayed locked past the busy timeout */
    KCACHE_ECORRUPT = -6,    /* damaged data was found and set aside */
    KCACHE_EFOREIGN = -7,    /* the file belongs to another application; left untouched */
    KCACHE_EVERSION = -8,    /* written by a newer kcache: upgrade kcache */
    KCACHE_EREADONLY = -9,   /* the store is open read-only */
    KCACHE_EFULL = -10,      /* the disk is full */
    KCACHE_ECOMPILE = -11,   /* the compiler reported an error; see the log */
    KCACHE_ENOTSUP = -12,    /* not possible here (no driver, network file system, ...) */
    KCACHE_EAMBIGUOUS = -13, /* a key prefix matches more than one entry */
    KCACHE_EDISABLED = -14,  /* the cache is disabled (KCACHE_DISABLE) */
};

/* A static, human-readable name for a status code. Never NULL. */
KCACHE_API const char *kcache_strerror(int status);

/* The library's version as "MAJOR.MINOR.PATCH" (static storage). */
KCACHE_API const char *kcache_version(void);

/* What an artifact is. The values are stored in databases: never renumber. */
typedef enum kcache_kind {
    KCACHE_KIND_CUBIN = 1,
    KCACHE_KIND_PTX = 2,
    KCACHE_KIND_LTOIR = 3,
    KCACHE_KIND_DATA = 4, /* bytes a caller stored under its own key (<kcache/store.h>) */
} kcache_kind;

/* "cubin", "ptx", "ltoir", "data", or NULL for a value that is not a kind. */
KCACHE_API const char *kcache_kind_name(kcache_kind kind);

/* Parses "cubin", "ptx", "ltoir" or "data" into *out. Returns 0 or KCACHE_EINVAL. */
KCACHE_API int kcache_kind_parse(kcache_kind *out, const char *name);

#define KCACHE_KEY_SIZE 32
#define KCACHE_KEY_HEX_SIZE (2 * KCACHE_KEY_SIZE + 1)

/* A cache key: BLAKE2b-256 over the canonical encoding of a request's inputs. */
typedef struct kcache_key {
    uint8_t bytes[KCACHE_KEY_SIZE];
} kcache_key;

/* Writes the key as 64 lowercase hex digits and a NUL into out. */
KCACHE_API void kcache_key_hex(char out[KCACHE_KEY_HEX_SIZE], const kcache_key *key);

/* Parses 64 hex digits. Returns 0 or KCACHE_EINVAL. */
KCACHE_API int kcache_key_parse(kcache_key *out, const char *hex);

/*
 * Sizes and ages as kcache.conf, the command line and kcache_store_options
 * read them. Public so that every front end (the CLI, a binding, a program's
 * own flags) accepts exactly the spellings the library's settings accept,
 * rather than each writing its own parser.
 *
 * Every number goes through one of these: digits first (no sign, no "0x", no
 * exponent, no "nan"), range-checked, the result untouched on error.
 *
 * Parses a size such as "512K", "2G", "1.5GiB", "300MB" or "4096B" into bytes.
 * Units are binary (K = KiB = 1024); "B" means bytes and a bare number GiB,
 * as in ccache ("5" is 5 GiB).
 * Returns 0, or KCACHE_EINVAL for anything else (negative, overflow, junk).
 */
KCACHE_API int kcache_parse_size(uint64_t *out, const char *text);

/*
 * Parses a size cap: a size as kcache_parse_size() reads it (not 0), or "0",
 * "none" or "unlimited" for no cap, which sets *out to UINT64_MAX.
 * Returns 0 or KCACHE_EINVAL.
 */
KCACHE_API int kcache_parse_max_size(uint64_t *out, const char *text);

/*
 * Files as kcache creates them, for every front end that writes one (an
 * export, an output): never through a link, never in a directory another
 * user could change.
 *
 * Whether dir may hold a file kcache creates: it is the user's or root's and
 * writable by nobody else, or sticky (as /tmp); a symbolic link to it counts
 * only when the user or root made it. Returns 0, or KCACHE_EIO with a
 * one-line message in err saying which and what to do.
 */
KCACHE_API int kcache_dir_check(const char *dir, char *err, size_t err_size);

/* kcache_file_write(): fsync the file before it is renamed into place. */
#define KCACHE_FILE_SYNC 1u

/*
 * Writes size bytes to path whole: a new file beside it under a fresh name,
 * created with O_EXCL|O_NOFOLLOW with mode (less the umask), renamed over
 * path; in a directory kcache_dir_check() accepts. A link at path is
 * replaced, never followed. flags: 0 or KCACHE_FILE_SYNC. Returns 0, or
 * KCACHE_EIO, KCACHE_EFULL (no space) or KCACHE_EINVAL with a one-line
 * message in err.
 */
KCACHE_API int kcache_file_write(const char *path, const void *data, size_t size, unsigned mode,
                                 unsigned flags, char *err, size_t err_size);

/* The longest age kcache_parse_age() takes, in seconds: 1000 years. */
#define KCACHE_AGE_MAX (UINT64_C(1000) * 366 * 86400)

/*
 * Parses an age such as "30d", "12h", "90m", "45s" or "2w" into seconds, at
 * most KCACHE_AGE_MAX. Returns 0, or KCACHE_EINVAL.
 */
KCACHE_API int kcache_parse_age(uint64_t *out, const char *text);

/*
 * Parses a count (entries, jobs, a batch, milliseconds): decimal digits only,
 * from min to max inclusive. Returns 0, or KCACHE_EINVAL.
 */
KCACHE_API int kcache_parse_count(uint64_t *out, const char *text, uint64_t min, uint64_t max);

/*
 * Formats bytes in binary units ("1.5 MiB", "512 B") into buf, NUL-terminated
 * and truncated to size. Returns buf.
 */
KCACHE_API char *kcache_format_size(char *buf, size_t size, uint64_t bytes);

/* Log levels given to a log callback. */
enum kcache_log_level {
    KCACHE_LOG_ERROR = 0,
    KCACHE_LOG_WARNING = 1,
    KCACHE_LOG_INFO = 2,
    KCACHE_LOG_DEBUG = 3,
};

/*
 * The library never prints. Where it has something to say that is not the
 * result of a call (a database set aside, a cache directory writable by
 * others), it calls this function, if one was given, from the calling thread.
 * It is called with no lock of the library held, as the call that said it
 * returns: it may call the library, on the same handle too. (A message said
 * while the call works is kept until then: at most 64 a call, and one more
 * saying how many were left out.)
 */
typedef void (*kcache_log_fn)(void *userdata, int level, const char *message);

/*
 * Progress of long work (bundles, the remote's push and pull): done of total
 * entries. phase is a static word ("exporting", "checking", "merging",
 * "pushing", "pulling"). Called from the calling thread, with no lock of the
 * library held: it may call the library, on the same handle too, and may
 * change the store meanwhile (the operation goes on with the store as it
 * then is).
 */
typedef void (*kcache_progress_fn)(void *userdata, const char *phase, uint64_t done,
                                   uint64_t total);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_CORE_H */
