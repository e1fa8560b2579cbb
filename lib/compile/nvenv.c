/*
 * The environment variables NVIDIA's NVRTC reads, in the key.
 *
 * NVRTC asks getenv for about twenty names (NVRTC 13.0: LLVM_OVERRIDE_PRODUCER,
 * NVVM_IR_VER_CHK, NVRTC_APPEND_FLAGS, CUDA_CACHE_DISABLE, ...), and some
 * change its bytes: LLVM_OVERRIDE_PRODUCER is written into LTO-IR. So the
 * key holds the value of every name NVRTC reads that is set. Which names is
 * observed, never a list written by hand:
 *
 *   - Most are read once, by NVRTC's constructors while it loads, before any
 *     hook on its imports could be placed; the rest while it compiles. So
 *     the set of a build is learnt by a probe in a child process (fork): the
 *     child sends glibc's getenv (its own copy of the page) to a recorder
 *     that answers "not set", then loads NVRTC and compiles a small kernel
 *     to a CUBIN for every architecture it lists (what it reads depends on
 *     the target), and to PTX, LTO-IR and with line information.
 *     An empty environment makes the probe the same for everyone: the set
 *     depends on the build alone. A fork without exec is safe only where
 *     no other thread holds a lock the child needs (glibc's malloc is
 *     fork-safe; GCC 12's ASan allocator is not, and a thread inside
 *     dlopen holds the loader's lock): a child stuck so is killed once its
 *     CPU time has not moved for 30 s, and that compile runs uncached
 *     (nvrtc_environment_unknown). The limit is on progress, not on the
 *     wall clock: a probe takes about 2 s of CPU, and 32 processes at once
 *     on 2 cores made a wall-clock limit of 30 s kill live probes. A
 *     platform where the entry cannot be patched (not x86-64 or AArch64,
 *     or a text page that may not be written) has no set: every compile
 *     runs uncached, and says why.
 *   - The set is remembered per build (the identity the key gives NVRTC),
 *     in the store beside the remembered include closures, which never leave
 *     the machine and are no entry (recall()), so the probe runs once per
 *     build and cache, not on a hit. The processes of one cache probe one
 *     at a time (probe_lock()), and the ones that waited find the record.
 *   - The probe's kernels cannot take every path: a compile could read a name
 *     the probe never saw. So every NVRTC kcache loads has its getenv import
 *     (the GOT slot) pointed at a watcher that notes each name asked, and a
 *     compile that asked for a name outside the set is returned, not stored.
 *     The drop-in's misses are compiled by the same loaded library, and
 *     watched alike. Sound whatever the probe misses; a miss costs time.
 *
 * Values: a set value is keyed as NAME=VALUE. Left out, with evidence: PWD,
 * which NVRTC writes into line information and LTO-IR only, where the key
 * holds the working directory already (compile.c, line_info_workdir; the
 * drop-in's extra digest); bytes without line information are the same
 * for any PWD (measured: -arch=sm_90 CUBIN, PWD=/tmp and PWD=/nonexist,
 * one digest). Not judged, so the compile runs uncached while one is set:
 * a value that holds a '/' (a file or folder NVRTC would read or write, whose
 * contents no key covers), and NVRTC_APPEND_FLAGS (options NVRTC adds, which
 * kcache's include resolver never sees).
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compile/nvenv.h"
#include "store/storelib.h"
#include "util/codec.h"

extern char **environ;

#if !defined(__LP64__)
#error "nvenv.c reads 64-bit ELF relocations"
#endif

#define NVENV_FORMAT "kcache nvrtc getenv 2\n"
#define MAX_NAME 128
#define MAX_NAMES 128
#define PROBE_STALL_MS 30000    /* a child whose CPU time stood still this long is stuck */
#define PROBE_LIMIT_MS 600000   /* and none runs longer, busy or not */
#define PROBE_CHILDREN 4        /* children sharing the targets, at most */
#define PROBE_WAIT_MS 660000    /* for another process's probe of the same cache */

/* Names NVRTC reads whose values are not keyed: see above for the evidence. */
static int left_out(const char *name)
{
    return !strcmp(name, "PWD");
}

/* ---- the names of a build ------------------------------------------------------- */

struct build {
    char id[96];
    char **names; /* sorted */
    size_t n;
    char why[256]; /* "" when names is the set, else why there is none */
};

static pthread_mutex_t builds_lock = PTHREAD_MUTEX_INITIALIZER;
static struct build builds[4];
static unsigned n_builds;

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n >= MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '=' || s[i] == '\n' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* Lines of text as a sorted set of names into b. 0, -1 (a line that is no name), or KCACHE_ENOMEM. */
static int parse_names(struct build *b, const char *text, size_t size)
{
    for (size_t at = 0; at < size;) {
        const char *nl = memchr(text + at, '\n', size - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : size - at;
        if (!valid_name(text + at, n))
            return -1;
        char name[MAX_NAME];
        memcpy(name, text + at, n);
        name[n] = '\0';
        int dup = 0;
        for (size_t i = 0; i < b->n && !dup; i++)
            dup = !strcmp(b->names[i], name);
        if (!dup && kc_strv_push(&b->names, &b->n, name))
            return KCACHE_ENOMEM;
        at += n + 1;
    }
    if (b->n)
        qsort(b->names, b->n, sizeof(*b->names), by_str);
    return 0;
}

/* ---- the probe (a child process) ------------------------------------------------ */

static int probe_fd = -1;

/* glibc's getenv in the probe: notes the name and answers "not set". */
static char *probe_getenv(const char *name)
{
    char line[MAX_NAME + 1];
    size_t n = name ? strnlen(name, MAX_NAME) : 0;
    if (n > 0 && n < MAX_NAME) {
        memcpy(line, name, n);
        line[n] = '\n';
        ssize_t w = write(probe_fd, line, n + 1);
        (void)w;
    }
    return NULL;
}

/* Makes fn's entry jump to to: in the probe only, whose pages are its own. 0 or -1. */
static int redirect(void *fn, void *to)
{
#if defined(__x86_64__)
    unsigned char code[12] = {0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xe0}; /* movabs rax; jmp rax */
    memcpy(code + 2, &to, 8);
#elif defined(__aarch64__)
    unsigned char code[16];
    const uint32_t ldr = 0x58000050, br = 0xd61f0200; /* ldr x16, 8; br x16 */
    memcpy(code, &ldr, 4);
    memcpy(code + 4, &br, 4);
    memcpy(code + 8, &to, 8);
#else
    unsigned char code[1];
    (void)fn, (void)to, (void)code;
    return -1;
#endif
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), at = (uintptr_t)fn;
    uintptr_t start = at & ~(page - 1), end = at + sizeof(code);
    if (mprotect((void *)start, end - start, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    memcpy(fn, code, sizeof(code));
    __builtin___clear_cache((char *)fn, (char *)fn + sizeof(code));
    return 0;
}

typedef nvrtcResult (*create_fn)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
typedef nvrtcResult (*compile_fn)(nvrtcProgram, int, const char *const *);
typedef nvrtcResult (*destroy_fn)(nvrtcProgram *);
typedef nvrtcResult (*n_archs_fn)(int *);
typedef nvrtcResult (*archs_fn)(int *);

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p)
        _exit(5);
    return p;
}

/* The child that compiles for every share-th target from the one-th: never returns. */
static void probe_child(const char *path, int fd, int one, int share)
{
    static const char src[] = "extern \"C\" __global__ void kc_probe(int *v) { v[threadIdx.x] = 1; }\n";
    char *(*rec)(const char *) = probe_getenv;
    void *to, *getenv_fn = dlsym(RTLD_DEFAULT, "getenv");
    memcpy(&to, &rec, sizeof(to));
    probe_fd = fd;
    if (!getenv_fn || redirect(getenv_fn, to) != 0)
        _exit(3);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        _exit(4);
    create_fn create;
    compile_fn compile;
    destroy_fn destroy;
    n_archs_fn n_archs;
    archs_fn archs;
    void *p;
#define LOAD(var, name) (p = sym(h, name), memcpy(&var, &p, sizeof(p)))
    LOAD(create, "nvrtcCreateProgram");
    LOAD(compile, "nvrtcCompileProgram");
    LOAD(destroy, "nvrtcDestroyProgram");
    LOAD(n_archs, "nvrtcGetNumSupportedArchs");
    LOAD(archs, "nvrtcGetSupportedArchs");
#undef LOAD
    int n = 0, list[256];
    if (n_archs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256 || archs(list) != NVRTC_SUCCESS)
        _exit(6);
    /* What NVRTC reads depends on the target (CAN_FINALIZE_DEBUG: sm_90, not sm_75):
     * a CUBIN for each, PTX, LTO-IR and line information for the first and last. */
    for (int i = one; i < n; i += share) {
        char virt[32], real[32];
        snprintf(virt, sizeof(virt), "-arch=compute_%d", list[i]);
        snprintf(real, sizeof(real), "-arch=sm_%d", list[i]);
        /* With --no-cache, as kcache compiles (compile/nvrtc.c): NVRTC's own
         * cache reads HOME where a driver is loaded (seen on an H200), and a
         * name only that cache reads would make every compile uncached. A
         * compile that lets NVRTC's cache run is watched like any other. */
        const char *const sets[][3] = {
            {real, "--no-cache", NULL},          {virt, "--no-cache", NULL},
            {real, "-dlto", "--no-cache"},       {real, "-lineinfo", "--no-cache"},
            {real, "-G", "--no-cache"},
        };
        size_t n_sets = i == 0 || i == n - 1 ? sizeof(sets) / sizeof(*sets) : 1;
        for (size_t k = 0; k < n_sets; k++) {
            nvrtcProgram prog;
            int n_opts = sets[k][2] ? 3 : 2;
            if (create(&prog, src, "kc_probe.cu", 0, NULL, NULL) != NVRTC_SUCCESS ||
                compile(prog, n_opts, sets[k]) != NVRTC_SUCCESS)
                _exit(7);
            destroy(&prog);
        }
    }
    _exit(0);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CPU time a process has used, in ms; -1 when it cannot be read (then it never moves). */
static int64_t cpu_ms(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the probe for NVRTC at path: b's names, or b->why. 0 or KCACHE_ENOMEM. */
/*
 * How many children share the probe's targets: its ~20 compiles take ~0.9 s
 * on an H200 in one child, all of it in the first compile of a fresh cache.
 * Each child writes whole lines (a name is far under PIPE_BUF) to one pipe.
 */
static int probe_children(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > PROBE_CHILDREN ? PROBE_CHILDREN : n;
}

/*
 * Reaps the n children (killed first if kill_them). *status: the first
 * failed child's, else 0. Returns 1, with *lost_errno, if one was lost.
 */
static int reap(const pid_t *pids, int n, int kill_them, int *status, int *lost_errno)
{
    int lost = 0;
    for (int k = 0; k < n; k++) {
        int st = 0;
        pid_t got;
        if (kill_them)
            kill(pids[k], SIGKILL);
        while ((got = waitpid(pids[k], &st, 0)) < 0 && errno == EINTR)
            ;
        int failed_before = lost || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0;
        if (got != pids[k] && !failed_before) {
            lost = 1;
            *lost_errno = errno;
        } else if (!failed_before && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
            *status = st;
        }
    }
    return lost;
}

static int probe(struct build *b, const char *path)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(b->why, sizeof(b->why), "cannot run the probe of NVRTC's environment: %s",
                 strerror(errno));
        return 0;
    }
    pid_t pids[PROBE_CHILDREN];
    clockid_t clocks[PROBE_CHILDREN];
    int share = probe_children(), started = 0, fork_errno = 0;
    for (; started < share; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            probe_child(path, fds[1], started, share);
        }
        if (pid < 0) {
            fork_errno = errno;
            break;
        }
        pids[started] = pid;
    }
    close(fds[1]);
    if (started < share) {
        close(fds[0]);
        for (int k = 0; k < started; k++) {
            kill(pids[k], SIGKILL);
            while (waitpid(pids[k], NULL, 0) < 0 && errno == EINTR)
                ;
        }
        snprintf(b->why, sizeof(b->why), "cannot run the probe of NVRTC's environment: %s",
                 strerror(fork_errno));
        return 0;
    }
    kc_buf out = {0};
    int rc = 0, timed_out = 0;
    int have_cpu = 1;
    for (int k = 0; k < share; k++)
        have_cpu = have_cpu && clock_getcpuclockid(pids[k], &clocks[k]) == 0;
    int64_t start = now_ms(), moved = start, cpu = -1;
    for (;;) {
        struct pollfd pf = {fds[0], POLLIN, 0};
        int64_t t = now_ms(), c = have_cpu ? 0 : -1;
        for (int k = 0; k < share && have_cpu; k++) {
            int64_t ck = cpu_ms(clocks[k]);
            c += ck > 0 ? ck : 0; /* one that has exited may read -1 */
        }
        if (c != cpu)
            moved = t; /* a first reading counts as progress */
        cpu = c;
        if (t - moved >= PROBE_STALL_MS || t - start >= PROBE_LIMIT_MS) {
            timed_out = 1;
            break;
        }
        int ready = poll(&pf, 1, 1000);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            break;
        if (ready == 0)
            continue;
        char chunk[4096];
        ssize_t got = read(fds[0], chunk, sizeof(chunk));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (out.size + (size_t)got > 65536 || kc_buf_append(&out, chunk, (size_t)got)) {
            rc = out.size + (size_t)got > 65536 ? 0 : KCACHE_ENOMEM;
            snprintf(b->why, sizeof(b->why), "NVRTC asked for more names than the probe keeps");
            break;
        }
    }
    close(fds[0]);
    int status = 0, lost_errno = 0;
    int lost = reap(pids, share, timed_out, &status, &lost_errno);
    int failed = lost || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!b->why[0] && (timed_out || failed))
        snprintf(b->why, sizeof(b->why),
                 "the probe of NVRTC's environment failed (%s %d): which variables it reads "
                 "is not known",
                 timed_out ? "stuck, killed after" : lost ? "lost, errno" :
                 WIFEXITED(status) ? "exit" : "signal",
                 timed_out ? (int)((now_ms() - start) / 1000) : lost ? lost_errno :
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    if (!rc && !b->why[0]) {
        rc = parse_names(b, (const char *)out.data, out.size);
        if (rc < 0) {
            rc = 0;
            snprintf(b->why, sizeof(b->why), "NVRTC asked getenv for a name kcache cannot key");
        }
    }
    kc_buf_free(&out);
    return rc;
}

/* ---- remembered per build --------------------------------------------------- */

/*
 * Where a build's names are kept: a row of the store's closures (manifests)
 * under a key of the build's identity. Closures stay on this machine (export
 * and import carry entries only), are no entry (stats and verify count
 * compiles), and go with `kcache clear`.
 */
static void record_key(kcache_key *key, const kc_toolkit *tk)
{
    char text[160];
    int n = snprintf(text, sizeof(text), "%s%s", NVENV_FORMAT, tk->nvrtc_id);
    kc_digest(key->bytes, text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
}

/* b's names from the store's record: 1, 0 (none, or unreadable), or KCACHE_ENOMEM. */
static int recall(struct build *b, const kc_toolkit *tk, kcache_store *store)
{
    kcache_key key;
    kc_manifest_row *rows = NULL;
    size_t n = 0, f = strlen(NVENV_FORMAT);
    record_key(&key, tk);
    if (!store || kc_store_manifest_get(&rows, &n, store, &key) != 0)
        return 0;
    int rc = 0;
    if (n && rows[0].size >= f && !memcmp(rows[0].closure, NVENV_FORMAT, f)) {
        rc = parse_names(b, (const char *)rows[0].closure + f, rows[0].size - f);
        rc = rc == KCACHE_ENOMEM ? rc : rc == 0;
    }
    kc_manifest_rows_free(rows, n);
    if (rc != 1) {
        kc_strv_free(b->names, b->n);
        b->names = NULL;
        b->n = 0;
    }
    return rc;
}

static void remember(const struct build *b, const kc_toolkit *tk, kcache_store *store)
{
    kcache_key key;
    kc_buf text = {0};
    record_key(&key, tk);
    int failed = kc_buf_append(&text, NVENV_FORMAT, strlen(NVENV_FORMAT));
    for (size_t i = 0; i < b->n && !failed; i++)
        failed = kc_buf_append(&text, b->names[i], strlen(b->names[i])) ||
                 kc_buf_append(&text, "\n", 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!failed && store) /* best effort: without it, the next process probes again */
        kc_store_manifest_put(store, &key, &key, (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec,
                              text.data, text.size);
    kc_buf_free(&text);
}

/*
 * Makes the processes of one cache probe one at a time, so that the ranks of
 * a node starting together probe once, not each (on 2 cores, 4 probes at
 * once take 4 times as long). The lock is an open file description lock on
 * byte KC_PROBE_LOCK_BYTE of the store's -lock file, beside db/alone.c's
 * locks on other bytes of it: it goes with its holder, killed or not.
 * Returns the descriptor to close, or -1 (no such file, or waited for
 * longer than any probe runs): then this process probes by itself.
 */
#define KC_PROBE_LOCK_BYTE 4

static int probe_lock(kcache_store *store)
{
    const char *db = store ? kcache_store_path(store) : NULL;
    char path[4200];
    if (!db || (size_t)snprintf(path, sizeof(path), "%s-lock", db) >= sizeof(path))
        return -1;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = KC_PROBE_LOCK_BYTE,
                       .l_len = 1};
    int64_t deadline = now_ms() + PROBE_WAIT_MS;
    while (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if ((errno != EAGAIN && errno != EACCES && errno != EINTR) || now_ms() >= deadline) {
            close(fd);
            return -1;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return fd;
}

/* The names tk's build reads, once per process. Called under builds_lock. */
static int build_of(const struct build **out, const kc_toolkit *tk, kcache_store *store)
{
    for (unsigned i = 0; i < n_builds; i++)
        if (!strcmp(builds[i].id, tk->nvrtc_id)) {
            *out = &builds[i];
            return 0;
        }
    struct build *b = &builds[n_builds < 4 ? n_builds : 3];
    if (n_builds == 4)
        kc_strv_free(b->names, b->n);
    memset(b, 0, sizeof(*b));
    snprintf(b->id, sizeof(b->id), "%s", tk->nvrtc_id);
    int rc = recall(b, tk, store);
    if (rc == 0) {
        int fd = probe_lock(store);
        if (fd >= 0)
            rc = recall(b, tk, store); /* probed by the process that held the lock */
        if (rc == 0) {
            rc = probe(b, tk->nvrtc_path);
            if (!rc && !b->why[0])
                remember(b, tk, store);
        }
        if (fd >= 0)
            close(fd);
    }
    if (rc == 1)
        rc = 0;
    if (rc) {
        kc_strv_free(b->names, b->n);
        memset(b, 0, sizeof(*b)); /* an empty slot: no identity matches it */
        return rc;
    }
    if (n_builds < 4)
        n_builds++;
    *out = b;
    return 0;
}

/*
 * The environment when NVRTC loaded in this process (kc_nvenv_watch): its
 * constructors read most names then, and keep what they read.
 */
static char **load_env;
static size_t n_load_env;
static int have_load_env;

/* The value name had when NVRTC loaded, or NULL. Called under builds_lock. */
static const char *at_load(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < n_load_env; i++)
        if (!strncmp(load_env[i], name, n) && load_env[i][n] == '=')
            return load_env[i] + n + 1;
    return NULL;
}

static int known(const struct build *b, const char *name)
{
    const char *key = name;
    return b->n && bsearch(&key, b->names, b->n, sizeof(*b->names), by_str) != NULL;
}

int kc_nvenv_get(kc_nvenv *out, const kc_toolkit *tk, kcache_store *store)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&builds_lock);
    const struct build *b = NULL;
    int rc = build_of(&b, tk, store);
    if (rc)
        goto out;
    if (b->why[0]) {
        snprintf(out->reason, sizeof(out->reason), "nvrtc_environment_unknown");
        snprintf(out->problem, sizeof(out->problem), "%s", b->why);
        goto out;
    }
    for (size_t i = 0; i < b->n && !rc; i++) {
        const char *v = getenv(b->names[i]);
        const char *then = have_load_env ? at_load(b->names[i]) : v;
        if (left_out(b->names[i]))
            continue;
        if (!out->reason[0] && (!v != !then || (v && strcmp(v, then) != 0))) {
            snprintf(out->reason, sizeof(out->reason), "nvrtc_environment_changed");
            snprintf(out->problem, sizeof(out->problem),
                     "%s changed since NVRTC loaded in this process, and NVRTC keeps what it "
                     "read then", b->names[i]);
        }
        if (!v)
            continue;
        if (!out->reason[0] && (strchr(v, '/') || !strcmp(b->names[i], "NVRTC_APPEND_FLAGS"))) {
            snprintf(out->reason, sizeof(out->reason), "nvrtc_environment");
            snprintf(out->problem, sizeof(out->problem),
                     "%s is set, and NVRTC %s", b->names[i],
                     strchr(v, '/') ? "reads or writes the file it names, which no key covers"
                                    : "adds its options, which kcache does not resolve");
        }
        size_t n = strlen(b->names[i]) + strlen(v) + 2;
        char *s = malloc(n);
        if (!s) {
            rc = KCACHE_ENOMEM;
            break;
        }
        snprintf(s, n, "%s=%s", b->names[i], v);
        rc = kc_strv_push(&out->set, &out->n_set, s);
        free(s);
    }
out:
    pthread_mutex_unlock(&builds_lock);
    if (rc)
        kc_nvenv_free(out);
    return rc;
}

void kc_nvenv_free(kc_nvenv *e)
{
    kc_strv_free(e->set, e->n_set);
    e->set = NULL;
    e->n_set = 0;
}

/* ---- the watcher on a loaded NVRTC's getenv ------------------------------------- */

static _Atomic(void *) next_getenv;
static pthread_mutex_t asked_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[MAX_NAME];
    unsigned long seq;
} asked[MAX_NAMES];
static size_t n_asked;
static unsigned long asked_seq, lost_seq; /* lost: a name too long, or the table full */
static int watch_failed;

static char *watched_getenv(const char *name)
{
    char *(*fn)(const char *);
    void *p = atomic_load(&next_getenv);
    memcpy(&fn, &p, sizeof(p));
    if (name) {
        size_t n = strnlen(name, MAX_NAME);
        pthread_mutex_lock(&asked_lock);
        size_t i = 0;
        while (i < n_asked && strcmp(asked[i].name, name) != 0)
            i++;
        if (n >= MAX_NAME || (i == n_asked && n_asked == MAX_NAMES)) {
            lost_seq = ++asked_seq;
        } else {
            if (i == n_asked)
                memcpy(asked[n_asked++].name, name, n + 1);
            asked[i].seq = ++asked_seq;
        }
        pthread_mutex_unlock(&asked_lock);
    }
    return fn(name);
}

static const void *dyn_at(const struct link_map *lm, ElfW(Addr) v)
{
    return (const void *)(v < lm->l_addr ? v + lm->l_addr : v);
}

/* Points one slot at the watcher: in a RELRO page, made writable for the write only. */
static int point_slot(void **slot, void *to)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), at = (uintptr_t)slot;
    void *start = (void *)(at & ~(page - 1));
    if (mprotect(start, page, PROT_READ | PROT_WRITE) != 0)
        return -1;
    atomic_store((_Atomic(void *) *)slot, to);
    return 0;
}

#if defined(__x86_64__)
#define SLOT_RELOC(t) ((t) == R_X86_64_JUMP_SLOT || (t) == R_X86_64_GLOB_DAT)
#elif defined(__aarch64__)
#define SLOT_RELOC(t) ((t) == R_AARCH64_JUMP_SLOT || (t) == R_AARCH64_GLOB_DAT)
#else
#define SLOT_RELOC(t) 0
#endif

/* Every relocation of a table that names getenv: pointed at the watcher. -1 if one cannot be. */
static int watch_table(const struct link_map *lm, const ElfW(Rela) *rel, size_t n,
                       const ElfW(Sym) *syms, const char *strs, void *to)
{
    for (size_t i = 0; i < n; i++) {
        const char *name = strs + syms[ELF64_R_SYM(rel[i].r_info)].st_name;
        if (!ELF64_R_SYM(rel[i].r_info))
            continue;
        if (!strcmp(name, "secure_getenv") || !strcmp(name, "__libc_secure_getenv") ||
            !strcmp(name, "environ") || !strcmp(name, "__environ"))
            return -1; /* another way to the environment, not watched */
        if (strcmp(name, "getenv") != 0)
            continue;
        if (!SLOT_RELOC(ELF64_R_TYPE(rel[i].r_info)) ||
            point_slot((void **)(lm->l_addr + rel[i].r_offset), to) != 0)
            return -1;
    }
    return 0;
}

void kc_nvenv_watch(void *handle)
{
    struct link_map *lm = NULL;
    const ElfW(Rela) *plt = NULL, *rela = NULL;
    size_t plt_size = 0, rela_size = 0;
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    char *(*w)(const char *) = watched_getenv;
    void *to, *next = dlsym(RTLD_DEFAULT, "getenv");
    memcpy(&to, &w, sizeof(to));
    pthread_mutex_lock(&builds_lock);
    for (char **e = environ; !have_load_env && e && *e; e++)
        if (kc_strv_push(&load_env, &n_load_env, *e))
            break; /* out of memory: every compile is judged changed, so uncached */
    have_load_env = 1;
    pthread_mutex_unlock(&builds_lock);
    if (!next || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_ld)
        goto failed;
    atomic_store(&next_getenv, next);
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_JMPREL)
            plt = dyn_at(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_PLTRELSZ)
            plt_size = d->d_un.d_val;
        else if (d->d_tag == DT_RELA)
            rela = dyn_at(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_RELASZ)
            rela_size = d->d_un.d_val;
        else if (d->d_tag == DT_SYMTAB)
            syms = dyn_at(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB)
            strs = dyn_at(lm, d->d_un.d_ptr);
        else if (d->d_tag == DT_PLTREL && d->d_un.d_val != DT_RELA)
            goto failed;
        else if (d->d_tag == DT_REL)
            goto failed; /* REL tables: not on the targets kcache builds for */
    }
    if (!syms || !strs ||
        (plt && watch_table(lm, plt, plt_size / sizeof(*plt), syms, strs, to) != 0) ||
        (rela && watch_table(lm, rela, rela_size / sizeof(*rela), syms, strs, to) != 0))
        goto failed;
    return;
failed:
    pthread_mutex_lock(&asked_lock);
    watch_failed = 1;
    pthread_mutex_unlock(&asked_lock);
}

unsigned long kc_nvenv_mark(void)
{
    pthread_mutex_lock(&asked_lock);
    unsigned long m = asked_seq;
    pthread_mutex_unlock(&asked_lock);
    return m;
}

const char *kc_nvenv_unkeyed_since(const kc_toolkit *tk, unsigned long mark, char *buf,
                                   size_t size)
{
    const struct build *b = NULL;
    pthread_mutex_lock(&builds_lock);
    for (unsigned i = 0; i < n_builds && !b; i++)
        if (!strcmp(builds[i].id, tk->nvrtc_id) && !builds[i].why[0])
            b = &builds[i];
    pthread_mutex_lock(&asked_lock);
    const char *why = NULL;
    if (watch_failed)
        why = "NVRTC's getenv calls cannot be watched, so what it read is not known";
    else if (lost_seq > mark)
        why = "NVRTC asked getenv for more names than kcache keeps";
    else if (!b)
        why = "which environment variables NVRTC reads is not known";
    for (size_t i = 0; !why && i < n_asked; i++)
        if (asked[i].seq > mark && !known(b, asked[i].name)) {
            snprintf(buf, size, "NVRTC read the environment variable %s, which the key does "
                     "not cover", asked[i].name);
            why = buf;
        }
    pthread_mutex_unlock(&asked_lock);
    pthread_mutex_unlock(&builds_lock);
    return why;
}
