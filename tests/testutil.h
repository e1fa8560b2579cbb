/*
 * A few helpers for the C tests: checks that report file and line, a
 * private temporary directory per test, and exit code 77 to skip.
 */
#ifndef KC_TESTUTIL_H
#define KC_TESTUTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

TEST_UNUSED static int test_done(void)
{
    if (test_failures) {
        fprintf(stderr, "%d check(s) failed\n", test_failures);
        return 1;
    }
    return 0;
}

#endif
