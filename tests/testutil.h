/*
 * A few helpers for the C tests: checks that report file and line, a
 * private temporary directory per test, and exit code 77 to skip.
 */
#ifndef KC_TESTUTIL_H
#define KC_TESTUTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_SKIP 77

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

static void test_dir_remove(void)
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
static const char *test_dir(void)
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
static const char *test_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s/%s", test_dir(), name);
    return b;
}

static int test_done(void)
{
    if (test_failures) {
        fprintf(stderr, "%d check(s) failed\n", test_failures);
        return 1;
    }
    return 0;
}

#endif
