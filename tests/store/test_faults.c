/*
 * Resource faults, as doc/design.md's recovery table has them: "disk full,
 * read-only directory, lock held too long: the compile still returns its
 * artifact; the cache reports and counts the failure". For each:
 *
 *   - the store returns EFULL / EIO / EREADONLY / EBUSY with a one-line
 *     message that names the file and says what to do;
 *   - kcache_compiler_compile() (saxpy.cu of the corpus) still returns its artifact,
 *     with store_status saying why it was not cached;
 *   - the real kcache executable ($KCACHE_EXE) says what happened on stderr;
 *   - afterwards the database passes SQLite's integrity check and every entry
 *     put before the fault is there, exactly.
 *
 * Faults: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) in a child; a
 * 1 MiB tmpfs when this process may mount one (root); a read-only cache as
 * user nobody (root only: root ignores permission bits); a process stuck
 * holding the write lock. Parts that cannot run here are reported skipped;
 * the test skips (77) when none could.
 */
#include <fcntl.h>
#include <grp.h>
#include <kcache/compile.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "results.h"
#include "storetest.h"

#define ART_MAX 8000u
#define NOBODY 65534

static uint8_t scratch[256 * 1024];
static unsigned faults_run, faults_skipped, compiles_ok, artifacts_lost, wrong;

/* ---- helpers -------------------------------------------------------------- */

/* Entries [0, n) as st_put() makes them; the cache is closed after. */
static void fill(const char *path, unsigned n)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < n; i++)
        REQUIRE(st_put(s, i, ART_MAX, scratch) == 0);
    kcache_store_close(s);
}

/* After a fault: the file is sound and entries [0, n) are all there, exactly. */
static void check_intact(const char *path, unsigned n, const char *what)
{
    if (!st_integrity_ok(path)) {
        fprintf(stderr, "%s: integrity check failed afterwards\n", what);
        test_failures++;
    }
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < n; i++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(i);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH);
        if (rc) {
            fprintf(stderr, "%s: entry %u lost (%d %s)\n", what, i, rc, kcache_store_errmsg(s));
            artifacts_lost++;
            test_failures++;
        } else if (!st_entry_ok(e, i, ART_MAX, scratch)) {
            fprintf(stderr, "%s: entry %u has wrong bytes\n", what, i);
            wrong++;
            test_failures++;
        }
        kcache_entry_free(e);
    }
    /* And it takes new entries again. */
    CHECK_RC(st_put(s, 5000, ART_MAX, scratch), 0);
    kcache_store_close(s);
}

static void spit_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(p, 1, n, f) == n);
    REQUIRE(fclose(f) == 0);
}

/* An incompressible artifact of `size` bytes for key n. */
static int put_big(kcache_store *s, unsigned n, size_t size)
{
    uint64_t x = n * 0x9e3779b97f4a7c15u + 1;
    for (size_t i = 0; i < size; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        scratch[i] = (uint8_t)(x >> 56);
    }
    kcache_entry e = KCACHE_ENTRY_INIT;
    char material[32];
    st_material_entry(&e, material, n); /* exported and imported below: a checkable key */
    e.kind = KCACHE_KIND_CUBIN;
    e.arch = "sm_90";
    e.data = scratch;
    e.size = size;
    return kcache_store_put(s, &e);
}

/* ---- compiling through a faulty cache --------------------------------------- */

static char saxpy[600];

static int have_toolkit(void)
{
    const char *corpus = getenv("CORPUS");
    struct stat st;
    if (!corpus || !*corpus)
        return 0;
    snprintf(saxpy, sizeof(saxpy), "%s/saxpy.cu", corpus);
    return stat(saxpy, &st) == 0 && stat("/usr/local/cuda/include/cuda.h", &st) == 0;
}

/*
 * Compiles saxpy.cu (made unique by `tag`, so that it is a miss) through store
 * s. The artifact must come back whatever the cache did; returns the
 * result's store_status, or 1 when there is no toolkit.
 */
static int compile_through(kcache_store *s, const char *tag, const char *what)
{
    if (!have_toolkit())
        return 1;
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = s;
    co.no_store = s == NULL;
    co.wait_timeout_ms = 2000;
    kcache_compiler *c = NULL;
    char err[512];
    if (kcache_compiler_new(&c, &co, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: compiler: %s\n", what, err);
        test_failures++;
        return 1;
    }
    char define[128];
    snprintf(define, sizeof(define), "-DKC_FAULT_%s=%ld", tag, (long)getpid());
    const char *opts[] = {define};
    kcache_request rq = KCACHE_REQUEST_INIT;
    rq.source_path = saxpy;
    rq.arch = "sm_90";
    rq.n_options = 1;
    rq.options = opts;
    kcache_result *r = NULL;
    int rc = kcache_compiler_compile(&r, c, &rq);
    int store_status = r ? r->store_status : 0;
    if (rc != 0 || !r || !r->data || r->size < 100 || memcmp(r->data, "\177ELF", 4) != 0) {
        fprintf(stderr, "%s: the compile did not return its artifact: %d %s\n", what, rc,
                r ? r->message : "");
        test_failures++;
    } else {
        compiles_ok++;
        if (store_status && !test_one_line(r->store_message)) {
            fprintf(stderr, "%s: store_message is not one line: %s\n", what, r->store_message);
            test_failures++;
        }
        if (getenv("KCACHE_TEST_VERBOSE"))
            printf("%s: compiled; store_status %d: %s\n", what, store_status, r->store_message);
    }
    kcache_result_free(r);
    kcache_compiler_free(c);
    return store_status;
}

/* The CLI failed (exit 1) and said why on stderr in kcache's form, naming `word`. */
static void expect_cli_says(int rc, const char *err, const char *word, const char *what)
{
    if (rc != 1 || strncmp(err, "kcache: ", 8) != 0 || !strstr(err, word)) {
        fprintf(stderr, "%s: kcache exited %d, wanted 1 with 'kcache: ...%s...'; stderr: %s\n",
                what, rc, word, err);
        test_failures++;
    }
}

/* ---- disk full: a file-size limit ----------------------------------------------- */

static void test_fsize(void)
{
    const char *path = test_path("fsize.db");
    fill(path, 20);
    uint64_t before = st_disk(path);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        test_failures = 0;
        signal(SIGXFSZ, SIG_IGN);
        /* Room for a few more pages in each file, not for the artifacts below. */
        struct rlimit rl = {before + (256 << 10), before + (256 << 10)};
        REQUIRE(setrlimit(RLIMIT_FSIZE, &rl) == 0);
        kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
        int rc = 0;
        unsigned n;
        for (n = 0; n < 40 && rc == 0; n++)
            rc = put_big(s, 100 + n, 100 << 10);
        /* Not "disk I/O error": what ran out, and what to do. */
        if (rc != KCACHE_EFULL || !strstr(kcache_store_errmsg(s), "file size limit")) {
            fprintf(stderr, "file-size limit: put returned %d (%s) after %u puts\n", rc,
                    kcache_store_errmsg(s), n);
            _exit(1);
        }
        const char *msg = kcache_store_errmsg(s);
        if (!test_one_line(msg) || !strstr(msg, path)) {
            fprintf(stderr, "file-size limit: message: %s\n", msg);
            _exit(1);
        }
        printf("file-size limit: put %u: %s\n", n, msg);
        /* Gets go on. */
        kcache_entry *e = NULL;
        kcache_key k = st_key(3);
        if (kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH) != 0 ||
            !st_entry_ok(e, 3, ART_MAX, scratch))
            _exit(1);
        kcache_entry_free(e);
        int cs = compile_through(s, "fsize", "file-size limit");
        if (cs == 0)
            fprintf(stderr, "file-size limit: note: the compile's artifact fitted\n");
        /* The failure is counted (in memory now; written when there is room). */
        kcache_stats *st = NULL;
        if (kcache_store_stats(&st, s) == 0 && st->store_failures == 0) {
            fprintf(stderr, "file-size limit: store_failures not counted\n");
            _exit(1);
        }
        kcache_stats_free(st);
        kcache_store_close(s);
        fflush(stdout);
        _exit(test_failures ? 1 : 0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "file-size limit: child failed (status %d)\n", status);
        test_failures++;
    } else {
        compiles_ok += have_toolkit();
    }
    check_intact(path, 20, "file-size limit");
    faults_run++;
}

/* ---- disk full: a small tmpfs ------------------------------------------------------ */

static void test_tmpfs(void)
{
    const char *mnt = test_path("small");
    if (test_tmpfs_mount(mnt) != 0) {
        printf("tmpfs: cannot mount here (%s): skipped\n", strerror(errno));
        faults_skipped++;
        return;
    }
    char path[700], ballast[700];
    snprintf(path, sizeof(path), "%s/kcache.db", test_tmpfs_dir);
    snprintf(ballast, sizeof(ballast), "%s/ballast", test_tmpfs_dir);
    fill(path, 10);
    /* Someone else's file on the same disk: removing it is how the user makes room. */
    static uint8_t zeros[1536 << 10];
    spit_file(ballast, zeros, sizeof(zeros));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    int rc = 0;
    unsigned n;
    for (n = 0; n < 100 && rc == 0; n++)
        rc = put_big(s, 100 + n, 64 << 10);
    CHECK_RC(rc, KCACHE_EFULL);
    const char *msg = kcache_store_errmsg(s);
    CHECK(test_one_line(msg) && strstr(msg, path) && strstr(msg, "disk full"));
    printf("tmpfs of 3 MiB: put %u: %s\n", n, msg);
    /* To the last byte, so that the compile's artifact cannot fit either. */
    for (unsigned m = 0; m < 400 && rc == KCACHE_EFULL; m++)
        rc = put_big(s, 300 + m, 4096 >> (m % 4));
    for (unsigned m = 0; m < 400; m++)
        put_big(s, 800 + m, 1024);
    /* Reads go on, and the compile still returns its artifact. */
    kcache_entry *e = NULL;
    kcache_key k = st_key(3);
    CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH), 0);
    CHECK(st_entry_ok(e, 3, ART_MAX, scratch));
    kcache_entry_free(e);
    int cs = compile_through(s, "tmpfs", "tmpfs full");
    CHECK(cs != 0 || !have_toolkit());
    kcache_store_close(s);

    /* The CLI says so: an import that does not fit. */
    kcache_store *src = st_open(test_path("big-src.db"), UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 30; i++)
        REQUIRE(put_big(src, 700 + i, 64 << 10) == 0);
    kcache_store_close(src);
    char err[2048];
    const char *exp[] = {"export", test_path("big.kcache"), NULL};
    char ignored[512];
    REQUIRE(test_run_cli(test_path("big-src.db"), -1, NULL, ignored, sizeof(ignored), exp) == 0);
    const char *imp[] = {"import", test_path("big.kcache"), NULL};
    rc = test_run_cli(path, -1, NULL, err, sizeof(err), imp);
    expect_cli_says(rc, err, "disk full", "kcache import onto a full disk");
    printf("tmpfs: kcache import: exit %d: %s", rc, err);

    /*
     * A cache that filled its disk can always shrink itself, the disk still
     * full to the last byte: prune (the store keeps a reserve it gives up for
     * that) and clear (its own file).
     */
    const char *lower[] = {"prune", "--max-size", "512K", NULL};
    rc = test_run_cli(path, -1, NULL, err, sizeof(err), lower);
    printf("tmpfs full: kcache prune --max-size 512K: exit %d: %s", rc, rc ? err : "ok\n");
    if (rc != 0) {
        fprintf(stderr, "tmpfs full: kcache prune --max-size 512K exited %d: %s", rc, err);
        test_failures++;
    }
    if (getenv("KCACHE_TEST_VERBOSE"))
        test_sh("ls -la '%s'; df -k '%s'", test_tmpfs_dir, test_tmpfs_dir);
    CHECK(st_disk(path) <= 512 << 10);
    CHECK(st_integrity_ok(path));
    /* Filled again to the last byte (the ballast grows into what the prune freed): clear. */
    {
        int fd = open(ballast, O_WRONLY | O_APPEND);
        REQUIRE(fd >= 0);
        static uint8_t more[64 << 10];
        while (write(fd, more, sizeof(more)) > 0)
            ;
        while (write(fd, more, 512) > 0)
            ;
        close(fd);
    }
    const char *clear[] = {"clear", NULL};
    rc = test_run_cli(path, -1, NULL, err, sizeof(err), clear);
    printf("tmpfs full: kcache clear: exit %d: %s", rc, rc ? err : "ok\n");
    if (rc != 0) {
        fprintf(stderr, "tmpfs full: kcache clear exited %d: %s", rc, err);
        test_failures++;
    }
    REQUIRE(unlink(ballast) == 0);
    kcache_store *after = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *stats = NULL;
    CHECK_RC(kcache_store_stats(&stats, after), 0);
    CHECK(stats && stats->entries == 0);
    kcache_stats_free(stats);
    CHECK_RC(put_big(after, 5000, 4096), 0);
    kcache_store_close(after);
    CHECK(st_disk(path) <= 512 << 10);
    CHECK(st_integrity_ok(path));
    test_tmpfs_unmount();
    faults_run++;
}

/* ---- a read-only cache --------------------------------------------------------------- */

static const char *exe_for_nobody(void);

static void test_read_only(void)
{
    if (geteuid() != 0) {
        printf("read-only cache: needs root to become another user here: skipped\n");
        faults_skipped++;
        return;
    }
    char dir[600], path[700];
    snprintf(dir, sizeof(dir), "%s", test_path("ro"));
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof(path), "%s/kcache.db", dir);
    fill(path, 10);
    /* nobody owns it and may read it, and nothing more: a cache made read-only. */
    test_sh("chmod 0400 '%s'/* && chown -R %d:%d '%s' && chmod 0500 '%s' && chmod 0711 '%s'",
            dir, NOBODY, NOBODY, dir, dir, test_dir());
    size_t n0 = (size_t)st_file_size(path);

    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        test_failures = 0;
        if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(77);
        kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
        o.path = path;
        o.max_size = UINT64_MAX;
        kcache_store *s = NULL;
        char err[512] = "";
        int rc = kcache_store_open(&s, &o, err, sizeof(err));
        if (rc) {
            /* Refusing is allowed, with a message that names the file. */
            if (!test_one_line(err) || !strstr(err, path)) {
                fprintf(stderr, "read-only: open message: %d %s\n", rc, err);
                _exit(1);
            }
            printf("read-only cache: open: %s\n", err);
        } else {
            kcache_entry *e = NULL;
            kcache_key k = st_key(3);
            rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH);
            if (rc == 0 && !st_entry_ok(e, 3, ART_MAX, scratch))
                _exit(2);
            kcache_entry_free(e);
            rc = st_put(s, 900, ART_MAX, scratch);
            const char *msg = kcache_store_errmsg(s);
            if (rc != KCACHE_EIO && rc != KCACHE_EREADONLY) {
                fprintf(stderr, "read-only: put returned %d %s\n", rc, msg);
                _exit(1);
            }
            if (!test_one_line(msg) || !strstr(msg, "read-only")) {
                fprintf(stderr, "read-only: put message: %s\n", msg);
                _exit(1);
            }
            printf("read-only cache: put: %s\n", msg);
        }
        int cs = compile_through(s, "ro", "read-only cache");
        if (cs == 0 && have_toolkit()) {
            fprintf(stderr, "read-only cache: the compile says it was cached\n");
            _exit(1);
        }
        kcache_store_close(s);
        fflush(stdout);
        _exit(test_failures ? 1 : 0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        printf("read-only cache: cannot become nobody: skipped\n");
        faults_skipped++;
        return;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "read-only cache: child failed (status %d)\n", status);
        test_failures++;
    } else {
        compiles_ok += have_toolkit();
    }
    /* The CLI, as nobody: a prune cannot write, and says so. */
    const char *exe = exe_for_nobody();
    if (exe) {
        char err[2048], *saved = strdup(getenv("KCACHE_EXE"));
        setenv("KCACHE_EXE", exe, 1);
        const char *prune[] = {"prune", "--max-size", "1K", NULL};
        int rc = test_run_cli(path, NOBODY, NULL, err, sizeof(err), prune);
        setenv("KCACHE_EXE", saved, 1);
        free(saved);
        expect_cli_says(rc, err, path, "kcache prune on a read-only cache");
        printf("read-only cache: kcache prune: exit %d: %s", rc, err);
    }
    /* Nothing was changed. */
    CHECK(st_file_size(path) == n0);
    test_sh("chmod -R u+w '%s' && chown -R 0:0 '%s' && chmod 0700 '%s'", dir, dir, test_dir());
    check_intact(path, 10, "read-only cache");
    faults_run++;
}

/* Whether user uid can run exe ("kcache version"). */
static int runs_as(const char *exe, int uid)
{
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        if (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0)
            _exit(125);
        execl(exe, exe, "version", (char *)NULL);
        _exit(126);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/*
 * The kcache executable for user nobody. A clone under a 0700 directory
 * (as /root is) keeps nobody out of the build directory (exit 126);
 * then the executable and its library ($ORIGIN/../lib) are
 * copied into this test's directory, which nobody may enter. NULL, with
 * the reason printed, when nobody cannot run even the copy (a TMPDIR that
 * nobody can reach either).
 */
static const char *exe_for_nobody(void)
{
    static char copy[800];
    const char *exe = getenv("KCACHE_EXE");
    if (runs_as(exe, NOBODY))
        return exe;
    char dir[700];
    snprintf(dir, sizeof(dir), "%s/for-nobody", test_dir());
    snprintf(copy, sizeof(copy), "%s/bin/kcache", dir);
    test_sh("mkdir -p '%s/bin' '%s/lib' && cp '%s' '%s' && "
            "find \"$(dirname '%s')/../lib\" -maxdepth 1 -name 'libkcache.so*' ! -type d "
            "-exec cp -P {} '%s/lib/' ';' && chmod -R a+rX '%s'",
            dir, dir, exe, copy, exe, dir, dir);
    if (runs_as(copy, NOBODY))
        return copy;
    printf("read-only cache: user nobody cannot run kcache, not even a copy in %s (a TMPDIR "
           "nobody can reach?): the CLI half is skipped\n", dir);
    return NULL;
}

/* ---- the write lock held by a stuck process ------------------------------------------- */

static void test_stuck_lock(void)
{
    const char *path = test_path("stuck.db");
    fill(path, 10);
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        sqlite3 *db = NULL;
        if (sqlite3_open(path, &db) != SQLITE_OK ||
            sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
            _exit(1);
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        sleep(120); /* stuck, until killed */
        _exit(0);
    }
    close(ready[1]);
    char c;
    REQUIRE(read(ready[0], &c, 1) == 1);
    close(ready[0]);

    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.busy_timeout_ms = 300;
    kcache_store *s = NULL;
    char err[512];
    REQUIRE(kcache_store_open(&s, &o, err, sizeof(err)) == 0);
    double t0 = st_now();
    int rc = st_put(s, 900, ART_MAX, scratch);
    double waited = st_now() - t0;
    CHECK_RC(rc, KCACHE_EBUSY);
    const char *msg = kcache_store_errmsg(s);
    CHECK(test_one_line(msg) && strstr(msg, path) && strstr(msg, "locked"));
    CHECK(waited >= 0.25 && waited < 5);
    printf("stuck lock: put after %.2f s: %s\n", waited, msg);
    /* Readers are not blocked by a writer (WAL). */
    kcache_entry *e = NULL;
    kcache_key k = st_key(3);
    CHECK_RC(kcache_store_get(&e, s, &k, 0), 0);
    CHECK(st_entry_ok(e, 3, ART_MAX, scratch));
    kcache_entry_free(e);
    t0 = st_now();
    int cs = compile_through(s, "stuck", "stuck lock");
    if (have_toolkit()) {
        CHECK(cs == KCACHE_EBUSY);
        printf("stuck lock: the compile returned its artifact in %.2f s, not cached\n",
               st_now() - t0);
    }
    kcache_store_close(s);

    /* The CLI says what happened. */
    char cli_err[2048];
    const char *prune[] = {"prune", "--max-size", "1K", NULL};
    rc = test_run_cli(path, -1, "KCACHE_BUSY_TIMEOUT=300", cli_err, sizeof(cli_err), prune);
    expect_cli_says(rc, cli_err, "locked", "kcache prune while the lock is held");
    printf("stuck lock: kcache prune: exit %d: %s", rc, cli_err);
    if (have_toolkit()) {
        char out[700];
        snprintf(out, sizeof(out), "%s", test_path("saxpy.cubin"));
        const char *compile[] = {"compile", saxpy, "--arch", "sm_90", "-o", out,
                                 "-DKC_FAULT_CLI", NULL};
        rc = test_run_cli(path, -1, "KCACHE_BUSY_TIMEOUT=300", cli_err, sizeof(cli_err), compile);
        /* The compile succeeds, writes its output and warns that it was not cached. */
        if (rc != 0 || st_file_size(out) < 100 || !strstr(cli_err, "not cached")) {
            fprintf(stderr, "stuck lock: kcache compile exited %d, output %llu bytes: %s\n", rc,
                    (unsigned long long)st_file_size(out), cli_err);
            test_failures++;
        } else {
            compiles_ok++;
        }
        printf("stuck lock: kcache compile: exit %d: %s", rc, cli_err);
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    check_intact(path, 10, "stuck lock");
    /* Every kernel returned uncached was counted, though the lock kept the counts out too. */
    kcache_store *after = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *stats = NULL;
    CHECK_RC(kcache_store_stats(&stats, after), 0);
    uint64_t want = 1 + (have_toolkit() ? 2u : 0u); /* the put, the library's compile, the CLI's */
    if (stats && stats->store_failures < want) {
        fprintf(stderr, "stuck lock: %llu store failures counted, %llu expected\n",
                (unsigned long long)stats->store_failures, (unsigned long long)want);
        test_failures++;
    }
    printf("stuck lock: store failures counted: %llu\n",
           stats ? (unsigned long long)stats->store_failures : 0ull);
    kcache_stats_free(stats);
    kcache_store_close(after);
    faults_run++;
}

int main(void)
{
    double t0 = st_now();
    /* Half of each fault is what the executable says: without it, nothing is shown. */
    const char *exe = getenv("KCACHE_EXE");
    if (!exe || !*exe) {
        printf("KCACHE_EXE is not set (meson test sets it): skipped\n");
        return TEST_SKIP;
    }
    if (!have_toolkit())
        printf("no CUDA toolkit or corpus (CORPUS): the compile checks are skipped\n");
    test_fsize();
    test_tmpfs();
    test_read_only();
    test_stuck_lock();
    printf("resource faults: %u run, %u skipped, %u compiles returned their artifact, %u entries "
           "lost, %u wrong (%.1f s)\n",
           faults_run, faults_skipped, compiles_ok, artifacts_lost, wrong, st_now() - t0);
    test_record("faults", "faults=%u\tskipped=%u\tcompiles=%u\tlost=%u\twrong=%u", faults_run,
                faults_skipped, compiles_ok, artifacts_lost, wrong);
    if (faults_run == 0)
        return TEST_SKIP;
    return test_done();
}
