/*
 * What the programs of named cases share (test_hostile_files, test_shared_use,
 * test_bundle_ingest, test_config_file, test_terminal_output): entries whose
 * key is the digest of their key material, bundles made by kcache itself,
 * the kcache executable run with its output captured and a time limit, a
 * directory per case, and a main that runs the cases named on the command
 * line (all by default) and writes the tally for tests/report.py.
 */
#ifndef KC_CASETEST_H
#define KC_CASETEST_H

#include <kcache/bundle.h>
#include <signal.h>
#include <sys/time.h>

#include "store/storelib.h"
#include "util/codec.h"
#include "util/common.h"
#include "results.h"
#include "storetest.h"

#define ART_MAX 20000

static uint8_t scratch[ART_MAX + 64];
static unsigned cases_run, cases_skipped, cases_failed;

struct test_case {
    const char *name;
    void (*run)(int c);
};

/* The table run_cases() runs: EXPECT names the case it fails. */
static const struct test_case *case_table;

/* A key that is the digest of its key material, as every real entry's is. */
TEST_UNUSED static kcache_key material_key(char *material, size_t size, unsigned n)
{
    snprintf(material, size, "kcache-test entry %u", n);
    kcache_key k;
    kc_digest(k.bytes, material, strlen(material));
    return k;
}

/* Puts entry n with key material (its key the material's digest) and one input. */
TEST_UNUSED static int put_real(kcache_store *s, unsigned n, const char *arch, const char *name)
{
    char material[64], src[96];
    snprintf(src, sizeof(src), "__global__ void k%u() {}\n", n);
    kcache_input in[1] = {{KCACHE_INPUT_SOURCE, "k.cu", src, strlen(src)}};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = material_key(material, sizeof(material), n);
    e.key_material = material;
    e.key_material_size = strlen(material);
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = arch ? arch : "sm_90";
    e.name = name ? name : "k.cu";
    e.size = st_size(n, ART_MAX);
    st_fill(scratch, e.size, n);
    e.data = scratch;
    e.toolchain = "test";
    e.n_inputs = 1;
    e.inputs = in;
    return kcache_store_put(s, &e);
}

TEST_UNUSED static kcache_key key_of(unsigned n)
{
    char material[64];
    return material_key(material, sizeof(material), n);
}

TEST_UNUSED static int has(kcache_store *s, const kcache_key *k)
{
    kcache_entry *e = NULL;
    int rc = kcache_store_get(&e, s, k, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
    kcache_entry_free(e);
    return rc == 0;
}

/* A bundle of entries [first, first + n) made by kcache itself. */
TEST_UNUSED static void make_bundle(const char *path, unsigned first, unsigned n)
{
    char src[700];
    snprintf(src, sizeof(src), "%s.src.db", path);
    kcache_store *s = st_open(src, UINT64_MAX, NULL, NULL);
    for (unsigned i = first; i < first + n; i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    REQUIRE(kcache_bundle_export(&r, s, path, NULL) == 0 && r.entries == n);
    kcache_store_close(s);
}

struct cli_out {
    int rc;
    char out[65536];
    char err[65536];
    double seconds;
};

TEST_UNUSED static void slurp_into(const char *path, char *buf, size_t size)
{
    size_t n = 0;
    uint8_t *p = test_slurp(path, &n);
    if (n >= size)
        n = size - 1;
    if (p)
        memcpy(buf, p, n);
    buf[p ? n : 0] = '\0';
    free(p);
}

/*
 * Runs kcache (KCACHE_EXE) with KCACHE_PATH=db and an optional "NAME=VALUE",
 * stdout and stderr captured; killed after `limit` seconds (rc 124).
 */
TEST_UNUSED static int run_kcache(struct cli_out *o, const char *db, const char *extra_env,
                                  int limit, const char *const *args)
{
    const char *exe = getenv("KCACHE_EXE");
    memset(o, 0, sizeof(*o));
    if (!exe || !*exe)
        return o->rc = -1;
    char outp[600], errp[600];
    snprintf(outp, sizeof(outp), "%s", test_path("cli.out"));
    snprintf(errp, sizeof(errp), "%s", test_path("cli.err"));
    fflush(stdout);
    fflush(stderr);
    double t0 = st_now();
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fo, 1);
        dup2(fe, 2);
        test_exec_cli(exe, db, extra_env, args);
    }
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (st_now() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            o->rc = 124;
            goto done;
        }
        usleep(10000);
    }
    o->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
done:
    o->seconds = st_now() - t0;
    slurp_into(outp, o->out, sizeof(o->out));
    slurp_into(errp, o->err, sizeof(o->err));
    return o->rc;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

TEST_UNUSED static int have_exe(void)
{
    const char *exe = getenv("KCACHE_EXE");
    return exe && *exe;
}

/* 1 where KCACHE_EXE is set; else the case is skipped (said and counted) and 0. */
TEST_UNUSED static int exe_or_skip(int tc)
{
    if (have_exe())
        return 1;
    printf("%s: KCACHE_EXE not set: skipped\n", case_table[tc].name);
    cases_skipped++;
    return 0;
}

/* Fails the case with a message (the case's checks go on). */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s: %s:%d: ", case_table[tc].name, __FILE__, __LINE__);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

/* The case's own directory under the test's. */
TEST_UNUSED static const char *case_dir(int c)
{
    static char dir[600];
    snprintf(dir, sizeof(dir), "%s/%s", test_dir(), case_table[c].name);
    mkdir(dir, 0700);
    return dir;
}

TEST_UNUSED static const char *in_case(int c, const char *name)
{
    static char bufs[8][700];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(b[0]) * 700, "%s/%s", case_dir(c), name);
    return b;
}

/*
 * Runs the cases named in argv (every case without one), each reported ok,
 * FAILED or skipped, and records the tally as `results_name` for
 * tests/report.py.
 */
TEST_UNUSED static int run_cases(int argc, char **argv, const struct test_case *cases, size_t n,
                                 const char *results_name)
{
    double t0 = st_now();
    case_table = cases;
    int want[64] = {0};
    int any = 0;
    REQUIRE(n <= KC_ARRAY_SIZE(want));
    for (int i = 1; i < argc; i++) {
        size_t k = 0;
        while (k < n && strcmp(argv[i], cases[k].name) != 0)
            k++;
        if (k == n) {
            fprintf(stderr, "no case named %s; the cases:", argv[i]);
            for (k = 0; k < n; k++)
                fprintf(stderr, " %s", cases[k].name);
            fputc('\n', stderr);
            return 2;
        }
        want[k] = any = 1;
    }
    /* Other users reach the directory; what is inside stays each case's own. */
    chmod(test_dir(), 0711);
    for (size_t k = 0; k < n; k++) {
        if (any && !want[k])
            continue;
        int before = test_failures;
        unsigned skipped = cases_skipped;
        cases[k].run((int)k);
        cases_run++;
        const char *verdict = test_failures != before    ? "FAILED"
                              : cases_skipped != skipped ? "skipped"
                                                         : "ok";
        cases_failed += test_failures != before;
        printf("%s: %s\n", cases[k].name, verdict);
        fflush(stdout);
    }
    printf("%s: %u cases run, %u failed, %u skipped (%.1f s)\n", results_name, cases_run,
           cases_failed, cases_skipped, st_now() - t0);
    test_record(results_name, "cases=%u\tfailed=%u\tskipped=%u", cases_run, cases_failed,
                cases_skipped);
    return test_done();
}

#endif
