/*
 * What NVIDIA's NVRTC reads during a miss.
 *
 * The drop-in compiles a miss with NVIDIA's library exactly as the program
 * asked (its -I, its in-memory headers), so NVRTC reads the disk itself. The
 * key covers what kcache's include resolver predicted it would read (the
 * closure: every path looked at, with what was found there); a gap in that
 * prediction would be a stale kernel on the next hit. So the prediction is
 * checked against what NVRTC actually did: while a miss compiles, every path
 * NVRTC opens or probes on that thread is recorded, and afterwards each one
 * must be in the closure (in the same state: a file, or nothing), or be a
 * toolkit file by its real path (keyed by the toolkit's build), or be one of
 * NVRTC's own fixed probes that cannot change the bytes. Anything else: the
 * program gets NVIDIA's answer, nothing is stored, and the reason is counted.
 * Sound whatever the resolver misses; a miss of the resolver's costs only time.
 *
 * How NVRTC is seen: libnvrtc.so.13 (13.0) takes open, fopen, fopen64,
 * __xstat, __lxstat, access, realpath, readlink, opendir and statfs from
 * glibc (nm -D), and the drop-in, preloaded, precedes glibc in the lookup
 * order, so the definitions below are the ones NVRTC calls. On a miss NVRTC
 * looks up includes with __xstat then open (strace: nothing else reaches the
 * file system for an include, and the compile runs on the calling thread).
 * Three checks keep this honest rather than assumed:
 *   - the audit (kc_observe_audit): NVRTC's undefined symbols are read from
 *     the loaded library; one that reaches the file system by a path and is
 *     not interposed here (a later build calling statx or scandir, say)
 *     makes every compile "unobservable": uncached, never unsound;
 *   - the self-check, once per process: each interposed function NVRTC
 *     imports is called through the global scope, as NVRTC's calls are bound,
 *     and must be recorded (a drop-in loaded with dlopen, not preloaded,
 *     sees nothing: unobservable);
 *   - while observing, a thread or process started, a change of directory,
 *     a record lost (the arena full, a signal handler re-entering) make the
 *     observation incomplete: not stored.
 *
 * Cost: outside a miss each interposer is a thread-local load and a call to
 * glibc's function, the same on a hit (which never loads NVRTC). Recording
 * writes into an arena mapped for the miss (no malloc: a signal handler on
 * the observed thread may open files), and the comparison runs after
 * NVRTC returned. The figures are in doc/design.md, "The drop-in's soundness".
 */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nvrtc-shim/observe.h"

#define EXPORT __attribute__((visibility("default")))

/* What a record says was asked. Stats are the probes NVRTC's own fixed names may use. */
enum { OP_OPEN = 1, OP_STAT, OP_PROBE };
/* What was there. */
enum { SEEN_ABSENT = 0, SEEN_FILE, SEEN_DIR, SEEN_OTHER };

/* Virtual size of a miss's arena: only what is written is ever backed by memory. */
#define ARENA_SIZE (64u << 20)

struct kc_obs {
    char *arena;        /* records: op u8, seen u8, length u16, path, NUL */
    size_t used, cap;
    int mapped;         /* arena is an mmap (else malloc'd, compacted at end) */
    int depth;          /* > 0 while a record is being written */
    const char *taint;  /* why the observation is incomplete, or NULL */
    char cwd[PATH_MAX];
    char pwd[PATH_MAX]; /* $PWD, which NVRTC stats to name the working directory */
    unsigned long dir_epoch; /* kc_observe_dir_epoch() when cwd was read */
    unsigned long spawned_at; /* spawned_calls when the miss began */
    /* The last verdict, for the closure it was given (an sm_XX compile's PTX
     * entry asks again for the same compile and, nearly always, closure). */
    char *judged_closure;   /* closure_text() of the closure judged, or NULL */
    size_t judged_size;
    const char *judged;
};

static __thread kc_obs *cur __attribute__((tls_model("initial-exec")));

/*
 * Threads NVRTC starts while it compiles (NVVM's workers: none on a 2-core
 * machine, eight on a 16-core one) are marked, and so are the threads they
 * start. Their calls are not recorded (one of them may outlive the miss, or
 * serve the next one); whatever path call one makes is counted instead, and a
 * miss during which the count moved is not stored. So NVRTC's threads cost
 * nothing while they stay off the file system, and are never an unseen read.
 */
static __thread int spawned __attribute__((tls_model("initial-exec")));
static atomic_ulong spawned_calls;

static const char R_UNOBSERVABLE[] = "unobservable";
static const char R_INCOMPLETE[] = "observation-incomplete";
static const char R_UNPREDICTED[] = "unpredicted-read";
static const char R_CHANGED[] = "closure-changed";

/* ---- recording ------------------------------------------------------------ */

static void say_why(const char *what);

static void taint(kc_obs *o, const char *why)
{
    if (!o->taint)
        o->taint = why;
}

static int seen_of(mode_t mode)
{
    return S_ISREG(mode) ? SEEN_FILE : S_ISDIR(mode) ? SEEN_DIR : SEEN_OTHER;
}

/* What is at path now, by the system call (never an interposer below). */
static int seen_at(const char *path)
{
    struct stat st;
#ifdef SYS_newfstatat
    if (syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) != 0)
#else
    if (syscall(SYS_fstatat64, AT_FDCWD, path, &st, 0) != 0)
#endif
        return SEEN_ABSENT;
    return seen_of(st.st_mode);
}

static void record(kc_obs *o, int op, const char *path, int seen)
{
    if (o->depth++) {
        say_why("a record made within a record (a signal handler) during a miss");
        taint(o, R_INCOMPLETE); /* a signal handler on this thread, mid-record */
        o->depth--;
        return;
    }
    size_t n = path ? strnlen(path, 65535) : 0;
    if (!path || n >= 65535 || o->cap - o->used < n + 5) {
        say_why(!path ? "a call with no path during a miss" : "a record too long, or the records full");
        taint(o, R_INCOMPLETE);
    } else {
        char *r = o->arena + o->used;
        r[0] = (char)op;
        r[1] = (char)seen;
        r[2] = (char)(n & 0xff);
        r[3] = (char)(n >> 8);
        memcpy(r + 4, path, n + 1);
        o->used += n + 5;
    }
    o->depth--;
}

static void saw_fd(int op, const char *path, int fd)
{
    kc_obs *o = cur;
    if (!o && spawned)
        atomic_fetch_add(&spawned_calls, 1);
    if (!o)
        return;
    int err = errno;
    struct stat st;
    int seen = fd < 0 ? SEEN_ABSENT : syscall(SYS_fstat, fd, &st) == 0 ? seen_of(st.st_mode)
                                                                        : SEEN_OTHER;
    record(o, op, path, seen);
    errno = err;
}

static void saw_stat(int op, const char *path, int rc, const struct stat *st)
{
    kc_obs *o = cur;
    if (!o && spawned)
        atomic_fetch_add(&spawned_calls, 1);
    if (!o)
        return;
    int err = errno;
    record(o, op, path, rc != 0 ? SEEN_ABSENT : st ? seen_of(st->st_mode) : seen_at(path));
    errno = err;
}

/*
 * fstatat(fd, "", st, AT_EMPTY_PATH) and statx alike look up no name: they
 * ask about the file an fd already holds (glibc 2.39 and GCC 14's libstdc++
 * make such calls where older ones called fstat), and that file's open was
 * seen.
 */
static int fd_only(const char *path, int flags)
{
    return path && !*path && (flags & AT_EMPTY_PATH);
}

/*
 * $KCACHE_OBSERVE_DEBUG set: one line on stderr saying which call made an
 * observation incomplete, for whoever wonders why a compile was not stored.
 */
static void say_why(const char *what)
{
    static int debug = -1;
    if (debug < 0)
        debug = getenv("KCACHE_OBSERVE_DEBUG") != NULL;
    if (!debug)
        return;
    char line[PATH_MAX + 128];
    int n = snprintf(line, sizeof(line), "kcache: not stored: %s\n", what);
    if (n > 0 && write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0)
        return;
}

/* An interposed call that leaves the thread: what it does cannot be seen. */
static void saw_escape_in(const char *what)
{
    if (!cur && spawned)
        atomic_fetch_add(&spawned_calls, 1);
    if (cur) {
        if (!cur->taint) {
            char line[96];
            snprintf(line, sizeof(line), "%s during a miss", what);
            say_why(line);
        }
        taint(cur, R_INCOMPLETE);
    }
}
#define saw_escape() saw_escape_in(__func__)

/* ---- the interposers -------------------------------------------------------- */

/* Every function defined below, by name. */
#define KC_INTERPOSED(X)                                                                           \
    X(open) X(open64) X(openat) X(openat64) X(fopen) X(fopen64) X(opendir) X(realpath)             \
    X(__xstat) X(__xstat64) X(__lxstat) X(__lxstat64) X(stat) X(stat64) X(lstat) X(lstat64)       \
    X(fstatat) X(fstatat64) X(statx) X(access) X(faccessat) X(readlink) X(statfs) X(chdir)        \
    X(fchdir) X(fork) X(system) X(pthread_create)
#define KC_INDEX(name) I_##name,
#define KC_NAME(name) #name,
enum { KC_INTERPOSED(KC_INDEX) N_INTERPOSED };
static const char *const interposed_names[N_INTERPOSED] = {KC_INTERPOSED(KC_NAME)};

/*
 * glibc's function behind each name, found past this library: all of them
 * when the library is loaded, so that a signal handler's first call does not
 * have to (dlsym is not async-signal-safe); on first use for a call that comes
 * before any constructor ran.
 */
static _Atomic(void *) next_slot[N_INTERPOSED];

static void *next_fn(int i)
{
    void *p = atomic_load_explicit(&next_slot[i], memory_order_relaxed);
    if (!p) {
        p = dlsym(RTLD_NEXT, interposed_names[i]);
        atomic_store_explicit(&next_slot[i], p, memory_order_relaxed);
    }
    return p;
}

__attribute__((constructor)) static void resolve_all(void)
{
    for (int i = 0; i < N_INTERPOSED; i++)
        next_fn(i);
}

#define NEXT(type, var, name)                                                                      \
    __typeof__(type) var;                                                                          \
    do {                                                                                           \
        void *p_ = next_fn(I_##name);                                                              \
        if (!p_) {                                                                                 \
            errno = ENOSYS;                                                                        \
            return MISSING_RET;                                                                    \
        }                                                                                          \
        memcpy(&var, &p_, sizeof(p_));                                                             \
    } while (0)

/* The optional mode of open's family. */
#define OPEN_MODE(flags, last)                                                                     \
    unsigned mode_ = 0;                                                                            \
    if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) {                               \
        va_list ap_;                                                                               \
        va_start(ap_, last);                                                                       \
        mode_ = va_arg(ap_, unsigned);                                                             \
        va_end(ap_);                                                                               \
    }

#define MISSING_RET -1
#define OPEN_LIKE(cname, sym)                                                                      \
    EXPORT int cname(const char *path, int flags, ...) __asm__(#sym);                               \
    EXPORT int cname(const char *path, int flags, ...)                                             \
    {                                                                                              \
        OPEN_MODE(flags, flags)                                                                    \
        NEXT(int (*)(const char *, int, ...), fn, sym);                                            \
        int fd = fn(path, flags, mode_);                                                           \
        saw_fd(OP_OPEN, path, fd);                                                                 \
        return fd;                                                                                 \
    }
OPEN_LIKE(kc_i_open, open)
OPEN_LIKE(kc_i_open64, open64)

/* A path relative to a directory other than the working one cannot be compared: incomplete. */
#define OPENAT_LIKE(cname, sym)                                                                    \
    EXPORT int cname(int dirfd, const char *path, int flags, ...) __asm__(#sym);                    \
    EXPORT int cname(int dirfd, const char *path, int flags, ...)                                  \
    {                                                                                              \
        OPEN_MODE(flags, flags)                                                                    \
        NEXT(int (*)(int, const char *, int, ...), fn, sym);                                       \
        int fd = fn(dirfd, path, flags, mode_);                                                    \
        if (dirfd != AT_FDCWD && path && path[0] != '/')                                           \
            saw_escape();                                                                          \
        saw_fd(OP_OPEN, path, fd);                                                                 \
        return fd;                                                                                 \
    }
OPENAT_LIKE(kc_i_openat, openat)
OPENAT_LIKE(kc_i_openat64, openat64)
#undef MISSING_RET

#define MISSING_RET NULL
#define FOPEN_LIKE(cname, sym)                                                                     \
    EXPORT FILE *cname(const char *path, const char *mode) __asm__(#sym);                           \
    EXPORT FILE *cname(const char *path, const char *mode)                                         \
    {                                                                                              \
        NEXT(FILE * (*)(const char *, const char *), fn, sym);                                     \
        FILE *f = fn(path, mode);                                                                  \
        saw_fd(OP_OPEN, path, f ? fileno(f) : -1);                                                 \
        return f;                                                                                  \
    }
FOPEN_LIKE(kc_i_fopen, fopen)
FOPEN_LIKE(kc_i_fopen64, fopen64)

EXPORT DIR *kc_i_opendir(const char *path) __asm__("opendir");
EXPORT DIR *kc_i_opendir(const char *path)
{
    NEXT(DIR * (*)(const char *), fn, opendir);
    DIR *d = fn(path);
    saw_stat(OP_PROBE, path, d ? 0 : -1, NULL);
    return d;
}

EXPORT char *kc_i_realpath(const char *path, char *resolved) __asm__("realpath");
EXPORT char *kc_i_realpath(const char *path, char *resolved)
{
    NEXT(char *(*)(const char *, char *), fn, realpath);
    char *r = fn(path, resolved);
    saw_stat(OP_PROBE, path, r ? 0 : -1, NULL);
    return r;
}
#undef MISSING_RET

#define MISSING_RET -1
/* The stat family: old (__xstat, what NVRTC 13.0 calls) and new. */
#define XSTAT_LIKE(cname, sym)                                                                     \
    EXPORT int cname(int ver, const char *path, struct stat *st) __asm__(#sym);                     \
    EXPORT int cname(int ver, const char *path, struct stat *st)                                   \
    {                                                                                              \
        NEXT(int (*)(int, const char *, struct stat *), fn, sym);                                  \
        int rc = fn(ver, path, st);                                                                \
        saw_stat(OP_STAT, path, rc, st);                                                           \
        return rc;                                                                                 \
    }
XSTAT_LIKE(kc_i_xstat, __xstat)
XSTAT_LIKE(kc_i_xstat64, __xstat64)
XSTAT_LIKE(kc_i_lxstat, __lxstat)
XSTAT_LIKE(kc_i_lxstat64, __lxstat64)

#define STAT_LIKE(cname, sym)                                                                      \
    EXPORT int cname(const char *path, struct stat *st) __asm__(#sym);                              \
    EXPORT int cname(const char *path, struct stat *st)                                            \
    {                                                                                              \
        NEXT(int (*)(const char *, struct stat *), fn, sym);                                       \
        int rc = fn(path, st);                                                                     \
        saw_stat(OP_STAT, path, rc, st);                                                           \
        return rc;                                                                                 \
    }
STAT_LIKE(kc_i_stat, stat)
STAT_LIKE(kc_i_stat64, stat64)
STAT_LIKE(kc_i_lstat, lstat)
STAT_LIKE(kc_i_lstat64, lstat64)

#define FSTATAT_LIKE(cname, sym)                                                                   \
    EXPORT int cname(int dirfd, const char *path, struct stat *st, int flags) __asm__(#sym);        \
    EXPORT int cname(int dirfd, const char *path, struct stat *st, int flags)                      \
    {                                                                                              \
        NEXT(int (*)(int, const char *, struct stat *, int), fn, sym);                             \
        int rc = fn(dirfd, path, st, flags);                                                       \
        if (fd_only(path, flags))                                                                  \
            ; /* the file an fd names, opened (and seen) before */                                 \
        else if (dirfd != AT_FDCWD && path && path[0] != '/')                                      \
            saw_escape();                                                                          \
        else if (path && *path)                                                                    \
            saw_stat(OP_STAT, path, rc, st);                                                       \
        return rc;                                                                                 \
    }
FSTATAT_LIKE(kc_i_fstatat, fstatat)
FSTATAT_LIKE(kc_i_fstatat64, fstatat64)

EXPORT int kc_i_statx(int dirfd, const char *path, int flags, unsigned mask, void *buf)
    __asm__("statx");
EXPORT int kc_i_statx(int dirfd, const char *path, int flags, unsigned mask, void *buf)
{
    NEXT(int (*)(int, const char *, int, unsigned, void *), fn, statx);
    int rc = fn(dirfd, path, flags, mask, buf);
    if (fd_only(path, flags))
        ; /* the file an fd names, opened (and seen) before */
    else if (dirfd != AT_FDCWD && path && path[0] != '/')
        saw_escape();
    else if (path && *path)
        saw_stat(OP_STAT, path, rc, NULL);
    return rc;
}

EXPORT int kc_i_access(const char *path, int how) __asm__("access");
EXPORT int kc_i_access(const char *path, int how)
{
    NEXT(int (*)(const char *, int), fn, access);
    int rc = fn(path, how);
    saw_stat(OP_PROBE, path, rc, NULL);
    return rc;
}

EXPORT int kc_i_faccessat(int dirfd, const char *path, int how, int flags) __asm__("faccessat");
EXPORT int kc_i_faccessat(int dirfd, const char *path, int how, int flags)
{
    NEXT(int (*)(int, const char *, int, int), fn, faccessat);
    int rc = fn(dirfd, path, how, flags);
    if (dirfd != AT_FDCWD && path && path[0] != '/')
        saw_escape();
    else
        saw_stat(OP_PROBE, path, rc, NULL);
    return rc;
}

EXPORT ssize_t kc_i_readlink(const char *path, char *buf, size_t size) __asm__("readlink");
EXPORT ssize_t kc_i_readlink(const char *path, char *buf, size_t size)
{
    NEXT(ssize_t(*)(const char *, char *, size_t), fn, readlink);
    ssize_t n = fn(path, buf, size);
    saw_stat(OP_PROBE, path, n < 0 ? -1 : 0, NULL);
    return n;
}

EXPORT int kc_i_statfs(const char *path, struct statfs *buf) __asm__("statfs");
EXPORT int kc_i_statfs(const char *path, struct statfs *buf)
{
    NEXT(int (*)(const char *, struct statfs *), fn, statfs);
    int rc = fn(path, buf);
    saw_stat(OP_PROBE, path, rc, NULL);
    return rc;
}

/*
 * Changes of directory by any thread: relative paths mean another folder
 * after one, on every thread, so a miss during which one happened (or
 * since its request was resolved) is not judged.
 */
static atomic_ulong dir_changes;

unsigned long kc_observe_dir_epoch(void)
{
    return atomic_load(&dir_changes);
}

/* Leaving the thread or the directory: what follows is not seen as the key's closure. */
EXPORT int kc_i_chdir(const char *path) __asm__("chdir");
EXPORT int kc_i_chdir(const char *path)
{
    NEXT(int (*)(const char *), fn, chdir);
    atomic_fetch_add(&dir_changes, 1);
    saw_escape();
    int rc = fn(path);
    atomic_fetch_add(&dir_changes, 1);
    return rc;
}

EXPORT int kc_i_fchdir(int fd) __asm__("fchdir");
EXPORT int kc_i_fchdir(int fd)
{
    NEXT(int (*)(int), fn, fchdir);
    atomic_fetch_add(&dir_changes, 1);
    saw_escape();
    int rc = fn(fd);
    atomic_fetch_add(&dir_changes, 1);
    return rc;
}

EXPORT pid_t kc_i_fork(void) __asm__("fork");
EXPORT pid_t kc_i_fork(void)
{
    NEXT(pid_t(*)(void), fn, fork);
    saw_escape();
    return fn();
}

EXPORT int kc_i_system(const char *command) __asm__("system");
EXPORT int kc_i_system(const char *command)
{
    NEXT(int (*)(const char *), fn, system);
    saw_escape();
    return fn(command);
}
#undef MISSING_RET

#define MISSING_RET EAGAIN
struct spawn {
    void *(*start)(void *);
    void *arg;
};

static void *spawned_main(void *p)
{
    struct spawn sp = *(struct spawn *)p;
    free(p);
    spawned = 1;
    return sp.start(sp.arg);
}

EXPORT int kc_i_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*start)(void *),
                               void *arg) __asm__("pthread_create");
EXPORT int kc_i_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*start)(void *),
                               void *arg)
{
    NEXT(int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *), fn,
         pthread_create);
    struct spawn *sp = cur || spawned ? malloc(sizeof(*sp)) : NULL;
    if (!sp) {
        if (cur || spawned)
            saw_escape(); /* unmarked: what it does could not be told */
        return fn(t, a, start, arg);
    }
    sp->start = start;
    sp->arg = arg;
    int rc = fn(t, a, spawned_main, sp);
    if (rc)
        free(sp);
    return rc;
}
#undef MISSING_RET

/* ---- the audit and the self-check ---------------------------------------------- */

/* Functions that reach the file system by a path and are interposed above. */
static const char *const watched[] = {
    "open", "open64", "openat", "openat64", "fopen", "fopen64", "opendir", "realpath",
    "__xstat", "__xstat64", "__lxstat", "__lxstat64", "stat", "stat64", "lstat", "lstat64",
    "fstatat", "fstatat64", "statx", "access", "faccessat", "readlink", "statfs", NULL,
};

/* Functions that do and are not: a library calling any of these cannot be observed here. */
static const char *const unwatched[] = {
    "freopen", "freopen64", "creat", "creat64", "openat2", "__open_2", "__open64_2",
    "__openat_2", "__openat64_2", "__fxstatat", "__fxstatat64", "eaccess", "euidaccess",
    "faccessat2", "readlinkat", "canonicalize_file_name", "scandir", "scandir64", "scandirat",
    "scandirat64", "nftw", "nftw64", "ftw", "ftw64", "glob", "glob64", "fts_open",
    "fts64_open", "name_to_handle_at", "open_by_handle_at", "statvfs", "statvfs64",
    "statfs64", "posix_spawn", "posix_spawnp", "popen", "vfork", "clone", "clone3",
    "execl", "execle", "execlp", "execvpe", "fexecve", "dlmopen", NULL,
};

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static int audited;                 /* 1 once the library's imports were read */
static const char *audit_problem;   /* R_UNOBSERVABLE, or NULL */
static unsigned char imported[sizeof(watched) / sizeof(*watched)];

static int in_list(const char *const *list, const char *name)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name))
            return i;
    return -1;
}

/* Dynamic-section addresses are relocated in place by glibc on most targets, not all. */
static const void *dyn_ptr(const struct link_map *lm, ElfW(Addr) v)
{
    return (const void *)(v < lm->l_addr ? v + lm->l_addr : v);
}

/* How many symbols a DT_GNU_HASH table covers: past the last chain of the fullest bucket. */
static size_t gnu_hash_count(const uint32_t *h)
{
    uint32_t nbuckets = h[0], symoffset = h[1], bloom = h[2];
    const uint32_t *buckets = h + 4 + bloom * (sizeof(ElfW(Addr)) / 4);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < nbuckets; i++)
        if (buckets[i] > last)
            last = buckets[i];
    if (last < symoffset)
        return symoffset;
    while (!(chain[last - symoffset] & 1))
        last++;
    return last + 1;
}

void kc_observe_audit(void *handle)
{
    struct link_map *lm = NULL;
    pthread_mutex_lock(&audit_lock);
    if (audited)
        goto out;
    audited = 1;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_ld) {
        audit_problem = R_UNOBSERVABLE;
        goto out;
    }
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    size_t n = 0;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB)
            syms = dyn_ptr(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB)
            strs = dyn_ptr(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_HASH)
            n = ((const uint32_t *)dyn_ptr(lm, d->d_un.d_ptr))[1];
        else if (d->d_tag == DT_GNU_HASH && !n)
            n = gnu_hash_count(dyn_ptr(lm, d->d_un.d_ptr));
    }
    if (!syms || !strs || !n) {
        audit_problem = R_UNOBSERVABLE;
        goto out;
    }
    for (size_t i = 1; i < n; i++) {
        if (syms[i].st_shndx != SHN_UNDEF || !syms[i].st_name)
            continue;
        const char *name = strs + syms[i].st_name;
        int w = in_list(watched, name);
        if (w >= 0)
            imported[w] = 1;
        else if (in_list(unwatched, name) >= 0)
            audit_problem = R_UNOBSERVABLE;
    }
out:
    pthread_mutex_unlock(&audit_lock);
}

#define SENTINEL "/nonexistent/kcache-observe-check"

/* Calls the function by name through the global scope, as NVRTC's calls are bound. */
static void call_through_scope(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p)
        return;
    struct stat st;
    char buf[PATH_MAX];
    if (!strcmp(name, "open") || !strcmp(name, "open64")) {
        int (*fn)(const char *, int, ...);
        memcpy(&fn, &p, sizeof(p));
        int fd = fn(SENTINEL, O_RDONLY);
        if (fd >= 0)
            close(fd);
    } else if (!strcmp(name, "openat") || !strcmp(name, "openat64")) {
        int (*fn)(int, const char *, int, ...);
        memcpy(&fn, &p, sizeof(p));
        int fd = fn(AT_FDCWD, SENTINEL, O_RDONLY);
        if (fd >= 0)
            close(fd);
    } else if (!strcmp(name, "fopen") || !strcmp(name, "fopen64")) {
        FILE *(*fn)(const char *, const char *);
        memcpy(&fn, &p, sizeof(p));
        FILE *f = fn(SENTINEL, "r");
        if (f)
            fclose(f);
    } else if (!strcmp(name, "opendir")) {
        DIR *(*fn)(const char *);
        memcpy(&fn, &p, sizeof(p));
        DIR *d = fn(SENTINEL);
        if (d)
            closedir(d);
    } else if (!strcmp(name, "realpath")) {
        char *(*fn)(const char *, char *);
        memcpy(&fn, &p, sizeof(p));
        fn(SENTINEL, buf);
    } else if (!strncmp(name, "__xstat", 7) || !strncmp(name, "__lxstat", 8)) {
        int (*fn)(int, const char *, struct stat *);
        memcpy(&fn, &p, sizeof(p));
        fn(1, SENTINEL, &st);
    } else if (!strcmp(name, "fstatat") || !strcmp(name, "fstatat64")) {
        int (*fn)(int, const char *, struct stat *, int);
        memcpy(&fn, &p, sizeof(p));
        fn(AT_FDCWD, SENTINEL, &st, 0);
    } else if (!strcmp(name, "statx")) {
        int (*fn)(int, const char *, int, unsigned, void *);
        memcpy(&fn, &p, sizeof(p));
        fn(AT_FDCWD, SENTINEL, 0, 0, buf);
    } else if (!strncmp(name, "stat", 4) && strcmp(name, "statfs") != 0) {
        int (*fn)(const char *, struct stat *);
        memcpy(&fn, &p, sizeof(p));
        fn(SENTINEL, &st);
    } else if (!strncmp(name, "lstat", 5)) {
        int (*fn)(const char *, struct stat *);
        memcpy(&fn, &p, sizeof(p));
        fn(SENTINEL, &st);
    } else if (!strcmp(name, "access")) {
        int (*fn)(const char *, int);
        memcpy(&fn, &p, sizeof(p));
        fn(SENTINEL, F_OK);
    } else if (!strcmp(name, "faccessat")) {
        int (*fn)(int, const char *, int, int);
        memcpy(&fn, &p, sizeof(p));
        fn(AT_FDCWD, SENTINEL, F_OK, 0);
    } else if (!strcmp(name, "readlink")) {
        ssize_t (*fn)(const char *, char *, size_t);
        memcpy(&fn, &p, sizeof(p));
        fn(SENTINEL, buf, sizeof(buf));
    } else if (!strcmp(name, "statfs")) {
        int (*fn)(const char *, struct statfs *);
        memcpy(&fn, &p, sizeof(p));
        struct statfs sf;
        fn(SENTINEL, &sf);
    }
}

static pthread_once_t check_once = PTHREAD_ONCE_INIT;
static const char *check_problem;

static void self_check(void)
{
    kc_obs o;
    memset(&o, 0, sizeof(o));
    char arena[8192];
    o.arena = arena;
    o.cap = sizeof(arena);
    for (int i = 0; watched[i] && !check_problem; i++) {
        if (!imported[i])
            continue;
        size_t before = o.used;
        cur = &o;
        call_through_scope(watched[i]);
        cur = NULL;
        if (o.used == before && !o.taint)
            check_problem = R_UNOBSERVABLE; /* NVRTC's calls to it pass this library by */
        o.used = 0;
    }
}

const char *kc_observe_begin(kc_obs **out, const char *cwd, unsigned long dir_epoch)
{
    *out = NULL;
    pthread_mutex_lock(&audit_lock);
    const char *problem = audited ? audit_problem : R_UNOBSERVABLE;
    pthread_mutex_unlock(&audit_lock);
    if (problem)
        return problem;
    pthread_once(&check_once, self_check);
    if (check_problem)
        return check_problem;
    kc_obs *o = calloc(1, sizeof(*o));
    if (!o)
        return R_INCOMPLETE;
    void *a = mmap(NULL, ARENA_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) {
        free(o);
        return R_INCOMPLETE;
    }
    o->arena = a;
    o->cap = ARENA_SIZE;
    o->mapped = 1;
    snprintf(o->cwd, sizeof(o->cwd), "%s", cwd);
    o->dir_epoch = dir_epoch;
    o->spawned_at = atomic_load(&spawned_calls);
    const char *pwd = getenv("PWD");
    snprintf(o->pwd, sizeof(o->pwd), "%s", pwd && *pwd ? pwd : cwd);
    cur = o;
    *out = o;
    return NULL;
}

void kc_observe_end(kc_obs *o)
{
    if (!o)
        return;
    cur = NULL;
    char now[PATH_MAX];
    if (kc_observe_dir_epoch() != o->dir_epoch || !getcwd(now, sizeof(now)) ||
        strcmp(now, o->cwd) != 0) {
        say_why("a change of directory during a miss");
        taint(o, R_INCOMPLETE);
    }
    if (atomic_load(&spawned_calls) != o->spawned_at) {
        say_why("a path call by a thread NVRTC started, during a miss");
        taint(o, R_INCOMPLETE);
    }
    if (o->mapped) {
        /* Kept only as long as the program's handle: the arena's pages go back now. */
        char *kept = malloc(o->used ? o->used : 1);
        if (kept)
            memcpy(kept, o->arena, o->used);
        else
            taint(o, R_INCOMPLETE), o->used = 0;
        munmap(o->arena, ARENA_SIZE);
        o->arena = kept;
        o->mapped = 0;
    }
}

void kc_observe_free(kc_obs *o)
{
    if (!o)
        return;
    if (o->mapped)
        munmap(o->arena, ARENA_SIZE);
    else
        free(o->arena);
    free(o->judged_closure);
    free(o);
}

/* ---- the verdict ------------------------------------------------------------------ */

/*
 * path as absolute (against cwd) with "." components and repeated slashes
 * folded; ".." is kept, since after a symbolic link it is not the lexical
 * parent. NULL if out of memory.
 */
static char *absolute(const char *cwd, const char *path)
{
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *joined = malloc(n), *out = malloc(n);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    snprintf(joined, n, "%s%s%s", path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/", path);
    size_t o = 0;
    for (const char *p = joined; *p;) {
        while (*p == '/')
            p++;
        size_t len = strcspn(p, "/");
        if (len == 0)
            break;
        if (!(len == 1 && p[0] == '.')) {
            out[o++] = '/';
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    free(joined);
    return out;
}

struct known {
    char *path;
    int found;
};

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct known *)a)->path, ((const struct known *)b)->path);
}

/* One record of the observation, its path made absolute. */
struct look {
    char *path;
    int op, seen;
};

static int by_look(const void *a, const void *b)
{
    const struct look *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : x->op != y->op ? x->op - y->op : x->seen - y->seen;
}

static int under(const char *path, const char *root)
{
    size_t n = strlen(root);
    return !strncmp(path, root, n) && (path[n] == '/' || path[n] == '\0');
}

/*
 * Whether abs is a folder above a file the closure found there: NVRTC stats
 * the folders of a header's path once it has opened the header (checked with
 * NVRTC 13 and CuPy's tree: cuda/std/version, then cuda/std and cuda). The
 * header is keyed; its folders exist as long as it does.
 */
static int above_found(const struct known *k, size_t n, const char *abs)
{
    size_t len = strlen(abs), lo = 0, hi = n;
    while (lo < hi) { /* the first path not before abs */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(k[mid].path, abs) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < n && !strncmp(k[i].path, abs, len); i++)
        if (k[i].path[len] == '/' && k[i].found)
            return 1;
    return 0;
}

/*
 * Real paths of folders, remembered for one verdict: a compile reads many
 * files of few folders, and sorted paths come folder by folder.
 */
struct dir_memo {
    char dir[8][PATH_MAX];
    int in[8];
    unsigned next;
};

/* 1 if the folder's real path is under root, 0 if not, -1 if it does not exist. */
static int dir_in(struct dir_memo *m, const char *dir, const char *root)
{
    for (unsigned i = 0; i < 8; i++)
        if (m->dir[i][0] && !strcmp(m->dir[i], dir))
            return m->in[i];
    char real[PATH_MAX];
    int in = realpath(*dir ? dir : "/", real) ? under(real, root) : -1;
    unsigned slot = m->next++ % 8;
    snprintf(m->dir[slot], sizeof(m->dir[slot]), "%s", dir);
    m->in[slot] = in;
    return in;
}

/*
 * A toolkit file or folder by its real path (after symbolic links and ".."),
 * or nothing inside one: the nearest existing folder above it is in the
 * toolkit. Both are keyed by the toolkit's build.
 */
static int in_toolkit(struct dir_memo *m, const char *abs, int seen, const char *root)
{
    if (!root || !*root)
        return 0;
    const char *slash = strrchr(abs, '/');
    const char *base = slash ? slash + 1 : abs;
    struct stat st;
    if (seen != SEEN_ABSENT && (lstat(abs, &st) != 0 || S_ISLNK(st.st_mode) ||
                                !strcmp(base, ".") || !strcmp(base, ".."))) {
        char real[PATH_MAX];
        return realpath(abs, real) && under(real, root);
    }
    /* Not a link itself: where its folder really is says where it is. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", abs);
    for (;;) {
        char *cut = strrchr(dir, '/');
        if (!cut)
            return 0;
        *cut = '\0';
        int in = dir_in(m, dir, root);
        if (in >= 0)
            return in;
    }
}

/* 1 if abs is one of the names NVRTC stats for itself (see kc_observe_verdict). */
static int own_name(const kc_obs *o, const char *abs, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *own = absolute(o->cwd, names[i]);
        int same = own && !strcmp(own, abs);
        free(own);
        if (same)
            return 1;
    }
    return 0;
}

/* Everything a verdict depends on besides the observation, as one string. NULL: no memory. */
static char *closure_text(size_t *size, const kcache_made *made, const char *source_name,
                          const char *const *header_names, size_t n_headers)
{
    const char *root = made->toolkit_root ? made->toolkit_root : "";
    size_t n = strlen(source_name) + strlen(root) + 2;
    for (size_t i = 0; i < n_headers; i++)
        n += strlen(header_names[i]) + 1;
    for (size_t i = 0; i < made->n_probes; i++)
        n += strlen(made->probes[i].path) + 2;
    char *t = malloc(n), *q = t;
    if (!t)
        return NULL;
#define PUT(s_)                                                                                    \
    do {                                                                                           \
        size_t l_ = strlen(s_) + 1;                                                                \
        memcpy(q, (s_), l_);                                                                       \
        q += l_;                                                                                   \
    } while (0)
    PUT(source_name);
    PUT(root);
    for (size_t i = 0; i < n_headers; i++)
        PUT(header_names[i]);
    for (size_t i = 0; i < made->n_probes; i++) {
        *q++ = made->probes[i].found ? '1' : '0';
        PUT(made->probes[i].path);
    }
#undef PUT
    *size = n;
    return t;
}

static const char *verdict(const kc_obs *o, const kcache_made *made, const char *source_name,
                           const char *const *header_names, size_t n_headers);

/* Whether an absolute path is the system's or NVRTC's own cache, never a header. */
static int system_path(const char *abs)
{
    static const char *const roots[] = {"/dev/", "/proc/", "/sys/"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(*roots); i++)
        if (!strncmp(abs, roots[i], strlen(roots[i])))
            return 1;
    char cache[PATH_MAX];
    const char *env = getenv("CUDA_CACHE_PATH"), *home = getenv("HOME");
    int n = env && *env ? snprintf(cache, sizeof(cache), "%s/", env)
            : home && *home ? snprintf(cache, sizeof(cache), "%s/.nv/ComputeCache/", home) : -1;
    return n > 0 && (size_t)n < sizeof(cache) && !strncmp(abs, cache, (size_t)n);
}

const char *kc_observe_verdict(kc_obs *o, const kcache_made *made, const char *source_name,
                               const char *const *header_names, size_t n_headers)
{
    if (!o)
        return R_INCOMPLETE;
    if (o->taint)
        return o->taint;
    size_t size = 0;
    char *text = closure_text(&size, made, source_name, header_names, n_headers);
    if (!text)
        return R_INCOMPLETE;
    if (o->judged_closure && o->judged_size == size && !memcmp(o->judged_closure, text, size)) {
        free(text);
        return o->judged;
    }
    free(o->judged_closure);
    o->judged_closure = text;
    o->judged_size = size;
    return o->judged = verdict(o, made, source_name, header_names, n_headers);
}

static const char *verdict(const kc_obs *o, const kcache_made *made, const char *source_name,
                           const char *const *header_names, size_t n_headers)
{
    const char *why = NULL;
    size_t n = made->n_probes, n_seen = 0;
    struct known *k = calloc(n + 1, sizeof(*k));
    struct look *saw = NULL;
    struct dir_memo *memo = calloc(1, sizeof(*memo));
    char *source = absolute(o->cwd, source_name);
    static const char *const nvrtc_names[] = {"__nv_nvrtc_builtin_header.h", "__nv_name_map"};
    const char *pwd = o->pwd;
    if (!k || !source || !memo) {
        why = R_INCOMPLETE;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(k[i].path = absolute(o->cwd, made->probes[i].path))) {
            why = R_INCOMPLETE;
            goto out;
        }
        k[i].found = made->probes[i].found;
    }
    qsort(k, n, sizeof(*k), by_path);
    /* Each path NVRTC looked at, once per way it looked and what it found. */
    for (size_t at = 0; at < o->used; n_seen++)
        at += ((size_t)(unsigned char)o->arena[at + 2] | (size_t)(unsigned char)o->arena[at + 3] << 8) + 5;
    if (!(saw = calloc(n_seen + 1, sizeof(*saw)))) {
        why = R_INCOMPLETE;
        goto out;
    }
    for (size_t at = 0, i = 0; i < n_seen; i++) {
        const char *r = o->arena + at;
        at += ((size_t)(unsigned char)r[2] | (size_t)(unsigned char)r[3] << 8) + 5;
        saw[i].op = r[0];
        saw[i].seen = r[1];
        if (!(saw[i].path = absolute(o->cwd, r + 4))) {
            why = R_INCOMPLETE;
            goto out;
        }
    }
    qsort(saw, n_seen, sizeof(*saw), by_look);
    for (size_t i = 0; i < n_seen && !why; i++) {
        if (i && !by_look(&saw[i - 1], &saw[i]))
            continue;
        int op = saw[i].op, seen = saw[i].seen;
        const char *abs = saw[i].path;
        struct known key = {saw[i].path, 0};
        const struct known *hit = n ? bsearch(&key, k, n, sizeof(*k), by_path) : NULL;
        if (hit) {
            /* The resolver keys what is not a regular file as nothing there. */
            if (hit->found != (seen == SEEN_FILE))
                why = R_CHANGED;
        } else if (op == OP_STAT &&
                   (!strcmp(abs, source) ||
                    (seen != SEEN_FILE && (under(source, abs) || !strcmp(abs, o->cwd) ||
                                           own_name(o, abs, &pwd, 1))) ||
                    own_name(o, abs, nvrtc_names, 2) ||
                    own_name(o, abs, header_names, n_headers))) {
            /* NVRTC's own: the program's name and the folders above it, the
             * working directory and $PWD (which names it when both are one), the names
             * of its builtin header and of its name-expression map, the names of
             * the headers handed over in memory; it stats them and never opens
             * them (test_sound.py shows a file there changes nothing). */
        } else if (op == OP_STAT && seen == SEEN_DIR && above_found(k, n, abs)) {
            /* A folder of a keyed header's path, which NVRTC stats after opening it. */
        } else if (system_path(abs)) {
            /* The system's, never a header: NVRTC probes the GPU's device nodes
             * (/dev/char/195:0 where a driver is loaded) and its own compute
             * cache (CUDA_CACHE_PATH, ~/.nv/ComputeCache), whose entries are
             * NVIDIA's bytes for NVIDIA's inputs. */
        } else if (!in_toolkit(memo, abs, seen, made->toolkit_root)) {
            why = R_UNPREDICTED;
            char what[PATH_MAX + 64];
            snprintf(what, sizeof(what), "%s %s, which the key does not cover",
                     op == OP_OPEN ? "an open of" : "a look at", abs);
            say_why(what);
        }
    }
out:
    for (size_t i = 0; saw && i < n_seen; i++)
        free(saw[i].path);
    free(saw);
    free(memo);
    for (size_t i = 0; k && i < n; i++)
        free(k[i].path);
    free(k);
    free(source);
    return why;
}
