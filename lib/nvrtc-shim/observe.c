/*
 * Over 700 lines: one short interposer per libc entry point NVRTC may read through,
 * sharing the record of what it read.
 *
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
 * the observed thread may open files), and the comparison (verdict.c) runs after
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

#include "nvrtc-shim/shimint.h"

#define EXPORT __attribute__((visibility("default")))

/* Virtual size of a miss's arena: only what is written is ever backed by memory. */
#define ARENA_SIZE (64u << 20)

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

/* ---- recording ------------------------------------------------------------ */

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
        kc_obs_say_why("a record made within a record (a signal handler) during a miss");
        taint(o, R_INCOMPLETE); /* a signal handler on this thread, mid-record */
        o->depth--;
        return;
    }
    size_t n = path ? strnlen(path, 65535) : 0;
    if (!path || n >= 65535 || o->cap - o->used < n + 5) {
        kc_obs_say_why(!path ? "a call with no path during a miss"
                             : "a record too long, or the records full");
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

/* The observation under way on this thread, or NULL; a spawned thread's call is counted. */
static kc_obs *observation(void)
{
    kc_obs *o = cur;
    if (!o && spawned)
        atomic_fetch_add(&spawned_calls, 1);
    return o;
}

static void saw_fd(int op, const char *path, int fd)
{
    kc_obs *o = observation();
    if (!o)
        return;
    int err = errno;
    struct stat st;
    int seen = fd < 0                             ? SEEN_ABSENT
               : syscall(SYS_fstat, fd, &st) == 0 ? seen_of(st.st_mode)
                                                  : SEEN_OTHER;
    record(o, op, path, seen);
    errno = err;
}

static void saw_stat(int op, const char *path, int rc, const struct stat *st)
{
    kc_obs *o = observation();
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
void kc_obs_say_why(const char *what)
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
    kc_obs *o = observation();
    if (o) {
        if (!o->taint) {
            char line[96];
            snprintf(line, sizeof(line), "%s during a miss", what);
            kc_obs_say_why(line);
        }
        taint(o, R_INCOMPLETE);
    }
}
#define saw_escape() saw_escape_in(__func__)

/* ---- the interposers -------------------------------------------------------- */

/* Every function defined below, by name. */
#define KC_INTERPOSED(X)                                                                           \
    X(open)                                                                                        \
    X(open64) X(openat) X(openat64) X(fopen) X(fopen64) X(opendir) X(realpath) X(__xstat)          \
        X(__xstat64) X(__lxstat) X(__lxstat64) X(stat) X(stat64) X(lstat) X(lstat64) X(fstatat)    \
            X(fstatat64) X(statx) X(access) X(faccessat) X(readlink) X(statfs) X(chdir) X(fchdir)  \
                X(fork) X(system) X(pthread_create)
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
    if (((flags)&O_CREAT) || ((flags)&O_TMPFILE) == O_TMPFILE) {                                   \
        va_list ap_;                                                                               \
        va_start(ap_, last);                                                                       \
        mode_ = va_arg(ap_, unsigned);                                                             \
        va_end(ap_);                                                                               \
    }

#define MISSING_RET -1
#define OPEN_LIKE(cname, sym)                                                                      \
    EXPORT int cname(const char *path, int flags, ...) __asm__(#sym);                              \
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
    EXPORT int cname(int dirfd, const char *path, int flags, ...) __asm__(#sym);                   \
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
    EXPORT FILE *cname(const char *path, const char *mode) __asm__(#sym);                          \
    EXPORT FILE *cname(const char *path, const char *mode)                                         \
    {                                                                                              \
        NEXT(FILE *(*)(const char *, const char *), fn, sym);                                      \
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
/*
 * The stat family: old (__xstat, what NVRTC 13.0 calls, with a version
 * first) and new. params and args are the entry point's, types the same
 * without their names.
 */
#define STAT_LIKE(cname, sym, params, types, args)                                                 \
    EXPORT int cname params __asm__(#sym);                                                         \
    EXPORT int cname params                                                                        \
    {                                                                                              \
        NEXT(int(*) types, fn, sym);                                                               \
        int rc = fn args;                                                                          \
        saw_stat(OP_STAT, path, rc, st);                                                           \
        return rc;                                                                                 \
    }
#define XSTAT_LIKE(cname, sym)                                                                     \
    STAT_LIKE(cname, sym, (int ver, const char *path, struct stat *st),                            \
              (int, const char *, struct stat *), (ver, path, st))
XSTAT_LIKE(kc_i_xstat, __xstat)
XSTAT_LIKE(kc_i_xstat64, __xstat64)
XSTAT_LIKE(kc_i_lxstat, __lxstat)
XSTAT_LIKE(kc_i_lxstat64, __lxstat64)
#define PLAIN_STAT_LIKE(cname, sym)                                                                \
    STAT_LIKE(cname, sym, (const char *path, struct stat *st), (const char *, struct stat *),     \
              (path, st))
PLAIN_STAT_LIKE(kc_i_stat, stat)
PLAIN_STAT_LIKE(kc_i_stat64, stat64)
PLAIN_STAT_LIKE(kc_i_lstat, lstat)
PLAIN_STAT_LIKE(kc_i_lstat64, lstat64)

#define FSTATAT_LIKE(cname, sym)                                                                   \
    EXPORT int cname(int dirfd, const char *path, struct stat *st, int flags) __asm__(#sym);       \
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

EXPORT int kc_i_statx(int dirfd, const char *path, int flags, unsigned mask,
                      void *buf) __asm__("statx");
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
    "open",    "open64",   "openat",    "openat64",  "fopen",    "fopen64",
    "opendir", "realpath", "__xstat",   "__xstat64", "__lxstat", "__lxstat64",
    "stat",    "stat64",   "lstat",     "lstat64",   "fstatat",  "fstatat64",
    "statx",   "access",   "faccessat", "readlink",  "statfs",   NULL,
};

/* Functions that do and are not: a library calling any of these cannot be observed here. */
static const char *const unwatched[] = {
    "freopen",
    "freopen64",
    "creat",
    "creat64",
    "openat2",
    "__open_2",
    "__open64_2",
    "__openat_2",
    "__openat64_2",
    "__fxstatat",
    "__fxstatat64",
    "eaccess",
    "euidaccess",
    "faccessat2",
    "readlinkat",
    "canonicalize_file_name",
    "scandir",
    "scandir64",
    "scandirat",
    "scandirat64",
    "nftw",
    "nftw64",
    "ftw",
    "ftw64",
    "glob",
    "glob64",
    "fts_open",
    "fts64_open",
    "name_to_handle_at",
    "open_by_handle_at",
    "statvfs",
    "statvfs64",
    "statfs64",
    "posix_spawn",
    "posix_spawnp",
    "popen",
    "vfork",
    "clone",
    "clone3",
    "execl",
    "execle",
    "execlp",
    "execvpe",
    "fexecve",
    "dlmopen",
    NULL,
};

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static int audited;               /* 1 once the library's imports were read */
static const char *audit_problem; /* R_UNOBSERVABLE, or NULL */
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
        kc_obs_say_why("a change of directory during a miss");
        taint(o, R_INCOMPLETE);
    }
    if (atomic_load(&spawned_calls) != o->spawned_at) {
        kc_obs_say_why("a path call by a thread NVRTC started, during a miss");
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
