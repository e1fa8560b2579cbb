/*
 * kcache.conf is read whole or refused: a line it does not know fails the
 * open (library and kcache) naming the file and line, a size is read as a
 * number whatever its leading zeros, and a FIFO is refused as "not a regular
 * file" instead of blocking the open.
 *
 *   test_config_file                every case
 *   test_config_file NAME ...       only these cases (names below)
 */
#include <pthread.h>

#include "casetest.h"

/* ---- a line the file does not know: the whole file refused --------------------------- */

static void case_unknown_line(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    test_write_text(in_case(tc, "kcache.conf"), "disable = true\nmax_sise = 1G\n");
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    kcache_store *s = NULL;
    char err[512] = "";
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    EXPECT(rc != 0 && strstr(err, "kcache.conf:2"), "library open: %d %s", rc, err);
    kcache_store_close(s);
    if (!have_exe())
        return;
    static const char *const verbs[] = {"stats", "ls", "verify", "path"};
    for (size_t i = 0; i < KC_ARRAY_SIZE(verbs); i++) {
        struct cli_out c;
        run_kcache(&c, db, NULL, 20, ARGS(verbs[i]));
        EXPECT(c.rc == 2 && strstr(c.err, "kcache.conf:2"), "kcache %s: exit %d: %s", verbs[i],
               c.rc, c.err);
    }
}

/* ---- a size with 62 leading zeros ---------------------------------------------------- */

static void case_leading_zeros(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    char text[200] = "max_size = ";
    for (int i = 0; i < 62; i++)
        strcat(text, "0");
    strcat(text, "1G\n");
    test_write_text(in_case(tc, "kcache.conf"), text);
    kcache_store *s = st_open(db, 0, NULL, NULL);
    EXPECT(kcache_store_max_size(s) == UINT64_C(1) << 30, "max_size read as %llu",
           (unsigned long long)kcache_store_max_size(s));
    kcache_store_close(s);
}

/* ---- the file is a FIFO: refused, never read ----------------------------------------- */

static void *open_in_thread(void *arg)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = arg;
    kcache_store *s = NULL;
    char err[512];
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    kcache_store_close(s);
    return (void *)(intptr_t)(rc != 0 && strstr(err, "not a regular file"));
}

static void case_fifo(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    REQUIRE(mkfifo(in_case(tc, "kcache.conf"), 0600) == 0);
    if (have_exe()) {
        static const char *const verbs[] = {"path", "stats"};
        for (size_t i = 0; i < KC_ARRAY_SIZE(verbs); i++) {
            struct cli_out c;
            run_kcache(&c, db, NULL, 10, ARGS(verbs[i]));
            EXPECT(c.rc == 2 && strstr(c.err, "not a regular file"), "kcache %s: exit %d%s: %s",
                   verbs[i], c.rc, c.rc == 124 ? " (hung, killed after 10 s)" : "", c.err);
        }
    }
    /* The library too, in a process of its own so that a hang can be ended. */
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(10);
        _exit(open_in_thread((void *)db) ? 0 : 1);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "library open with a FIFO config: %s",
           WIFSIGNALED(status) ? "hung" : "not refused");
}

static const struct test_case cases[] = {
    {"unknown-line", case_unknown_line},
    {"leading-zeros", case_leading_zeros},
    {"fifo", case_fifo},
};

int main(int argc, char **argv)
{
    return run_cases(argc, argv, cases, KC_ARRAY_SIZE(cases), "config-file");
}
