/*
 * A few helpers for the C tests: checks that report file and line, a
 * private temporary directory per test, and exit code 77 to skip.
 */
#ifndef KC_TESTUTIL_H
#define KC_TESTUTIL_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_SKIP 77

#if defined(__GNUC__)
#define TEST_UNUSED __attribute__((unused))
#else
#define TEST_UNUSED
#endif

static int test_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_RC(expr, want)                                                                       \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != (want)) {                                                                       \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d\n", __FILE__, __LINE__, #expr,  \
                    rc_, kcache_strerror(rc_), (int)(want));                                       \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

/* Stops the test at once: what follows would only crash. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: required: %s\n", __FILE__, __LINE__, #cond);                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A message a user reads: there, and one line. */
TEST_UNUSED static int test_one_line(const char *msg)
{
    return msg && *msg && !strchr(msg, '\n');
}

static char test_dir_path[256];

TEST_UNUSED static void test_dir_remove(void)
{
    if (test_dir_path[0] && !getenv("KCACHE_TEST_KEEP")) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", test_dir_path,
                 test_dir_path);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", test_dir_path);
    }
}

/* A fresh directory for this test, removed at exit. */
TEST_UNUSED static const char *test_dir(void)
{
    if (!test_dir_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(test_dir_path, sizeof(test_dir_path), "%s/kcache-test-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        REQUIRE(mkdtemp(test_dir_path));
        atexit(test_dir_remove);
    }
    return test_dir_path;
}

/* test_dir()/name in a static buffer (one of a few, round-robin). */
TEST_UNUSED static const char *test_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s/%s", test_dir(), name);
    return b;
}

/* Makes the directory test_dir()/dir; dir/last into out. */
TEST_UNUSED static void test_in_new_dir(char *out, size_t size, const char *dir, const char *last)
{
    const char *d = test_path(dir);
    REQUIRE(mkdir(d, 0700) == 0);
    snprintf(out, size, "%s/%s", d, last);
}

/* Writes text to a file, replacing it. */
TEST_UNUSED static void test_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    REQUIRE(fclose(f) == 0);
}

/* Runs a shell command built from a format; the test stops if it fails. */
TEST_UNUSED static void test_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
TEST_UNUSED static void test_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) {
        fprintf(stderr, "command failed: %s\n", cmd);
        exit(1);
    }
}

/* Reads a whole file into a new buffer (freed by the caller), or NULL. */
TEST_UNUSED static uint8_t *test_slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n + 1);
    REQUIRE(p);
    REQUIRE(fread(p, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

/* Writes bytes to a file, replacing it. */
TEST_UNUSED static void test_spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(n == 0 || fwrite(p, 1, n, f) == n);
    REQUIRE(fclose(f) == 0);
}

/* Whether a file holds exactly these bytes. */
TEST_UNUSED static int test_same_bytes(const char *path, const uint8_t *want, size_t want_n)
{
    size_t n;
    uint8_t *p = test_slurp(path, &n);
    int same = p && n == want_n && memcmp(p, want, n) == 0;
    free(p);
    return same;
}

/*
 * In a forked child: runs exe with args (NULL-terminated, at most 22), with
 * KCACHE_PATH=db, no KCACHE_DIR and one optional extra "NAME=VALUE". Exits 124
 * for a malformed extra, 126 when exe cannot run.
 */
TEST_UNUSED static void test_exec_cli(const char *exe, const char *db, const char *extra_env,
                                      const char *const *args)
{
    setenv("KCACHE_PATH", db, 1);
    unsetenv("KCACHE_DIR");
    if (extra_env) {
        char kv[512];
        snprintf(kv, sizeof(kv), "%s", extra_env);
        char *eq = strchr(kv, '=');
        if (!eq)
            _exit(124);
        *eq = '\0';
        setenv(kv, eq + 1, 1);
    }
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)exe;
    for (; args[n - 1] && n < 23; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    execv(exe, argv);
    _exit(126);
}

/*
 * Runs the kcache executable named by $KCACHE_EXE with args (NULL-terminated,
 * at most 22) as user uid (-1: as is), with KCACHE_PATH=db and one optional
 * extra "NAME=VALUE" in the environment. Returns its exit status with its
 * stderr in err. Without $KCACHE_EXE the test fails here: a program whose CLI
 * half may be absent checks for it first and skips (77).
 */
TEST_UNUSED static int test_run_cli(const char *db, int uid, const char *extra_env, char *err,
                                    size_t err_size, const char *const *args)
{
    const char *exe = getenv("KCACHE_EXE");
    err[0] = '\0';
    if (!exe || !*exe) {
        fprintf(stderr, "KCACHE_EXE is not set: cannot run kcache %s\n", args[0]);
        exit(1);
    }
    int p[2];
    REQUIRE(pipe(p) == 0);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        close(p[0]);
        if (uid >= 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 ||
                         setuid((uid_t)uid) != 0))
            _exit(125);
        test_exec_cli(exe, db, extra_env, args);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < err_size && (r = read(p[0], err + got, err_size - 1 - got)) > 0)
        got += (size_t)r;
    err[got] = '\0';
    close(p[0]);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The small disk a test fills (test_tmpfs_mount()), or "" while none is mounted. */
static char test_tmpfs_dir[600];

TEST_UNUSED static void test_tmpfs_unmount(void)
{
    if (test_tmpfs_dir[0])
        umount2(test_tmpfs_dir, MNT_DETACH);
    test_tmpfs_dir[0] = '\0';
}

/*
 * Makes dir and mounts a 3 MiB tmpfs there, unmounted by test_tmpfs_unmount()
 * or at exit: 0, or -1 (errno set) where this process may not mount one.
 */
TEST_UNUSED static int test_tmpfs_mount(const char *dir)
{
    static int at_exit;
    REQUIRE(mkdir(dir, 0700) == 0);
    if (mount("tmpfs", dir, "tmpfs", 0, "size=3m,mode=0700") != 0)
        return -1;
    snprintf(test_tmpfs_dir, sizeof(test_tmpfs_dir), "%s", dir);
    if (!at_exit++)
        atexit(test_tmpfs_unmount);
    return 0;
}

/*
 * Runs fn(arg) in a child process that has `seconds` to finish, so that a
 * call that deadlocks fails the test instead of hanging it. The child's
 * failed checks fail the parent.
 */
TEST_UNUSED static void test_within(const char *what, unsigned seconds, void (*fn)(void *),
                                    void *arg)
{
    test_dir(); /* made here, so that the parent removes it */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(seconds);
        fn(arg);
        fflush(stderr);
        _exit(test_failures ? 1 : 0); /* not exit(): the parent's atexit handlers are not ours */
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
        fprintf(stderr, "%s: not done within %u s (a deadlock?)\n", what, seconds);
        test_failures++;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: failed (status %d)\n", what, status);
        test_failures++;
    }
}

TEST_UNUSED static int test_done(void)
{
    if (test_failures) {
        fprintf(stderr, "%d check(s) failed\n", test_failures);
        return 1;
    }
    return 0;
}

#endif
