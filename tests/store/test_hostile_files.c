/*
 * Hardening (issue 12): each row of the table, tried as it was
 * found, against the library and the kcache executable. A row passes when
 * kcache does what doc/design.md's recovery table says for it: no state that
 * needs rm, no other user's cache used, nothing from a bundle that poisons
 * or exhausts, a config file read whole or refused, output a terminal can
 * show, maintenance that does not call a removed entry damaged, leases that
 * cannot wedge, failures counted, export names that cannot collide, and a
 * suite that runs wherever it is cloned.
 *
 *   test_harden            every row
 *   test_harden 5 12       only these rows
 */
#include <kcache/bundle.h>
#include <kcache/compile.h>
#include <kcache/verify.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <blake2.h>
#include <zstd.h>

#include "store/internal.h"
#include "util/codec.h"
#include "util/common.h"
#include "results.h"
#include "storetest.h"

#define NOBODY 65534
#define ART_MAX 20000

static uint8_t scratch[ART_MAX + 64];
static unsigned rows_run, rows_skipped, rows_failed;

/* ---- helpers ------------------------------------------------------------------------- */

static int one_line(const char *msg)
{
    return msg && *msg && !strchr(msg, '\n');
}

/* A key that is the digest of its key material, as every real entry's is. */
static kcache_key material_key(char *material, size_t size, unsigned n)
{
    snprintf(material, size, "kcache-test entry %u", n);
    kcache_key k;
    kc_digest(k.bytes, material, strlen(material));
    return k;
}

/* Puts entry n with key material (its key the material's digest) and one input. */
static int put_real(kcache_store *s, unsigned n, const char *arch, const char *name)
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

static kcache_key key_of(unsigned n)
{
    char material[64];
    return material_key(material, sizeof(material), n);
}

static int has(kcache_store *s, const kcache_key *k)
{
    kcache_entry *e = NULL;
    int rc = kcache_store_get(&e, s, k, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
    kcache_entry_free(e);
    return rc == 0;
}

static void sql_on(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, err);
        exit(1);
    }
    sqlite3_close(db);
}

/* A bundle of entries [first, first + n) made by kcache itself. */
static void make_bundle(const char *path, unsigned first, unsigned n)
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

static void slurp_into(const char *path, char *buf, size_t size)
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
static int run_kcache(struct cli_out *o, const char *db, const char *extra_env, int limit,
                      const char *const *args)
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

static int have_exe(void)
{
    const char *exe = getenv("KCACHE_EXE");
    return exe && *exe;
}

/* Fails the row with a message (the row's checks go on). */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "row %d: %s:%d: ", row, __FILE__, __LINE__);                           \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

static const char *row_dir(int row)
{
    static char dir[600];
    snprintf(dir, sizeof(dir), "%s/row%d", test_dir(), row);
    mkdir(dir, 0700);
    return dir;
}

static const char *in_row(int row, const char *name)
{
    static char bufs[8][700];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(b[0]) * 700, "%s/%s", row_dir(row), name);
    return b;
}

/* ---- 1: another database moved over the file under a WAL with frames ------------------ */

static void row1(int row)
{
    const char *db = in_row(row, "kcache.db"), *other = in_row(row, "other.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 2; i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    kcache_store_close(s);
    s = st_open(other, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 100, NULL, NULL) == 0);
    REQUIRE(kcache_store_vacuum(s) == 0); /* all in the file, no WAL */
    kcache_store_close(s);
    char wal[800];
    snprintf(wal, sizeof(wal), "%s-wal", db);
    EXPECT(st_file_size(wal) > 0, "the old WAL should still hold frames");
    REQUIRE(rename(other, db) == 0);
    struct cli_out o;
    if (have_exe()) {
        run_kcache(&o, db, NULL, 60, ARGS("stats"));
        run_kcache(&o, db, NULL, 60, ARGS("clear"));
        EXPECT(o.rc == 0, "clear exit %d: %s", o.rc, o.err);
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 0, "verify exit %d: %s", o.rc, o.err);
    }
    /* The cache works again: what is put is served. */
    s = st_open(db, UINT64_MAX, NULL, NULL);
    int rc = put_real(s, 200, NULL, NULL);
    EXPECT(rc == 0, "put after recovery: %d %s", rc, kcache_store_errmsg(s));
    kcache_key k = key_of(200);
    EXPECT(has(s, &k), "entry put after recovery not served");
    kcache_store_close(s);
    EXPECT(st_integrity_ok(db), "integrity");
}

/* ---- 2: corrupt after open: clear and vacuum replace it --------------------------------- */

static void corrupt_interior(const char *db)
{
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 60; i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    REQUIRE(kcache_store_vacuum(s) == 0);
    kcache_store_close(s);
    /* Zero page 6 and 7 (interior pages of the entry tables), keep the header. */
    int fd = open(db, O_WRONLY);
    REQUIRE(fd >= 0);
    static uint8_t zero[8192];
    REQUIRE(pwrite(fd, zero, sizeof(zero), 5 * 4096) == (ssize_t)sizeof(zero));
    close(fd);
}

static void row2(int row)
{
    if (!have_exe()) {
        printf("row 2: KCACHE_EXE not set: skipped\n");
        rows_skipped++;
        return;
    }
    static const char *const verbs[] = {"clear", "vacuum"};
    for (int v = 0; v < 2; v++) {
        char name[64];
        snprintf(name, sizeof(name), "%s.db", verbs[v]);
        const char *db = in_row(row, name);
        corrupt_interior(db);
        struct cli_out o;
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 1, "verify of a damaged file exit %d", o.rc);
        EXPECT(strstr(o.err, "kcache clear") || strstr(o.out, "kcache clear"),
               "verify does not say which command fixes it: %s%s", o.out, o.err);
        run_kcache(&o, db, NULL, 60, ARGS(verbs[v]));
        EXPECT(o.rc == 0, "%s of a damaged file: exit %d: %s", verbs[v], o.rc, o.err);
        run_kcache(&o, db, NULL, 60, ARGS("verify"));
        EXPECT(o.rc == 0, "verify after %s: exit %d: %s%s", verbs[v], o.rc, o.out, o.err);
    }
}

/* ---- 3: a cache of another user ---------------------------------------------------------- */

static void row3(int row)
{
    if (geteuid() != 0) {
        printf("row 3: needs root to make files of another user: skipped\n");
        rows_skipped++;
        return;
    }
    const char *dir = in_row(row, "cache");
    REQUIRE(mkdir(dir, 0755) == 0);
    char db[800];
    snprintf(db, sizeof(db), "%s/kcache.db", dir);
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 19, NULL, NULL) == 0);
    kcache_store_close(s);
    /* uid 1 owns it all, and lets everyone write the files. */
    test_sh("chmod 0666 '%s' '%s'-* && chown -R 1:1 '%s' && chmod 0711 '%s' '%s'", db, db, dir,
            test_dir(), row_dir(row));
    for (int as_root = 0; as_root < 2; as_root++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            if (!as_root && (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 ||
                             setuid(NOBODY) != 0))
                _exit(77);
            for (int ro = 0; ro < 2; ro++) {
                kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
                o.path = db;
                o.read_only = ro;
                kcache_store *t = NULL;
                char err[512] = "";
                int rc = kcache_store_open(&t, &o, err, sizeof(err));
                kcache_store_close(t);
                if (rc == 0 || !strstr(err, "owned by") || !one_line(err)) {
                    fprintf(stderr, "row 3: %s opening uid 1's cache (read-only %d): %d %s\n",
                            as_root ? "root" : "nobody", ro, rc, err);
                    _exit(1);
                }
            }
            _exit(0);
        }
        int status;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "another user's cache was used");
    }
}

/* ---- 4: a poisoned entry from a bundle: times clamped, recompile removes it ------------- */

static int compile_into(kcache_store *s, const char *src_path, kcache_key *key)
{
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    co.store = s;
    kcache_compiler *c = NULL;
    char err[512];
    if (kcache_compiler_new(&c, &co, err, sizeof(err)) != 0)
        return -1;
    kcache_request rq = KCACHE_REQUEST_INIT;
    rq.source_path = src_path;
    rq.arch = "sm_90";
    kcache_result *r = NULL;
    int rc = kcache_compile(&r, c, &rq);
    if (rc == 0 && r && r->data && r->store_status == 0)
        *key = r->key;
    else
        rc = -1;
    kcache_result_free(r);
    kcache_compiler_free(c);
    return rc;
}

static void row4(int row)
{
    const char *src = in_row(row, "src.db"), *bundle = in_row(row, "poison.kcache");
    const char *live_db = in_row(row, "live.db");
    kcache_store *s = st_open(src, UINT64_MAX, NULL, NULL);
    kcache_key k19, k20;
    char p19[800], p20[800];
    snprintf(p19, sizeof(p19), "%s", in_row(row, "k19.cu"));
    snprintf(p20, sizeof(p20), "%s", in_row(row, "k20.cu"));
    test_write_text(p19, "extern \"C\" __global__ void k(float *p) { p[0] = 19.0f; }\n");
    test_write_text(p20, "extern \"C\" __global__ void k(float *p) { p[0] = 20.0f; }\n");
    int compiled = compile_into(s, p19, &k19) == 0 && compile_into(s, p20, &k20) == 0;
    if (!compiled) {
        /* Without a toolkit: entries of our own, whose artifacts are then swapped. */
        printf("row 4: no compiler here: the recompile part is skipped\n");
        REQUIRE(put_real(s, 19, NULL, NULL) == 0 && put_real(s, 20, NULL, NULL) == 0);
        k19 = key_of(19);
        k20 = key_of(20);
    }
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    REQUIRE(kcache_bundle_export(&r, s, bundle, NULL) == 0 && r.entries == 2);
    kcache_store_close(s);
    /* k20's row gets k19's artifact, every digest consistent, and a date in 9999. */
    char hex19[KCACHE_KEY_HEX_SIZE], hex20[KCACHE_KEY_HEX_SIZE], sql[2048];
    kcache_key_hex(hex19, &k19);
    kcache_key_hex(hex20, &k20);
    snprintf(sql, sizeof(sql),
             "UPDATE artifact SET (stored_digest, data) = (SELECT a.stored_digest, a.data FROM"
             " artifact a JOIN entry e ON e.id = a.id WHERE e.key = x'%s')"
             " WHERE id = (SELECT id FROM entry WHERE key = x'%s');"
             "UPDATE entry SET (raw_size, stored_size, codec, digest) = (SELECT raw_size,"
             " stored_size, codec, digest FROM entry WHERE key = x'%s'),"
             " created_at = 253402300799000 WHERE key = x'%s';",
             hex19, hex20, hex19, hex20);
    sql_on(bundle, sql);
    s = st_open(live_db, UINT64_MAX, NULL, NULL);
    int rc = kcache_bundle_import(&r, s, bundle, NULL);
    EXPECT(rc == 0, "import: %d %s", rc, kcache_store_errmsg(s));
    kcache_entry *e = NULL;
    rc = kcache_store_get(&e, s, &k20, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
    /* time() reads a coarse clock that may still show the last second: the store's own. */
    int64_t now = kc_now_ms();
    EXPECT(rc == 0 && e->created_at <= now + 1000 && e->accessed_at <= now + 1000,
           "created_at not clamped to now: %lld", e ? (long long)e->created_at : -1LL);
    kcache_entry_free(e);
    kcache_store_close(s);
    if (!compiled || !have_exe())
        return;
    struct cli_out o;
    run_kcache(&o, live_db, NULL, 120, ARGS("verify", "--recompile"));
    EXPECT(o.rc == 1, "verify --recompile exit %d", o.rc);
    EXPECT(strstr(o.out, "removed") || strstr(o.err, "removed"),
           "verify --recompile does not say the entry was removed: %s%s", o.out, o.err);
    EXPECT(!strstr(o.err, "go on their next lookup"), "wrong message: %s", o.err);
    s = st_open(live_db, UINT64_MAX, NULL, NULL);
    EXPECT(!has(s, &k20), "the poisoned entry is still served after verify --recompile");
    EXPECT(has(s, &k19), "the good entry was removed");
    kcache_store_close(s);
}

/* ---- 5: a small bundle that decompresses to gigabytes ----------------------------------- */

/* A zstd frame of n zero bytes that says its size, and the bytes' BLAKE2b. */
static uint8_t *zero_frame(uint64_t n, size_t *frame_n, uint8_t digest[32])
{
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    REQUIRE(cc);
    REQUIRE(!ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cc, n)));
    size_t cap = 1 << 20, used = 0;
    uint8_t *out = malloc(cap);
    static uint8_t zeros[1 << 20];
    REQUIRE(out);
    uint64_t fed = 0;
    for (;;) {
        size_t chunk = (size_t)KC_MIN(n - fed, (uint64_t)sizeof(zeros));
        ZSTD_inBuffer in = {zeros, chunk, 0};
        ZSTD_EndDirective end = fed + chunk == n ? ZSTD_e_end : ZSTD_e_continue;
        size_t left;
        do {
            ZSTD_outBuffer ob = {out + used, cap - used, 0};
            left = ZSTD_compressStream2(cc, &ob, &in, end);
            REQUIRE(!ZSTD_isError(left));
            used += ob.pos;
            if (cap - used < 65536) {
                cap *= 2;
                out = realloc(out, cap);
                REQUIRE(out);
            }
        } while (end == ZSTD_e_end ? left != 0 : in.pos < in.size);
        fed += chunk;
        if (end == ZSTD_e_end)
            break;
    }
    ZSTD_freeCCtx(cc);
    /* The digest of n zero bytes, in pieces (kc_digest wants them in one). */
    blake2b_state d;
    REQUIRE(blake2b_init(&d, 32) == 0);
    for (uint64_t done = 0; done < n; done += sizeof(zeros))
        blake2b_update(&d, zeros, (size_t)KC_MIN(n - done, (uint64_t)sizeof(zeros)));
    REQUIRE(blake2b_final(&d, digest, 32) == 0);
    *frame_n = used;
    return out;
}

static void row5(int row)
{
    const char *bundle = in_row(row, "bomb.kcache");
    make_bundle(bundle, 500, 4);
    size_t frame_n;
    uint8_t digest[32];
    uint8_t *frame = zero_frame(UINT64_C(1) << 30, &frame_n, digest);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(bundle, &db) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "INSERT INTO input (digest, size, codec, data) VALUES (?1, ?2,"
                                   " 1, ?3)", -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_blob(st, 1, digest, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, INT64_C(1) << 30);
    sqlite3_bind_blob(st, 3, frame, (int)frame_n, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    REQUIRE(sqlite3_exec(db, "UPDATE entry_input SET input_id = last_insert_rowid()", NULL, NULL,
                         NULL) == SQLITE_OK);
    sqlite3_close(db);
    free(frame);
    printf("row 5: bundle of %llu bytes, one 1 GiB input referenced 4 times\n",
           (unsigned long long)st_file_size(bundle));
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
        /* Today's importer would take 8 GiB: let it fail at 3 instead of the machine. */
        struct rlimit rl = {UINT64_C(3) << 30, UINT64_C(3) << 30};
        setrlimit(RLIMIT_AS, &rl);
#endif
        kcache_store *s = st_open(in_row(row, "live.db"), UINT64_MAX, NULL, NULL);
        kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
        o.dry_run = 1;
        kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
        int rc = kcache_bundle_import(&r, s, bundle, &o);
        const char *msg = kcache_store_errmsg(s);
        int ok = rc != 0 && strstr(msg, "too large") && strstr(msg, "nothing imported");
        if (!ok)
            fprintf(stderr, "row 5: dry run returned %d: %s\n", rc, msg);
        kcache_store_close(s);
        _exit(ok ? 0 : 1);
    }
    int status;
    struct rusage ru;
    double t0 = st_now();
    REQUIRE(wait4(pid, &status, 0, &ru) == pid);
    double secs = st_now() - t0;
    printf("row 5: dry run took %.1f s, %ld MiB at most\n", secs, ru.ru_maxrss / 1024);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the bomb was not refused as too large");
    EXPECT(ru.ru_maxrss < 512 * 1024, "the dry run took %ld MiB", ru.ru_maxrss / 1024);
}

/* ---- 6: entries the store's own put would refuse ---------------------------------------- */

static void row6(int row)
{
    static const char *const breaks[] = {
        "UPDATE entry SET arch = '' WHERE id = (SELECT min(id) + 10 FROM entry)",
        "PRAGMA ignore_check_constraints = ON;"
        " UPDATE entry SET kind = 9 WHERE id = (SELECT min(id) + 29 FROM entry)",
    };
    for (size_t b = 0; b < KC_ARRAY_SIZE(breaks); b++) {
        char name[64];
        snprintf(name, sizeof(name), "bad%zu.kcache", b);
        const char *bundle = in_row(row, name);
        make_bundle(bundle, 600, 40);
        sql_on(bundle, breaks[b]);
        snprintf(name, sizeof(name), "live%zu.db", b);
        kcache_store *s = st_open(in_row(row, name), UINT64_MAX, NULL, NULL);
        kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
        o.dry_run = 1;
        kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
        int rc = kcache_bundle_import(&r, s, bundle, &o);
        EXPECT(rc != 0, "dry run of a bundle with %s says OK", breaks[b]);
        rc = kcache_bundle_import(&r, s, bundle, NULL);
        unsigned n = st_count_entries(s);
        EXPECT(rc != 0 && n == 0, "import of a bundle with %s: %d, %u entries merged", breaks[b],
               rc, n);
        EXPECT(rc == 0 || strstr(kcache_store_errmsg(s), "nothing imported"), "message: %s",
               kcache_store_errmsg(s));
        kcache_store_close(s);
    }
}

/* ---- 7, 8, 9: the config file ---------------------------------------------------------- */

static void row7(int row)
{
    const char *db = in_row(row, "kcache.db");
    test_write_text(in_row(row, "kcache.conf"), "disable = true\nmax_sise = 1G\n");
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

static void row8(int row)
{
    const char *db = in_row(row, "kcache.db");
    char text[200] = "max_size = ";
    for (int i = 0; i < 62; i++)
        strcat(text, "0");
    strcat(text, "1G\n");
    test_write_text(in_row(row, "kcache.conf"), text);
    kcache_store *s = st_open(db, 0, NULL, NULL);
    EXPECT(kcache_store_max_size(s) == UINT64_C(1) << 30, "max_size read as %llu",
           (unsigned long long)kcache_store_max_size(s));
    kcache_store_close(s);
}

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

static void row9(int row)
{
    const char *db = in_row(row, "kcache.db");
    REQUIRE(mkfifo(in_row(row, "kcache.conf"), 0600) == 0);
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

/* ---- 10: what comes from the cache is printed safely ------------------------------------- */

static int valid_utf8(const unsigned char *p)
{
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0 || (n == 1 && *p < 0xc2))
            return 0;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return 0;
    }
    return 1;
}

/* No control byte but newline (and tab): no escape sequence, no forged line. */
static int terminal_safe(const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            return 0;
    return 1;
}

static unsigned lines(const char *text)
{
    unsigned n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

static void row10(int row)
{
    if (!have_exe()) {
        printf("row 10: KCACHE_EXE not set: skipped\n");
        rows_skipped++;
        return;
    }
    const char *db = in_row(row, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    static const char evil[] =
        "\033]0;pwned\007\033[2J\n0123456789abcdef  cubin  sm_90  fake\r\xff";
    char material[64], src[] = "x";
    kcache_input in[1] = {{KCACHE_INPUT_SOURCE, evil, src, 1}};
    const char *exprs[] = {evil}, *lowered[] = {evil};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = material_key(material, sizeof(material), 1);
    e.key_material = material;
    e.key_material_size = strlen(material);
    e.kind = KCACHE_KIND_PTX;
    e.arch = "sm_90";
    e.name = evil;
    e.toolchain = evil;
    e.log = evil;
    e.data = evil;
    e.size = sizeof(evil) - 1;
    e.n_inputs = 1;
    e.inputs = in;
    e.n_names = 1;
    e.name_exprs = exprs;
    e.lowered_names = lowered;
    REQUIRE(kcache_store_put(s, &e) == 0);
    kcache_store_close(s);
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &e.key);
    struct cli_out o;
    run_kcache(&o, db, NULL, 20, ARGS("ls"));
    EXPECT(o.rc == 0 && terminal_safe(o.out) && lines(o.out) == 2, /* the header, the entry */
           "ls printed control bytes or extra lines (exit %d, %u lines)", o.rc, lines(o.out));
    run_kcache(&o, db, NULL, 20, ARGS("inspect", hex));
    EXPECT(o.rc == 0 && terminal_safe(o.out), "inspect printed control bytes (exit %d)", o.rc);
    run_kcache(&o, db, NULL, 20, ARGS("inspect", "--log", "--source", "--ptx", hex));
    EXPECT(o.rc == 0 && terminal_safe(o.out), "inspect --log --source --ptx printed control bytes");
    run_kcache(&o, db, NULL, 20, ARGS("ls", "--json"));
    EXPECT(o.rc == 0 && valid_utf8((const unsigned char *)o.out) && terminal_safe(o.out),
           "ls --json is not valid UTF-8 text");
    run_kcache(&o, db, NULL, 20, ARGS("inspect", "--json", hex));
    EXPECT(o.rc == 0 && valid_utf8((const unsigned char *)o.out) && terminal_safe(o.out),
           "inspect --json is not valid UTF-8 text (exit %d)", o.rc);
}

/* ---- 11: entries removed by another process during export and verify ------------------- */

struct remover {
    kcache_store *other;
    kcache_key *keys;
    size_t n;
};

static void remove_next(void *ud, const char *phase, uint64_t done, uint64_t total)
{
    struct remover *r = ud;
    (void)total;
    if (strcmp(phase, "verifying") && strcmp(phase, "exporting"))
        return;
    if (done + 1 < r->n && done % 2 == 0)
        kcache_store_delete(r->other, &r->keys[done + 1]);
}

static int list_keys_cb(void *ud, const kcache_entry *e)
{
    struct remover *r = ud;
    r->keys[r->n++] = e->key;
    return 0;
}

static void row11(int row)
{
    const char *db = in_row(row, "kcache.db");
    for (int pass = 0; pass < 2; pass++) {
        kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
        kcache_store *other = st_open(db, UINT64_MAX, NULL, NULL);
        for (unsigned i = 0; i < 20; i++)
            REQUIRE(put_real(s, i, NULL, NULL) == 0);
        static kcache_key keys[64];
        struct remover r = {other, keys, 0};
        kcache_filter f = KCACHE_FILTER_INIT;
        f.sort = KCACHE_SORT_CREATED;
        REQUIRE(kcache_store_list(s, &f, list_keys_cb, &r) == 0);
        if (pass == 0) {
            kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
            int rc = kcache_store_verify(&vr, s, remove_next, NULL, &r);
            EXPECT(rc == 0 && vr.damaged == 0, "verify: %d, %llu damaged", rc,
                   (unsigned long long)vr.damaged);
        } else {
            kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
            o.progress = remove_next;
            o.progress_userdata = &r;
            kcache_bundle_result br = KCACHE_BUNDLE_RESULT_INIT;
            int rc = kcache_bundle_export(&br, s, in_row(row, "out.kcache"), &o);
            EXPECT(rc == 0 && br.damaged == 0, "export: %d, %llu damaged", rc,
                   (unsigned long long)br.damaged);
        }
        kcache_store_clear(s);
        kcache_store_close(other);
        kcache_store_close(s);
    }
}

/* ---- 12: a symlink where the database should be ----------------------------------------- */

static void row12(int row)
{
    const char *victim_dir = in_row(row, "victim");
    REQUIRE(mkdir(victim_dir, 0755) == 0);
    char victim[800], link_dir[800], db[900];
    snprintf(victim, sizeof(victim), "%s/empty", victim_dir);
    test_spit(victim, "", 0);
    snprintf(link_dir, sizeof(link_dir), "%s", in_row(row, "cache"));
    REQUIRE(mkdir(link_dir, 0700) == 0);
    snprintf(db, sizeof(db), "%s/kcache.db", link_dir);
    REQUIRE(symlink(victim, db) == 0);
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    kcache_store *s = NULL;
    char err[512] = "";
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (s)
        put_real(s, 1, NULL, NULL);
    kcache_store_close(s);
    EXPECT(rc != 0 && strstr(err, "symbolic link") && one_line(err), "open: %d %s", rc, err);
    EXPECT(st_file_size(victim) == 0, "the link's target was written");
    char side[900];
    snprintf(side, sizeof(side), "%s-wal", victim);
    EXPECT(access(side, F_OK) != 0, "a -wal appeared beside the target");
    snprintf(side, sizeof(side), "%s-shm", victim);
    EXPECT(access(side, F_OK) != 0, "a -shm appeared beside the target");
}

/* ---- 13, 14: leases ---------------------------------------------------------------------- */

struct said {
    int n;
    char last[512];
};

static void log_said(void *ud, int level, const char *msg)
{
    struct said *w = ud;
    (void)level;
    if (strstr(msg, "waiting for host"))
        w->n++;
    snprintf(w->last, sizeof(w->last), "%s", msg);
}

static void row13(int row)
{
    const char *db = in_row(row, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    kcache_store_close(s);
    kcache_key k = key_of(13);
    char hex[KCACHE_KEY_HEX_SIZE], sql[512];
    kcache_key_hex(hex, &k);
    /* Another host's lease, its heartbeat a year ahead. */
    snprintf(sql, sizeof(sql),
             "INSERT INTO lease VALUES (x'%s', 1, 'another-host', %lld)", hex,
             (long long)time(NULL) * 1000 + 365LL * 86400 * 1000);
    sql_on(db, sql);
    s = st_open(db, UINT64_MAX, NULL, NULL);
    int acquired = 0;
    int rc = kc_store_lease_acquire(&acquired, s, &k, 15000);
    EXPECT(rc == 0 && acquired, "a lease with a heartbeat in the future held: %d %d", rc,
           acquired);
    kcache_store_close(s);

    /* Another host's live lease: waited for, said at once, given up after the bound. */
    kcache_key k2 = key_of(113);
    kcache_key_hex(hex, &k2);
    snprintf(sql, sizeof(sql), "INSERT INTO lease VALUES (x'%s', 1, 'another-host', %lld)", hex,
             (long long)time(NULL) * 1000);
    sql_on(db, sql);
    setenv("KCACHE_OTHER_HOST_WAIT", "300", 1);
    struct said said = {0, ""};
    s = st_open(db, UINT64_MAX, log_said, &said);
    rc = kc_store_lease_acquire(&acquired, s, &k2, 15000);
    EXPECT(rc == 0 && !acquired, "another host's live lease taken at once");
    EXPECT(said.n == 1 && strstr(said.last, "another-host"), "the wait was not said: %s",
           said.last);
    usleep(400000);
    rc = kc_store_lease_acquire(&acquired, s, &k2, 15000);
    EXPECT(rc == 0 && acquired, "another host's lease held past KCACHE_OTHER_HOST_WAIT");
    kcache_store_close(s);
    unsetenv("KCACHE_OTHER_HOST_WAIT");
}

static void row14(int row)
{
    const char *db = in_row(row, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 1, NULL, NULL) == 0);
    kcache_store_close(s);
    kcache_key k = key_of(14), k2 = key_of(15);
    char hex[KCACHE_KEY_HEX_SIZE], hex2[KCACHE_KEY_HEX_SIZE], sql[1024];
    kcache_key_hex(hex, &k);
    kcache_key_hex(hex2, &k2);
    /* What a lost -shm left in the field: rows that break the table's NOT NULL. */
    snprintf(sql, sizeof(sql),
             "PRAGMA writable_schema = ON;"
             "UPDATE sqlite_schema SET sql = replace(sql, 'host      TEXT    NOT NULL',"
             " 'host TEXT') WHERE name = 'lease';"
             "PRAGMA writable_schema = RESET;"
             "INSERT INTO lease VALUES (x'%s', 1, NULL, 0), (x'%s', 1, NULL, 0);"
             "PRAGMA writable_schema = ON;"
             "UPDATE sqlite_schema SET sql = replace(sql, 'host TEXT',"
             " 'host      TEXT    NOT NULL') WHERE name = 'lease';",
             hex, hex2);
    sql_on(db, sql);
    s = st_open(db, UINT64_MAX, NULL, NULL);
    int acquired = 0;
    int rc = kc_store_lease_acquire(&acquired, s, &k, 15000);
    EXPECT(rc == 0 && acquired, "lease over a NULL row: %d %d %s", rc, acquired,
           kcache_store_errmsg(s));
    kc_store_lease_release(s, &k);
    kcache_store_close(s);
    if (!have_exe())
        return;
    struct cli_out o;
    run_kcache(&o, db, NULL, 30, ARGS("verify"));
    EXPECT(o.rc == 1 && strstr(o.err, "kcache clear"), "verify of the NULL row: exit %d: %s",
           o.rc, o.err);
    run_kcache(&o, db, NULL, 30, ARGS("clear"));
    EXPECT(o.rc == 0, "clear: exit %d: %s", o.rc, o.err);
    run_kcache(&o, db, NULL, 30, ARGS("verify"));
    EXPECT(o.rc == 0, "verify after clear: exit %d: %s%s", o.rc, o.out, o.err);
}

/* ---- 15: disk full while storing: counted ---------------------------------------------- */

static char mnt15[700];

static void unmount15(void)
{
    if (mnt15[0])
        umount2(mnt15, MNT_DETACH);
}

static void row15(int row)
{
    /* A real full disk (a tmpfs), where even the count has to find room. */
    snprintf(mnt15, sizeof(mnt15), "%s", in_row(row, "small"));
    REQUIRE(mkdir(mnt15, 0700) == 0);
    if (geteuid() != 0 || mount("tmpfs", mnt15, "tmpfs", 0, "size=3m,mode=0700") != 0) {
        printf("row 15: cannot mount a tmpfs here (needs root): skipped\n");
        mnt15[0] = '\0';
        rows_skipped++;
        return;
    }
    atexit(unmount15);
    char db[800], fill[800];
    snprintf(db, sizeof(db), "%s/kcache.db", mnt15);
    snprintf(fill, sizeof(fill), "%s/fill", mnt15);
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 1, NULL, NULL) == 0);
    kcache_store_close(s);
    /* Everything but ~100 KiB taken. */
    test_sh("dd if=/dev/zero of='%s' bs=4096 count=$(( $(stat -f -c %%a '%s') - 25 )) "
            "2>/dev/null",
            fill, mnt15);
    unsigned failed = 0;
    for (unsigned p = 0; p < 4; p++) {
        if (have_exe()) {
            /* As the issue found it: four compiles, each warning that it could not store. */
            char src[800], body[8000] = "";
            snprintf(src, sizeof(src), "%s", in_row(row, "k.cu"));
            for (int j = 1; j < 300; j++) {
                size_t n = strlen(body);
                snprintf(body + n, sizeof(body) - n, "p[%d]=p[%d]*%u.0f+1;", j, j + 1, p + 1);
            }
            FILE *f = fopen(src, "w");
            REQUIRE(f);
            fprintf(f, "__global__ void k%u(float *p) { %s }\n", p, body);
            fclose(f);
            struct cli_out o;
            run_kcache(&o, db, NULL, 60, ARGS("compile", src, "--arch", "sm_90", "-o",
                                               in_row(row, "k.cubin")));
            if (o.rc == 0 && strstr(o.err, "not cached")) {
                failed++;
                continue;
            }
            if (o.rc == 0 && !strstr(o.err, "not cached"))
                continue; /* it fitted */
            /* No toolkit here: the library's puts instead. */
        }
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            /* Each a process of its own, as four compiles would be. */
            kcache_store *t = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_entry e = KCACHE_ENTRY_INIT;
            static uint8_t big[512 << 10];
            uint64_t x = 88172645463325252u + p; /* incompressible */
            for (size_t i = 0; i < sizeof(big); i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                big[i] = (uint8_t)(x >> 24);
            }
            e.key = st_key(900 + p);
            e.kind = KCACHE_KIND_CUBIN;
            e.arch = "sm_90";
            e.data = big;
            e.size = sizeof(big);
            /* What a compile records: a hit elsewhere, its miss, then the put. */
            kcache_entry *hit = NULL;
            kcache_key k1 = key_of(1);
            kcache_store_get(&hit, t, &k1, 0);
            kcache_entry_free(hit);
            kc_store_count_miss(t, "sm_90", KCACHE_KIND_CUBIN);
            int rc = kcache_store_put(t, &e);
            kcache_store_close(t);
            _exit(rc == KCACHE_EFULL ? 0 : 1);
        }
        int status;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        failed += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    EXPECT(failed >= 3, "only %u of 4 stores failed as disk full", failed);
    unlink(fill);
    s = st_open(db, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    REQUIRE(kcache_store_stats(&st, s) == 0);
    EXPECT(st->store_failures == failed, "store failures: %llu after %u disk-full stores",
           (unsigned long long)st->store_failures, failed);
    kcache_stats_free(st);
    kcache_store_close(s);
    umount2(mnt15, MNT_DETACH);
    mnt15[0] = '\0';
}
/* ---- 16: ls while another process creates the cache ------------------------------------- */

static void row16(int row)
{
    if (!have_exe()) {
        printf("row 16: KCACHE_EXE not set: skipped\n");
        rows_skipped++;
        return;
    }
    const char *db = in_row(row, "kcache.db");
    char lock[800], wal[800], shm[800];
    snprintf(lock, sizeof(lock), "%s-lock", db);
    snprintf(wal, sizeof(wal), "%s-wal", db);
    snprintf(shm, sizeof(shm), "%s-shm", db);
    /* Held at the worst moment: the creator has made the file and not yet its tables.
     * A creator holds its lock on the -lock file from before it makes the file. */
    for (int round = 0; round < 2; round++) {
        unlink(db), unlink(wal), unlink(shm), unlink(lock);
        int p[2];
        REQUIRE(pipe(p) == 0);
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            int fd = open(lock, O_RDWR | O_CREAT, 0600);
            struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
            if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0)
                _exit(1);
            test_spit(db, "", 0);
            REQUIRE(write(p[1], "x", 1) == 1);
            usleep(300000);
            kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_store_close(s);
            _exit(0);
        }
        close(p[1]);
        char c;
        REQUIRE(read(p[0], &c, 1) == 1);
        close(p[0]);
        struct cli_out o;
        run_kcache(&o, db, NULL, 30, ARGS("ls"));
        EXPECT(o.rc == 0, "ls while the cache is created: exit %d: %s", o.rc, o.err);
        int status;
        waitpid(pid, &status, 0);
    }
    /* And as it happens: ls started together with the first compile's open. */
    unsigned failed = 0, tries = 40;
    for (unsigned t = 0; t < tries; t++) {
        unlink(db), unlink(wal), unlink(shm), unlink(lock);
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_store_close(s);
            _exit(0);
        }
        struct cli_out o;
        run_kcache(&o, db, NULL, 30, ARGS("ls"));
        failed += o.rc != 0;
        int status;
        waitpid(pid, &status, 0);
    }
    EXPECT(failed == 0, "ls failed in %u of %u tries while the cache was created", failed, tries);
}

/* ---- 17: export --dir names ------------------------------------------------------------- */

static void row17(int row)
{
    if (!have_exe()) {
        printf("row 17: KCACHE_EXE not set: skipped\n");
        rows_skipped++;
        return;
    }
    const char *db = in_row(row, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 2; i++) {
        kcache_entry e = KCACHE_ENTRY_INIT;
        memset(e.key.bytes, 0xab, KCACHE_KEY_SIZE);
        e.key.bytes[31] = (uint8_t)i; /* the first 16 hex digits alike */
        e.kind = KCACHE_KIND_CUBIN;
        e.arch = "sm_90";
        e.name = "same.cu";
        e.size = 1000 + i;
        st_fill(scratch, e.size, i);
        e.data = scratch;
        REQUIRE(kcache_store_put(s, &e) == 0);
    }
    kcache_store_close(s);
    const char *dir = in_row(row, "out");
    struct cli_out o;
    run_kcache(&o, db, NULL, 30, ARGS("export", "--dir", dir));
    EXPECT(o.rc == 0, "export --dir: exit %d: %s", o.rc, o.err);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "test $(ls '%s/sm_90' | wc -l) -eq 2", dir);
    EXPECT(system(cmd) == 0, "export --dir wrote fewer than 2 files for 2 entries");
}

/* ---- 18: the suite from a clone in a 0700 directory, a path with spaces ----------------- */

static void row18(int row)
{
    const char *faults = getenv("TEST_FAULTS_EXE");
    if (!have_exe() || !faults || geteuid() != 0) {
        printf("row 18: needs root, KCACHE_EXE and TEST_FAULTS_EXE: skipped\n");
        rows_skipped++;
        return;
    }
    /*
     * A clone in a home only its owner may enter, as /root is, under a path
     * with a space: the executable with its library beside it ($ORIGIN/../lib),
     * test_faults, and a TMPDIR with a space that everyone can reach (as /tmp).
     */
    chmod(row_dir(row), 0711);
    const char *home = in_row(row, "home");
    REQUIRE(mkdir(home, 0700) == 0);
    char clone[900], tmp[900];
    snprintf(clone, sizeof(clone), "%s/my clone", home);
    snprintf(tmp, sizeof(tmp), "%s", in_row(row, "tmp dir"));
    REQUIRE(mkdir(tmp, 01777) == 0 && chmod(tmp, 01777) == 0);
    test_sh("mkdir -p '%s/cli' '%s/lib' '%s/tests' && cp '%s' '%s/cli/kcache' && "
            "find \"$(dirname '%s')/../lib\" -maxdepth 1 -name 'libkcache.so*' ! -type d "
            "-exec cp -P {} '%s/lib/' ';' && cp '%s' '%s/tests/'",
            clone, clone, clone, getenv("KCACHE_EXE"), clone, getenv("KCACHE_EXE"), clone,
            faults, clone);
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && env -u LD_LIBRARY_PATH KCACHE_EXE='%s/cli/kcache' TMPDIR='%s' "
             "'%s/tests/test_faults' >'%s/out' 2>&1; rc=$?; "
             "test $rc -eq 0 -o $rc -eq 77 || { cat '%s/out' >&2; exit 1; }",
             clone, clone, tmp, clone, home, home);
    EXPECT(system(cmd) == 0, "test_faults run from a clone under a 0700 directory failed");
}

/* ---------------------------------------------------------------------------------------- */

static void (*const rows[])(int) = {NULL,   row1,  row2,  row3,  row4,  row5,  row6,
                                   row7,   row8,  row9,  row10, row11, row12, row13,
                                   row14,  row15, row16, row17, row18};

int main(int argc, char **argv)
{
    double t0 = st_now();
    int want[KC_ARRAY_SIZE(rows)] = {0};
    int any = 0;
    for (int i = 1; i < argc; i++) {
        int r = atoi(argv[i]);
        REQUIRE(r >= 1 && r < (int)KC_ARRAY_SIZE(rows));
        want[r] = any = 1;
    }
    /* Other users reach the directory; what is inside stays each row's own. */
    chmod(test_dir(), 0711);
    for (int r = 1; r < (int)KC_ARRAY_SIZE(rows); r++) {
        if (any && !want[r])
            continue;
        int before = test_failures;
        unsigned skipped = rows_skipped;
        rows[r](r);
        rows_run++;
        const char *verdict = test_failures != before ? "FAILED"
                              : rows_skipped != skipped ? "skipped" : "ok";
        rows_failed += test_failures != before;
        printf("row %2d: %s\n", r, verdict);
        fflush(stdout);
    }
    printf("hardening: %u rows run, %u failed, %u skipped (%.1f s)\n", rows_run, rows_failed,
           rows_skipped, st_now() - t0);
    test_record("harden", "rows=%u\tfailed=%u\tskipped=%u", rows_run, rows_failed, rows_skipped);
    return test_done();
}
