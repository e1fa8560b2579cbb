/*
 * Real header trees, in small: the trees under tests/fixtures/trees reproduce
 * what broke kcache on CuPy's, thrust's and CCCL's headers, and the edits a
 * remembered closure must notice. Every compile is checked against plain
 * NVRTC reading the disk (same options, same seed), byte for byte, and every
 * warm result against what an empty cache gives. NVRTC runs on the CPU; no
 * GPU is needed. Skips (77) without a toolkit.
 */
#include <fcntl.h>
#include <limits.h>
#include <kcache/compile.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>

#include "compile/manifest.h"
#include "cuda/toolkit.h"
#include "compiletest.h"

#define SEED "--frandom-seed=0x6b63"

static const kc_nvrtc *api;
static char fixtures[600];
static int dbs;

static char last_db[700];

static kcache_store *new_store(void)
{
    snprintf(last_db, sizeof(last_db), "%s/cache%d.db", test_dir(), dbs++);
    kcache_store *s = ct_store_open(last_db);
    REQUIRE(s);
    return s;
}

static long long count(const char *db, const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    long long n = -1;
    REQUIRE(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    if (sqlite3_prepare_v2(h, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(h);
    return n;
}

/* Copies a fixture tree into the scratch directory; returns its path there. */
static const char *tree(const char *name)
{
    static char path[8][700];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof(path[0]), "%s/%s", test_dir(), name);
    test_sh("rm -rf '%s' && cp -R '%s/%s' '%s'", p, fixtures, name, p);
    return p;
}

struct opts {
    const char *v[8];
    size_t n;
};

static struct opts with_includes(const char *root, const char *a, const char *b, const char *extra)
{
    static char inc[2][800];
    struct opts o = {{0}, 0};
    if (a) {
        snprintf(inc[0], sizeof(inc[0]), "-I%s/%s", root, a);
        o.v[o.n++] = inc[0];
    }
    if (b) {
        snprintf(inc[1], sizeof(inc[1]), "-I%s/%s", root, b);
        o.v[o.n++] = inc[1];
    }
    o.v[o.n++] = SEED;
    if (extra)
        o.v[o.n++] = extra;
    return o;
}

static kcache_result *through(kcache_compiler *c, const char *path, const struct opts *o,
                              unsigned flags)
{
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = path;
    q.arch = "compute_90";
    q.options = o->v;
    q.n_options = o->n;
    q.flags = flags;
    kcache_result *r = NULL;
    kcache_compiler_compile(&r, c, &q);
    REQUIRE(r);
    return r;
}

/* Plain NVRTC, reading the disk as a program without kcache would: PTX, or NULL. */
static char *plain(const char *path, const struct opts *o, size_t *size)
{
    size_t n;
    uint8_t *src = test_slurp(path, &n);
    REQUIRE(src);
    src[n] = '\0';
    const char *argv[12] = {"-arch=compute_90"};
    size_t argc = 1;
    for (size_t i = 0; i < o->n; i++)
        argv[argc++] = o->v[i];
    nvrtcProgram p;
    REQUIRE(api->CreateProgram(&p, (const char *)src, path, 0, NULL, NULL) == NVRTC_SUCCESS);
    char *ptx = NULL;
    if (api->CompileProgram(p, (int)argc, argv) == NVRTC_SUCCESS) {
        REQUIRE(api->GetPTXSize(p, size) == NVRTC_SUCCESS);
        ptx = malloc(*size);
        REQUIRE(ptx);
        REQUIRE(api->GetPTX(p, ptx) == NVRTC_SUCCESS);
        if (*size && ptx[*size - 1] == '\0')
            (*size)--; /* kcache keeps PTX as text, without the NUL */
    }
    api->DestroyProgram(&p);
    free(src);
    return ptx;
}

/* Whether a result holds exactly what plain NVRTC makes of the same input now. */
static int same_as_plain(const kcache_result *r, const char *path, const struct opts *o)
{
    size_t n = 0;
    char *want = plain(path, o, &n);
    int same = want && r->status == 0 && r->size == n && memcmp(r->data, want, n) == 0;
    if (!same)
        fprintf(stderr, "%s: kcache (status %d: %s / %s) and plain NVRTC (%s) differ\n", path,
                r->status, r->message, r->store_message, want ? "compiled" : "failed");
    free(want);
    return same;
}

/* Whether a warm result is what an empty cache gives, byte for byte. */
static int same_as_cold(const kcache_result *warm, const char *path, const struct opts *o)
{
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *cold = through(c, path, o, 0);
    int same = cold->status == 0 && warm->status == 0 && cold->size == warm->size &&
               memcmp(cold->data, warm->data, cold->size) == 0 &&
               memcmp(cold->key.bytes, warm->key.bytes, KCACHE_KEY_SIZE) == 0;
    if (!same)
        fprintf(stderr, "%s: the warm cache (hit %d) and an empty one differ\n", path,
                warm->hit);
    kcache_result_free(cold);
    kcache_compiler_free(c);
    kcache_store_close(s);
    return same;
}

static uint64_t uncacheable(kcache_store *s, const char *reason)
{
    kcache_stats *st = NULL;
    REQUIRE(kcache_store_stats(&st, s) == 0);
    uint64_t n = 0;
    for (size_t i = 0; i < st->n_uncacheable; i++)
        if (!strcmp(st->uncacheable_reasons[i].reason, reason))
            n = st->uncacheable_reasons[i].count;
    kcache_stats_free(st);
    return n;
}

/* A cached compile, a hit, both equal to plain NVRTC. */
static void cached_and_equal(const char *what, const char *path, const struct opts *o)
{
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *miss = through(c, path, o, 0);
    kcache_result *hit = through(c, path, o, 0);
    if (!miss->keyed || miss->store_status)
        fprintf(stderr, "%s: not cached: %s\n", what, miss->store_message);
    CHECK(miss->status == 0 && miss->keyed && !miss->hit && miss->store_status == 0);
    CHECK(hit->status == 0 && hit->hit);
    CHECK(same_as_plain(miss, path, o));
    CHECK(same_as_plain(hit, path, o));
    kcache_result_free(miss);
    kcache_result_free(hit);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/* xsf's config.h: one #pragma once header, two spellings. */
static void test_two_spellings(void)
{
    const char *t = tree("once");
    char cu[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    struct opts o = with_includes(t, "inc", NULL, NULL);
    cached_and_equal("two spellings of one #pragma once header", cu, &o);
}

/* xsf/trig.h and xsf/cephes/trig.h. */
static void test_twin_basenames(void)
{
    const char *t = tree("twins");
    char cu[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    struct opts o = with_includes(t, "inc", NULL, NULL);
    cached_and_equal("twin basenames", cu, &o);
}

/* Two files whose canonical names would be one ("x/h.h"): the second gets another. */
static void test_colliding_names(void)
{
    const char *t = tree("collide");
    char cu[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    struct opts o = with_includes(t, "A", "B", NULL);
    cached_and_equal("two files one name would give", cu, &o);
}

/* thrust's <__THRUST_DEVICE_SYSTEM_ROOT/detail/for_each.h>, and a macro kcache does not follow. */
static void test_macro_paths(void)
{
    const char *t = tree("macro");
    char cu[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    struct opts o = with_includes(t, "inc", NULL, NULL);
    cached_and_equal("an include path built from macros", cu, &o);
    struct opts omp = with_includes(t, "inc", NULL, "-DSYS_DEVICE_OMP");
    cached_and_equal("the same, through the other branch", cu, &omp);

    snprintf(cu, sizeof(cu), "%s/stringized.cu", t);
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *r = through(c, cu, &o, 0);
    CHECK(r->status == 0 && !r->keyed && r->store_status == KCACHE_ENOTSUP);
    CHECK(strstr(r->store_message, "cannot work out") != NULL);
    CHECK(same_as_plain(r, cu, &o));
    CHECK(uncacheable(s, "computed_include") == 1);
    kcache_result_free(r);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * The other branch of the macro-built path is followed too: on one cache, the
 * -DSYS_DEVICE_OMP compile is a kernel of its own, and an edit to the header
 * only that branch reads is seen (a miss equal to plain NVRTC, not the kernel
 * of before).
 */
static void test_macro_other_branch(void)
{
    const char *t = tree("macro");
    char cu[800], h[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    snprintf(h, sizeof(h), "%s/inc/sys/omp/detail/for_each.h", t);
    struct opts o = with_includes(t, "inc", NULL, NULL);
    struct opts omp = with_includes(t, "inc", NULL, "-DSYS_DEVICE_OMP");
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *cuda = through(c, cu, &o, 0);
    kcache_result *before = through(c, cu, &omp, 0);
    CHECK(cuda->status == 0 && cuda->keyed);
    CHECK(before->status == 0 && before->keyed && !before->hit);
    CHECK(cuda->size != before->size || memcmp(cuda->data, before->data, cuda->size) != 0);
    test_write_text(h, "#pragma once\n"
                       "__device__ inline float for_each_factor() { return 23.5f; }\n");
    kcache_result *after = through(c, cu, &omp, 0);
    CHECK(after->status == 0 && !after->hit);
    CHECK(same_as_plain(after, cu, &omp));
    kcache_result_free(cuda);
    kcache_result_free(before);
    kcache_result_free(after);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * A header's __FILE__ is the path NVRTC opens it by in the hermetic compile
 * too (#line, resolve/names.c): a header that asserts its full path compiles,
 * keyed, as NVRTC alone gives it (kcache-key-6 handed it under its spelling:
 * the hermetic compile failed and ran again uncached).
 */
static void test_fallback(void)
{
    const char *t = tree("filename");
    char cu[800], bad[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    struct opts o = with_includes(t, NULL, NULL, NULL);
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *r = through(c, cu, &o, 0);
    CHECK(r->status == 0 && r->keyed && !r->hit);
    CHECK(same_as_plain(r, cu, &o));
    CHECK(uncacheable(s, "hermetic_failed") == 0);
    kcache_result_free(r);
    r = through(c, cu, &o, 0);
    CHECK(r->status == 0 && r->keyed && r->hit);
    CHECK(same_as_plain(r, cu, &o));
    kcache_result_free(r);
    /* A genuine error is still an error, with NVRTC's own log. */
    snprintf(bad, sizeof(bad), "%s/inc/broken.h", t);
    test_write_text(bad, "__device__ float broken() { return undefined_name; }\n");
    snprintf(bad, sizeof(bad), "%s/broken.cu", t);
    test_write_text(bad, "#include \"inc/broken.h\"\n");
    r = through(c, bad, &o, 0);
    CHECK(r->status == KCACHE_ECOMPILE && !r->data);
    CHECK(strstr(r->log, "undefined_name") != NULL);
    CHECK(uncacheable(s, "hermetic_failed") == 0);
    kcache_result_free(r);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

static void set_mtime(const char *path, const struct stat *as)
{
    struct timespec t[2] = {as->st_atim, as->st_mtim};
    REQUIRE(utimensat(AT_FDCWD, path, t, 0) == 0);
}

/* Edits a closure must see, each checked warm against cold. */
static void test_edits(void)
{
    const char *t = tree("edits");
    char cu[800], h[800], early[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    snprintf(h, sizeof(h), "%s/inc/h.h", t);
    test_sh("mkdir -p '%s/early'", t);
    struct opts o = with_includes(t, "early", "late", NULL);
    kcache_store *s = new_store();
    char db[700];
    snprintf(db, sizeof(db), "%s", last_db);
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *first = through(c, cu, &o, 0);
    CHECK(first->status == 0 && first->keyed && !first->hit);
    CHECK(same_as_plain(first, cu, &o));

    /* Size and mtime restored, bytes changed: only ctime tells, so trust
     * timestamps however recent to show that ctime is compared. */
    int64_t racy = kc_identity_racy_ns;
    kc_identity_racy_ns = 0;
    kcache_result *r = through(c, cu, &o, 0);
    CHECK(r->hit);
    kcache_result_free(r);
    struct stat st;
    REQUIRE(stat(h, &st) == 0);
    test_write_text(h, "#define H_VALUE 2222.0f\n");
    set_mtime(h, &st);
    r = through(c, cu, &o, 0);
    CHECK(!r->hit);
    CHECK(memcmp(r->key.bytes, first->key.bytes, KCACHE_KEY_SIZE) != 0);
    CHECK(same_as_plain(r, cu, &o));
    CHECK(same_as_cold(r, cu, &o));
    kcache_result_free(r);
    kc_identity_racy_ns = racy;

    /* A header appears earlier on the search path. */
    snprintf(early, sizeof(early), "%s/early/late.h", t);
    test_write_text(early, "#define LATE_VALUE 5.0f\n");
    r = through(c, cu, &o, 0);
    CHECK(!r->hit);
    CHECK(same_as_plain(r, cu, &o));
    CHECK(same_as_cold(r, cu, &o));
    kcache_result_free(r);

    /* Edited right after the compile that read it (inside the racy window). */
    test_write_text(h, "#define H_VALUE 3333.0f\n");
    kcache_result *before = through(c, cu, &o, 0);
    REQUIRE(stat(h, &st) == 0);
    test_write_text(h, "#define H_VALUE 4444.0f\n");
    set_mtime(h, &st);
    r = through(c, cu, &o, 0);
    CHECK(!r->hit);
    CHECK(same_as_plain(r, cu, &o));
    CHECK(same_as_cold(r, cu, &o));
    /* ... and put back: the earlier closure holds again, a hit. */
    test_write_text(h, "#define H_VALUE 3333.0f\n");
    kcache_result *back = through(c, cu, &o, 0);
    CHECK(back->hit && back->size == before->size &&
          memcmp(back->data, before->data, back->size) == 0);
    kcache_result_free(back);
    kcache_result_free(before);
    kcache_result_free(r);
    kcache_result_free(first);
    kcache_compiler_free(c);
    kcache_store_close(s);
    /* Replaced and refreshed closures leave no stored closure without a use. */
    CHECK(count(db, "SELECT count(*) FROM manifest") >= 2);
    CHECK(count(db, "SELECT count(*) FROM closure WHERE id NOT IN"
                    " (SELECT closure_id FROM manifest)") == 0);
}

/*
 * KCACHE_COMPILE_KEY_REMEMBERED: the key a hit would look up, from the
 * remembered closure while it holds (nothing resolved: no key material), and
 * the new key, derived again, once a header in it changed.
 */
static void test_key_remembered(void)
{
    const char *t = tree("edits");
    char cu[800], h[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    snprintf(h, sizeof(h), "%s/inc/h.h", t);
    struct opts o = with_includes(t, "late", NULL, NULL);
    int64_t racy = kc_identity_racy_ns;
    kc_identity_racy_ns = 0;
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    const unsigned remembered = KCACHE_COMPILE_KEY_ONLY | KCACHE_COMPILE_KEY_REMEMBERED;
    kcache_result *first = through(c, cu, &o, 0);
    CHECK(first->status == 0 && first->keyed && !first->hit);
    kcache_result *r = through(c, cu, &o, remembered);
    CHECK(r->status == 0 && r->keyed && r->key_material_size == 0 && !r->size);
    CHECK(memcmp(r->key.bytes, first->key.bytes, KCACHE_KEY_SIZE) == 0);
    kcache_result_free(r);

    struct stat st;
    REQUIRE(stat(h, &st) == 0);
    test_write_text(h, "#define H_VALUE 6666.0f\n");
    set_mtime(h, &st);
    r = through(c, cu, &o, remembered);
    kcache_result *derived = through(c, cu, &o, KCACHE_COMPILE_KEY_ONLY);
    CHECK(r->status == 0 && r->keyed && derived->status == 0 && derived->key_material_size);
    CHECK(memcmp(r->key.bytes, derived->key.bytes, KCACHE_KEY_SIZE) == 0);
    CHECK(memcmp(r->key.bytes, first->key.bytes, KCACHE_KEY_SIZE) != 0);
    kcache_result_free(derived);
    kcache_result_free(r);
    kcache_result_free(first);
    kc_identity_racy_ns = racy;
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * The process's memo of headers (resolve/depmemo.c): a header read for one
 * kernel is not read again for the next while its identity holds, and an edit
 * that restores size and mtime still shows (ctime). Timestamps are trusted
 * however recent, so that only the identity check can tell.
 */
static void test_memo(void)
{
    const char *t = tree("edits");
    char a[800], b[800], h[800];
    snprintf(a, sizeof(a), "%s/kernel.cu", t);
    snprintf(b, sizeof(b), "%s/other.cu", t);
    snprintf(h, sizeof(h), "%s/inc/h.h", t);
    test_write_text(b, "#include \"inc/h.h\"\n"
                       "extern \"C\" __global__ void other(float *v) { v[2] = H_VALUE; }\n");
    struct opts o = with_includes(t, "late", NULL, NULL);
    int64_t racy = kc_identity_racy_ns;
    kc_identity_racy_ns = 0;
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *r = through(c, a, &o, 0);
    CHECK(r->status == 0 && r->keyed);
    kcache_result_free(r);
    struct stat st;
    REQUIRE(stat(h, &st) == 0);
    test_write_text(h, "#define H_VALUE 5555.0f\n");
    set_mtime(h, &st);
    r = through(c, b, &o, 0);
    CHECK(r->status == 0 && r->keyed && !r->hit);
    CHECK(same_as_plain(r, b, &o));
    kcache_result_free(r);
    kc_identity_racy_ns = racy;
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * Where the compile cannot be made hermetic (here a %: directive in an
 * in-memory header), kcache compiles as NVRTC would, reading the disk: the
 * caller's in-memory headers are part of that, or the compile fails where
 * NVRTC passes.
 */
static void test_fallback_keeps_memory_headers(void)
{
    char dir[700], cwd[700], g[800];
    REQUIRE(getcwd(cwd, sizeof(cwd)));
    snprintf(dir, sizeof(dir), "%s/fallback-mem", test_dir());
    test_sh("mkdir -p '%s'", dir);
    snprintf(g, sizeof(g), "%s/g.h", dir);
    test_write_text(g, "#define G_VALUE 77\n");
    REQUIRE(chdir(dir) == 0);
    const char *names[] = {"mh.h"}, *contents[] = {"%:include \"g.h\"\n"};
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source = "#include \"mh.h\"\nextern \"C\" __global__ void k(int *o) { o[0] = G_VALUE; }\n";
    q.arch = "compute_90";
    q.n_headers = 1;
    q.header_names = names;
    q.header_contents = contents;
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *r = NULL;
    kcache_compiler_compile(&r, c, &q);
    REQUIRE(r);
    CHECK(r->status == 0 && !r->keyed);
    CHECK(r->status == 0 && r->data && strstr((const char *)r->data, "77"));
    if (r->status)
        printf("fallback: %s\n%s\n", r->message, r->log);
    kcache_result_free(r);
    kcache_compiler_free(c);
    kcache_store_close(s);
    REQUIRE(chdir(cwd) == 0);
}

/* kcache_key_describe(): fails on a header keyed without its content's digest. */
static int header_has_digest(void *userdata, const char *component, const char *value)
{
    int *headers = userdata;
    if (strcmp(component, "header") != 0)
        return 0;
    ++*headers;
    CHECK(strstr(value, "0000000000000000000000000000000000000000000000000000000000000000") == NULL);
    return 0;
}

/*
 * No key holds a header without its content's digest, however the header was
 * read: fresh, trusted (old) and kept in the process's memo, or served from
 * that memo to the next compile.
 */
static void test_every_header_digested(void)
{
    const char *t = tree("edits");
    char a[800];
    snprintf(a, sizeof(a), "%s/kernel.cu", t);
    struct opts o = with_includes(t, "late", NULL, NULL);
    int64_t racy = kc_identity_racy_ns;
    for (int old = 0; old < 2; old++) {
        kc_identity_racy_ns = old ? 0 : racy; /* 0: every file is old enough to trust */
        kcache_store *s = new_store();
        kcache_compiler *c = ct_compiler(s, NULL);
        for (int round = 0; round < 2; round++) {
            kcache_result *r = through(c, a, &o, KCACHE_COMPILE_REFRESH);
            int headers = 0;
            CHECK(r->status == 0 && r->keyed);
            CHECK(kcache_key_describe(r->key_material, r->key_material_size, header_has_digest,
                                      &headers) == 0);
            CHECK(headers > 0);
            kcache_result_free(r);
        }
        kcache_compiler_free(c);
        kcache_store_close(s);
    }
    kc_identity_racy_ns = racy;
}

/*
 * An edit within one timestamp tick of the read leaves size, mtime and ctime
 * as they were on file systems with coarse timestamps (Linux before 6.13's
 * multigrain timestamps, FAT, ext3): only hashing can tell, which is why a
 * recent file is hashed. What such a file system leaves is built here on any
 * file system: the identity the file has after the edit, recorded with the
 * digest of the bytes before it.
 */
static void test_same_tick(void)
{
    const char *path = test_path("tick.h");
    test_write_text(path, "#define TICK 1\n");
    char *text = NULL;
    size_t size;
    kc_probe before, after;
    memset(&before, 0, sizeof(before));
    memset(&after, 0, sizeof(after));
    REQUIRE(kc_identity_read(path, &text, &size, &before) == 0);
    free(text);
    test_write_text(path, "#define TICK 2\n");
    REQUIRE(kc_identity_read(path, &text, &size, &after) == 0);
    free(text);
    kc_probe p = after;
    memcpy(p.digest, before.digest, sizeof(p.digest));
    p.path = (char *)path;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t at = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    kc_buf blob = {0}, refreshed = {0};
    REQUIRE(kc_manifest_encode(&blob, &p, 1, NULL) == 0);
    int64_t racy = kc_identity_racy_ns;
    kc_identity_racy_ns = 0;
    /* Trusting the timestamps would keep the old bytes: the hazard. */
    CHECK(kc_manifest_check(blob.data, blob.size, at, NULL, &refreshed) == 1);
    kc_buf_free(&refreshed);
    kc_identity_racy_ns = racy;
    CHECK(kc_manifest_check(blob.data, blob.size, at, NULL, &refreshed) == 0);
    kc_buf_free(&refreshed);
    /* Read long after its last change, the same identity is trusted: no hashing per hit. */
    CHECK(kc_manifest_check(blob.data, blob.size, at + 2 * racy, NULL, &refreshed) == 1);
    CHECK(refreshed.size == 0);
    kc_buf_free(&refreshed);
    kc_buf_free(&blob);
}

/* Kernels that read the same files share one stored closure; none is left without a use. */
static void test_shared_closures(void)
{
    const char *t = tree("once");
    char a[800], b[800], db[700];
    snprintf(a, sizeof(a), "%s/kernel.cu", t);
    snprintf(b, sizeof(b), "%s/other.cu", t);
    test_write_text(b, "#include \"lib/a.h\"\n#include \"lib/sub/b.h\"\n"
                       "extern \"C\" __global__ void other(float *v) { v[1] = a_value(); }\n");
    struct opts o = with_includes(t, "inc", NULL, NULL);
    kcache_store *s = new_store();
    snprintf(db, sizeof(db), "%s", last_db);
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *ra = through(c, a, &o, 0);
    kcache_result *rb = through(c, b, &o, 0);
    CHECK(ra->status == 0 && ra->keyed && rb->status == 0 && rb->keyed);
    kcache_result_free(ra);
    kcache_result_free(rb);
    kcache_compiler_free(c);
    kcache_store_close(s);
    CHECK(count(db, "SELECT count(*) FROM manifest") == 2);
    CHECK(count(db, "SELECT count(*) FROM closure") == 1);
    /* An entry evicted takes its closure's use with it; the last use, the closure. */
    s = new_store();
    kcache_store_close(s);
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    char err[256];
    REQUIRE(kcache_store_open(&s, &so, err, sizeof(err)) == 0);
    REQUIRE(kcache_store_clear(s) == 0);
    kcache_store_close(s);
    CHECK(count(db, "SELECT count(*) FROM manifest") == 0);
    CHECK(count(db, "SELECT count(*) FROM closure") == 0);
}

/* --pch does not split keys, and a hit does not replay the miss's PCH lines. */
static void test_pch(void)
{
    const char *t = tree("once");
    char cu[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    struct opts o = with_includes(t, "inc", NULL, NULL);
    struct opts pch = with_includes(t, "inc", NULL, "--pch");
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *a = through(c, cu, &o, KCACHE_COMPILE_KEY_ONLY);
    kcache_result *miss = through(c, cu, &pch, 0);
    CHECK(memcmp(a->key.bytes, miss->key.bytes, KCACHE_KEY_SIZE) == 0);
    CHECK(miss->status == 0 && !miss->hit);
    kcache_result *hit = through(c, cu, &pch, 0);
    CHECK(hit->status == 0 && hit->hit);
    /* kcache compiles without --pch: its bytes are NVRTC's without it, byte for byte (with
     * it, NVRTC may order module-scope variables otherwise: lib/compile/opts.c). */
    kcache_result *without = through(c, cu, &o, KCACHE_COMPILE_NO_CACHE);
    CHECK(without->status == 0 && without->size == miss->size &&
          memcmp(without->data, miss->data, miss->size) == 0);
    kcache_result_free(without);
    /* A hermetic compile hands NVRTC no --pch (compile/nvrtc.c): no PCH made or used. */
    CHECK(strstr(miss->log, "precompiled header") == NULL);
    CHECK(strstr(hit->log, "precompiled header") == NULL);
    kcache_result_free(a);
    kcache_result_free(miss);
    kcache_result_free(hit);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * NVRTC 13's automatic PCH is reused within a process whenever the options
 * and the opening directives match, whatever the headers now say: a miss
 * after an edit, compiled with --pch in the same process, must still be the
 * edited header's kernel (kcache leaves --pch out of a hermetic compile).
 */
static void test_pch_after_edit(void)
{
    const char *t = tree("edits");
    char cu[800], h[800];
    snprintf(cu, sizeof(cu), "%s/kernel.cu", t);
    snprintf(h, sizeof(h), "%s/inc/h.h", t);
    struct opts pch = with_includes(t, "late", NULL, "--pch");
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *first = through(c, cu, &pch, 0);
    CHECK(first->status == 0 && !first->hit);
    if (first->status || first->hit)
        printf("pch first: %d %s %s\n", first->status, first->message, first->log);
    test_write_text(h, "#define H_VALUE 4242.5f\n");
    kcache_result *after = through(c, cu, &pch, 0);
    CHECK(after->status == 0 && !after->hit);
    CHECK(same_as_plain(after, cu, &pch));
    kcache_result_free(first);
    kcache_result_free(after);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * The same for a compile kcache cannot make hermetic (a %: directive): it
 * reads the disk, uncached, and still leaves --pch out, so an edit in the same
 * process is the edited header's kernel, not the one NVRTC's PCH remembers.
 */
static void test_pch_uncached_after_edit(void)
{
    const char *t = tree("edits");
    char cu[800], h[800];
    snprintf(cu, sizeof(cu), "%s/digraph.cu", t);
    snprintf(h, sizeof(h), "%s/inc/h.h", t);
    test_write_text(cu, "#include \"inc/h.h\"\n#include <late.h>\n%:define UNUSED 1\n"
                        "extern \"C\" __global__ void edits(float *v) { v[0] = H_VALUE; }\n");
    struct opts pch = with_includes(t, "late", NULL, "--pch");
    /* Plain NVRTC in this process with --pch would reuse a PCH too: compare without. */
    struct opts fresh = with_includes(t, "late", NULL, NULL);
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *first = through(c, cu, &pch, 0);
    CHECK(first->status == 0 && !first->keyed);
    CHECK(same_as_plain(first, cu, &fresh));
    test_write_text(h, "#define H_VALUE 777.25f\n");
    kcache_result *after = through(c, cu, &pch, 0);
    CHECK(after->status == 0 && !after->keyed);
    CHECK(same_as_plain(after, cu, &fresh));
    kcache_result_free(first);
    kcache_result_free(after);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * The toolkit's crt/ headers include "host_defines.h": plain NVRTC takes
 * crt/host_defines.h beside them, while -I <toolkit>/include alone would give
 * the deprecated wrapper include/host_defines.h. The hermetic compile hands
 * "host_defines.h" over as crt/'s (no other lookup of that name finds
 * anything else), so <cuda_runtime.h> is cached.
 */
static void test_toolkit_beside(const char *root)
{
    char cu[800], inc[800], beside[800], other[800];
    struct stat st;
    snprintf(beside, sizeof(beside), "%s/include/crt/host_defines.h", root);
    snprintf(other, sizeof(other), "%s/include/host_defines.h", root);
    if (stat(beside, &st) != 0 || stat(other, &st) != 0) {
        printf("toolkit_beside: this toolkit has no host_defines.h wrapper; not checked\n");
        return;
    }
    snprintf(cu, sizeof(cu), "%s/runtime.cu", test_dir());
    test_write_text(cu, "#include <cuda_runtime.h>\n"
                        "extern \"C\" __global__ void k(float *p) { p[0] = 1.0f; }\n");
    snprintf(inc, sizeof(inc), "-I%s/include", root);
    struct opts o = {{inc, SEED}, 2};
    cached_and_equal("cuda_runtime.h", cu, &o);
}

/*
 * A toolkit of the test's making: the real one's NVRTC and nvvm, and an
 * include/ whose headers do what crt/ does, on names the test controls.
 * a/x.h includes "y.h": a/y.h beside it (V 7), y.h in include/ (V 1); b/z.h
 * includes "w.h", which only b/ holds; c/q.h, in a branch not taken,
 * "only_c.h", which only c/ holds; d/t.h "v.h", d/v.h beside it, which
 * includes <lvl.h> from the user's directories.
 */
static void make_toolkit(char *root, size_t size, const kc_toolkit *tk)
{
    char path[PATH_MAX + 64];
    snprintf(root, size, "%s/toolkit of ours", test_dir());
    test_sh("rm -rf '%s' && mkdir -p '%s/lib64' '%s/include/a' '%s/include/b' '%s/include/c' "
            "'%s/include/d' '%s/include/e' '%s/include/extra' && ln -s '%s/version.json' "
            "'%s/nvvm' '%s/' && ln -s '%s' '%s/lib64/'",
            root, root, root, root, root, root, root, root, tk->root, tk->root, root,
            tk->nvrtc_path, root);
    static const char *const files[][2] = {
        {"a/x.h", "#include \"y.h\"\n"},
        {"a/y.h", "#define V 7\n"},
        {"a/only_a.h", "#define ONLY_A 1\n"},
        {"y.h", "#define V 1\n#define FROM_TOP 1\n"},
        {"d/t.h", "#include \"v.h\"\n"},
        {"d/v.h", "#include <lvl.h>\n"},
        {"v.h", "#define NOT_D 1\n"},
        {"e/e.h", "#if __has_include(<p.h>)\n#define P 1\n#else\n#define P 0\n#endif\n"},
        {"extra/p.h", "#define P_HERE 1\n"},
        {"hz.h", "#if __has_include(<z.h>)\n#define HZ 1\n#else\n#define HZ 0\n#endif\n"},
        {"z.h", "#define Z_HERE 1\n"},
        {"hz.cu", "#include \"hz.h\"\nextern \"C\" __global__ void k(int *p) { p[0] = HZ; }\n"},
        {"b/z.h", "#include \"w.h\"\n"},
        {"b/w.h", "#define W 3\n"},
        {"c/q.h", "#ifdef KC_NEVER\n#include \"only_c.h\"\n#endif\n#define Q 4\n"},
        {"c/only_c.h", "#define OC 1\n"},
    };
    for (size_t i = 0; i < KC_ARRAY_SIZE(files); i++) {
        snprintf(path, sizeof(path), "%s/include/%s", root, files[i][0]);
        test_write_text(path, files[i][1]);
    }
}

/* One source against the toolkit of ours: cached (and a hit, and recompiled the same) or not. */
static void beside_case(const char *root, const char *name, const char *text, int cached)
{
    char cu[800], inc[800];
    snprintf(cu, sizeof(cu), "%s/%s.cu", test_dir(), name);
    test_write_text(cu, text);
    snprintf(inc, sizeof(inc), "-I%s/include", root);
    struct opts o = {{inc, SEED}, 2};
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, root);
    kcache_result *miss = through(c, cu, &o, 0);
    kcache_result *again = through(c, cu, &o, 0);
    if (miss->keyed != cached)
        fprintf(stderr, "%s: keyed %d, want %d (%s)\n", name, miss->keyed, cached,
                miss->store_message);
    CHECK(miss->status == 0 && miss->keyed == cached && again->hit == cached);
    CHECK(same_as_plain(miss, cu, &o));
    CHECK(same_as_plain(again, cu, &o));
    if (cached) {
        kcache_result *re = NULL;
        int same = 0;
        CHECK(kcache_compiler_recompile(&re, &same, c, &miss->key) == 0 && same);
        kcache_result_free(re);
    } else {
        CHECK(uncacheable(s, "toolkit_beside") == 2);
        CHECK(strstr(miss->store_message, "only_a.h") || strstr(miss->store_message, "y.h"));
    }
    kcache_result_free(miss);
    kcache_result_free(again);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * A user directory ahead of the toolkit's holding a link into the toolkit:
 * <y.h> is a/y.h to plain NVRTC, while the hermetic compile, which passes the
 * toolkit's directories alone, would take include/y.h. Found through a user
 * directory, it is a user file (read, hashed, handed over): NVRTC's bytes.
 */
static void test_linked_into_toolkit(const char *root)
{
    char cu[800], inc[2][PATH_MAX + 32];
    snprintf(cu, sizeof(cu), "%s/linked.cu", test_dir());
    test_sh("rm -rf '%s/linked' && mkdir '%s/linked' && ln -s '%s/include/a/y.h' '%s/linked/y.h'",
            test_dir(), test_dir(), root, test_dir());
    test_write_text(cu, "#include <y.h>\nextern \"C\" __global__ void k(int *p) { p[0] = V; }\n");
    snprintf(inc[0], sizeof(inc[0]), "-I%s/linked", test_dir());
    snprintf(inc[1], sizeof(inc[1]), "-I%s/include", root);
    struct opts o = {{inc[0], inc[1], SEED}, 3};
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, root);
    kcache_result *miss = through(c, cu, &o, 0);
    CHECK(miss->status == 0 && miss->keyed && miss->n_headers == 1);
    CHECK(same_as_plain(miss, cu, &o));
    kcache_result_free(miss);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/* One compile against the toolkit of ours, expected uncached (toolkit_beside) and NVRTC's. */
static void beside_uncached(const char *root, const char *name, const char *text,
                            const struct opts *o)
{
    char cu[800];
    snprintf(cu, sizeof(cu), "%s/%s.cu", test_dir(), name);
    test_write_text(cu, text);
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, root);
    kcache_result *miss = through(c, cu, o, 0);
    if (miss->keyed)
        fprintf(stderr, "%s: cached, want uncached\n", name);
    CHECK(miss->status == 0 && !miss->keyed && uncacheable(s, "toolkit_beside") == 1);
    CHECK(same_as_plain(miss, cu, o));
    kcache_result_free(miss);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * An -include found in the working directory (include/y.h) where "y.h" is
 * handed over as a/y.h: NVRTC takes the in-memory header first there too.
 */
static void test_beside_pre_include(const char *root)
{
    char inc[PATH_MAX + 32], dir[PATH_MAX + 32], cwd[PATH_MAX];
    snprintf(inc, sizeof(inc), "-I%s/include", root);
    snprintf(dir, sizeof(dir), "%s/include", root);
    struct opts o = {{inc, "--pre-include=y.h", SEED}, 3};
    REQUIRE(getcwd(cwd, sizeof(cwd)) && chdir(dir) == 0);
    beside_uncached(root, "beside_pre_include", "#include <a/x.h>\n"
                    "#ifdef FROM_TOP\n#define U 1\n#else\n#define U 2\n#endif\n"
                    "extern \"C\" __global__ void k(int *p) { p[0] = V + U; }\n", &o);
    REQUIRE(chdir(cwd) == 0);
}

/*
 * A handed header is one #include deeper than the file it names: <lvl.h>,
 * reached through d/v.h, reads __INCLUDE_LEVEL__ (3 to NVRTC, 4 through it).
 */
static void test_beside_include_level(const char *root)
{
    char inc[2][PATH_MAX + 32], lvl[PATH_MAX + 32];
    snprintf(lvl, sizeof(lvl), "%s/lvl/lvl.h", test_dir());
    test_sh("mkdir -p '%s/lvl'", test_dir());
    test_write_text(lvl, "static __device__ const int lvl = __INCLUDE_LEVEL__;\n");
    snprintf(inc[0], sizeof(inc[0]), "-I%s/lvl", test_dir());
    snprintf(inc[1], sizeof(inc[1]), "-I%s/include", root);
    struct opts o = {{inc[0], inc[1], SEED}, 3};
    beside_uncached(root, "beside_level", "#include <d/t.h>\n"
                    "extern \"C\" __global__ void k(int *p) { p[0] = lvl; }\n", &o);
}

/*
 * What a toolkit header finds depends on the toolkit directories passed, not
 * only on what the source's own includes find: e/e.h asks __has_include(<p.h>),
 * which only include/extra holds. With and without -I include/extra the
 * source's includes find the same files; the kernels differ, and so must
 * the keys.
 */
static void test_toolkit_dirs_keyed(const char *root)
{
    char cu[800], inc[2][PATH_MAX + 64];
    snprintf(cu, sizeof(cu), "%s/dirs.cu", test_dir());
    test_write_text(cu, "#include <e/e.h>\nextern \"C\" __global__ void k(int *p) { p[0] = P; }\n");
    snprintf(inc[0], sizeof(inc[0]), "-I%s/include", root);
    snprintf(inc[1], sizeof(inc[1]), "-I%s/include/extra", root);
    struct opts without = {{inc[0], SEED}, 2}, with = {{inc[0], inc[1], SEED}, 3};
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, root);
    kcache_result *a = through(c, cu, &without, 0);
    kcache_result *b = through(c, cu, &with, 0);
    CHECK(a->status == 0 && a->keyed && b->status == 0 && b->keyed && !b->hit);
    CHECK(same_as_plain(a, cu, &without));
    CHECK(same_as_plain(b, cu, &with));
    kcache_result_free(a);
    kcache_result_free(b);
    /*
     * The same through a link re-pointed from include/extra to a user
     * directory: the closure kept from the first compile must not answer
     * for the second (no closure records what toolkit headers find).
     */
    char link[PATH_MAX + 32], user[PATH_MAX + 32];
    snprintf(link, sizeof(link), "%s/tklink", test_dir());
    snprintf(user, sizeof(user), "%s/tkuser", test_dir());
    test_sh("rm -rf '%s' '%s' && mkdir '%s' && ln -s '%s/include/extra' '%s'", link, user, user,
            root, link);
    snprintf(inc[1], sizeof(inc[1]), "-I%s", link);
    kcache_result *first = through(c, cu, &with, 0);
    CHECK(first->status == 0 && first->keyed && same_as_plain(first, cu, &with));
    test_sh("rm '%s' && ln -s '%s' '%s'", link, user, link);
    kcache_result *second = through(c, cu, &with, 0);
    CHECK(second->status == 0 && same_as_plain(second, cu, &with));
    kcache_result_free(first);
    kcache_result_free(second);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/*
 * A source inside the toolkit compiled with no -I: its key names no toolkit
 * directory, and a recompile must add none (hz.h's <z.h> would then be found).
 */
static void test_recompile_no_toolkit_dir(const char *root)
{
    char cu[PATH_MAX + 32];
    snprintf(cu, sizeof(cu), "%s/include/hz.cu", root);
    struct opts o = {{SEED}, 1};
    kcache_store *s = new_store();
    kcache_compiler *c = ct_compiler(s, root);
    kcache_result *miss = through(c, cu, &o, 0);
    CHECK(miss->status == 0 && miss->keyed && same_as_plain(miss, cu, &o));
    kcache_result *re = NULL;
    int same = 0;
    CHECK(kcache_compiler_recompile(&re, &same, c, &miss->key) == 0 && same);
    kcache_result_free(re);
    kcache_result_free(miss);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

static void test_toolkit_beside_names(const kc_toolkit *tk)
{
    char root[PATH_MAX];
    make_toolkit(root, sizeof(root), tk);
    /* a/ goes first: "y.h" from a/x.h is a/y.h, as plain NVRTC finds it. */
    beside_case(root, "beside_y", "#include <a/x.h>\n"
                "extern \"C\" __global__ void k(int *p) { p[0] = V; }\n", 1);
    /* b/w.h is nowhere else: without b/ first the hermetic compile would not find it. */
    beside_case(root, "beside_only", "#include <b/z.h>\n"
                "extern \"C\" __global__ void k(int *p) { p[0] = W; }\n", 1);
    /* <y.h> from the source is include/y.h, "y.h" from a/x.h is a/y.h: one name, two files. */
    beside_case(root, "beside_angled", "#include <y.h>\n"
                "static __device__ const int v1 = V;\n#undef V\n#include <a/x.h>\n"
                "extern \"C\" __global__ void k(int *p) { p[0] = v1 * 10 + V; }\n", 0);
    /* <only_a.h> is nowhere plain NVRTC looks, and stays so: only "y.h" is handed over. */
    beside_case(root, "beside_absent", "#include <a/x.h>\n"
                "#if __has_include(<only_a.h>)\n#define U 5\n#else\n#define U 6\n#endif\n"
                "extern \"C\" __global__ void k(int *p) { p[0] = V + U; }\n", 1);
    /* "only_c.h" handed over would turn <only_c.h> true; it is in a branch not taken, as before. */
    beside_case(root, "beside_not_taken", "#include <c/q.h>\n"
                "#if __has_include(<only_c.h>)\n#define U 1\n#else\n#define U 2\n#endif\n"
                "extern \"C\" __global__ void k(int *p) { p[0] = Q + U; }\n", 1);
    test_linked_into_toolkit(root);
    test_beside_pre_include(root);
    test_beside_include_level(root);
    test_toolkit_dirs_keyed(root);
    test_recompile_no_toolkit_dir(root);
}

int main(void)
{
    const char *f = getenv("FIXTURES");
    if (!f) {
        printf("FIXTURES not set\n");
        return TEST_SKIP;
    }
    snprintf(fixtures, sizeof(fixtures), "%s/trees", f);
    kc_toolkit tk;
    if (ct_nvrtc_find(&tk, &api))
        return TEST_SKIP;
    test_two_spellings();
    test_twin_basenames();
    test_colliding_names();
    test_macro_paths();
    test_macro_other_branch();
    test_fallback();
    test_edits();
    test_key_remembered();
    test_memo();
    test_every_header_digested();
    test_fallback_keeps_memory_headers();
    test_same_tick();
    test_shared_closures();
    test_pch();
    test_pch_after_edit();
    test_pch_uncached_after_edit();
    test_toolkit_beside(tk.root);
    test_toolkit_beside_names(&tk);
    kc_toolkit_free(&tk);
    return test_done();
}
