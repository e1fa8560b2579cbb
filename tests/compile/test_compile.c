/*
 * Compiling through the cache with the real NVRTC and nvJitLink (no GPU
 * needed): hermetic headers checked against NVRTC's own search, computed
 * includes, failed compiles, LTO links, lowered names, single flight,
 * reproducible bytes, and a store that cannot be written.
 * Skips (77) where the toolkit is missing.
 */
#include <dirent.h>
#include <kcache/compile.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "compiletest.h"
#include "compile/compileint.h"
#include "cuda/toolkit.h"

static const char *corpus;
static char db[600];

static kcache_store *open_store(const char *path, int read_only)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.read_only = read_only;
    kcache_store *s = NULL;
    char err[512];
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "open %s: %s\n", path, err);
    REQUIRE(rc == 0);
    return s;
}

static kcache_result *compile(kcache_compiler *c, const char *path, const char *arch,
                              const char *const *opts, size_t n_opts, kcache_kind kind,
                              unsigned flags)
{
    kcache_request r = ct_request(NULL, arch, kind, opts, n_opts);
    r.source_path = path;
    r.flags = flags;
    kcache_result *res = NULL;
    int rc = kcache_compiler_compile(&res, c, &r);
    REQUIRE(res);
    if (rc && rc != KCACHE_ECOMPILE)
        fprintf(stderr, "compile %s: %s\n", path, res->message);
    return res;
}

static kcache_stats *stats(kcache_store *s)
{
    kcache_stats *st = NULL;
    REQUIRE(kcache_store_stats(&st, s) == 0);
    return st;
}

/*
 * Which header NVRTC picked, by the __device__ variable it defines: a
 * picked_NAME symbol in the PTX.
 */
static const char *picked(const char *ptx, char *out, size_t size)
{
    const char *p = ptx ? strstr(ptx, "picked_") : NULL;
    if (!p)
        return "none";
    size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_0123456789");
    snprintf(out, size, "%.*s", (int)KC_MIN(n, size - 1), p);
    return out;
}

/* NVRTC on its own, reading from disk: the reference for the search order. */
static const char *nvrtc_pick(const kc_nvrtc *api, const char *name, const char *src,
                              const char *const *opts, int n, char *out, size_t size)
{
    nvrtcProgram p;
    REQUIRE(api->CreateProgram(&p, src, name, 0, NULL, NULL) == NVRTC_SUCCESS);
    const char *result = "error";
    if (api->CompileProgram(p, n, opts) == NVRTC_SUCCESS) {
        size_t ptx_size;
        api->GetPTXSize(p, &ptx_size);
        char *ptx = malloc(ptx_size);
        REQUIRE(ptx);
        api->GetPTX(p, ptx);
        result = picked(ptx, out, size);
        free(ptx);
    }
    api->DestroyProgram(&p);
    return result;
}

/*
 * NVRTC's own cache is off unless asked for: --no-cache reaches NVRTC once,
 * whatever the caller spelled, and NVRTC 13 accepts both of its spellings.
 */
static size_t count_no_cache(const char *const *argv, size_t argc, unsigned flags)
{
    kc_opts o;
    char msg[256];
    REQUIRE(kc_opts_parse(&o, argv, argc, msg, sizeof(msg)) == 0);
    char **v = NULL;
    size_t n = 0, found = 0;
    REQUIRE(kc_nvrtc_cache_option(&v, &n, &o, flags) == 0);
    for (size_t i = 0; i < o.n_unkeyed; i++)
        found += strcmp(o.unkeyed[i], "--no-cache") == 0;
    for (size_t i = 0; i < n; i++)
        found += strcmp(v[i], "--no-cache") == 0;
    for (size_t i = 0; i < o.n_canonical; i++) /* never keyed */
        CHECK(strstr(o.canonical[i], "no-cache") == NULL);
    kc_strv_free(v, n);
    kc_opts_free(&o);
    return found;
}

static void test_nvrtc_cache_off(const kc_nvrtc *api)
{
    const char *none[] = {"-std=c++17"};
    const char *short_form[] = {"-no-cache"};
    const char *long_form[] = {"--no-cache", "-std=c++17"};
    CHECK(count_no_cache(none, 1, 0) == 1);
    CHECK(count_no_cache(short_form, 1, 0) == 1);
    CHECK(count_no_cache(long_form, 2, 0) == 1);
    CHECK(count_no_cache(none, 1, KCACHE_COMPILE_NVRTC_CACHE) == 0);
    /* what kcache hands NVRTC must be an option NVRTC 13 takes */
    char out[64];
    const char *src = "__device__ int picked_x;\n";
    const char *o1[] = {"--no-cache"}, *o2[] = {"-no-cache"};
    CHECK(strcmp(nvrtc_pick(api, "x.cu", src, o1, 1, out, sizeof(out)), "error") != 0);
    CHECK(strcmp(nvrtc_pick(api, "x.cu", src, o2, 1, out, sizeof(out)), "error") != 0);
}

static void test_search_order_matches_nvrtc(kcache_compiler *c, const kc_nvrtc *api)
{
    char t[600], src_dir[700], main_cu[800], i1[700], i2[700];
    snprintf(t, sizeof(t), "%s/order", test_dir());
    test_sh("mkdir -p '%s/src/sub' '%s/I1' '%s/I2'", t, t, t);
    struct {
        const char *file, *text;
    } files[] = {
        {"src/sub/a.h", "#include \"b.h\"\n"},
        {"src/sub/b.h", "__device__ int picked_sub_b;\n"},
        {"I1/b.h", "__device__ int picked_i1_b;\n"},
        {"I2/b.h", "__device__ int picked_i2_b;\n"},
        {"src/c.h", "__device__ int picked_src_c;\n"},
        {"I1/c.h", "__device__ int picked_i1_c;\n"},
        {"I1/d.h", "__device__ int picked_i1_d;\n"},
        {"I2/d.h", "__device__ int picked_i2_d;\n"},
        {"src/only.h", "__device__ int picked_src_only;\n"},
        {"I2/only.h", "__device__ int picked_i2_only;\n"},
        {"src/sub/e.h", "#include \"c.h\"\n"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char p[900];
        snprintf(p, sizeof(p), "%s/%s", t, files[i].file);
        test_write_text(p, files[i].text);
    }
    snprintf(src_dir, sizeof(src_dir), "%s/src", t);
    snprintf(i1, sizeof(i1), "-I%s/I1", t);
    snprintf(i2, sizeof(i2), "-I%s/I2", t);
    struct {
        const char *what, *source;
    } cases[] = {
        {"a quoted include searches its includer's directory first", "#include \"sub/a.h\"\n"},
        {"the source's directory comes before -I", "#include \"c.h\"\n"},
        {"angled includes skip the source's directory", "#include <c.h>\n"},
        {"-I directories in order", "#include <d.h>\n"},
        {"angled: found only through -I", "#include <only.h>\n"},
        {"nested quoted: the source's directory is not searched", "#include \"sub/e.h\"\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(main_cu, sizeof(main_cu), "%s/main%zu.cu", src_dir, i);
        test_write_text(main_cu, cases[i].source);
        const char *opts[] = {i1, i2};
        const char *ref_opts[] = {"-arch=compute_90", i1, i2};
        char ours[64], theirs[64];
        kcache_result *r = compile(c, main_cu, "compute_90", opts, 2, KCACHE_KIND_PTX,
                                   KCACHE_COMPILE_NO_CACHE);
        CHECK(r->status == 0);
        CHECK(r->keyed);
        const char *got = picked(r->data, ours, sizeof(ours));
        const char *want = nvrtc_pick(api, main_cu, cases[i].source, ref_opts, 3, theirs,
                                      sizeof(theirs));
        if (strcmp(got, want) != 0)
            fprintf(stderr, "%s: kcache compiled %s, NVRTC alone picks %s\n", cases[i].what,
                    got, want);
        CHECK(strcmp(got, want) == 0);
        CHECK(strcmp(got, "none") != 0);
        kcache_result_free(r);
    }
}

static void test_computed_include(kcache_store *s, kcache_compiler *c)
{
    char t[600], cu[700], hdr[700];
    snprintf(t, sizeof(t), "%s/computed", test_dir());
    test_sh("mkdir -p '%s' && cp '%s/computed_include.cu' '%s/' && cp -R '%s/headers' '%s/'",
            t, corpus, t, corpus, t);
    snprintf(cu, sizeof(cu), "%s/computed_include.cu", t);
    snprintf(hdr, sizeof(hdr), "%s/headers/include/common.cuh", t);
    kcache_result *a = compile(c, cu, "sm_90", NULL, 0, 0, 0);
    CHECK(a->status == 0 && a->keyed && !a->hit);
    kcache_result *b = compile(c, cu, "sm_90", NULL, 0, 0, 0);
    CHECK(b->status == 0 && b->hit);
    kcache_result_free(b);
    /* The header the macro names changes: never the old artifact. */
    test_write_text(hdr, "#pragma once\n#include \"detail/math.cuh\"\n"
                         "__device__ inline float common_scale(float x) { return 3.0f * x; }\n");
    b = compile(c, cu, "sm_90", NULL, 0, 0, 0);
    CHECK(b->status == 0 && !b->hit);
    CHECK(memcmp(a->key.bytes, b->key.bytes, KCACHE_KEY_SIZE) != 0);
    CHECK(a->size != b->size || memcmp(a->data, b->data, a->size) != 0);
    kcache_result_free(a);
    kcache_result_free(b);

    /* A macro kcache cannot follow: compiled, not cached, and told what to pass. */
    char odd[700];
    snprintf(odd, sizeof(odd), "%s/odd.cu", t);
    test_write_text(odd, "#define STR(x) #x\n#define HDR(x) STR(x)\n"
                         "#include HDR(headers/local_config.cuh)\n"
                         "extern \"C\" __global__ void k(float *v) { v[0] = BLEND_WEIGHT; }\n");
    kcache_stats *before = stats(s);
    a = compile(c, odd, "sm_90", NULL, 0, 0, 0);
    CHECK(a->status == 0 && a->data && a->size > 0);
    CHECK(!a->keyed && !a->hit);
    CHECK(a->store_status == KCACHE_ENOTSUP && strstr(a->store_message, "-D"));
    kcache_stats *after = stats(s);
    CHECK(after->entries == before->entries);
    kcache_stats_free(before);
    kcache_stats_free(after);
    kcache_result_free(a);
    /* ... and given with -D, it is resolved and cached. */
    test_write_text(odd, "#include PICK\n"
                         "extern \"C\" __global__ void k(float *v) { v[0] = BLEND_WEIGHT; }\n");
    const char *def[] = {"-DPICK=\"headers/local_config.cuh\""};
    a = compile(c, odd, "sm_90", def, 1, 0, 0);
    CHECK(a->status == 0 && a->keyed && a->store_status == 0);
    kcache_result_free(a);
}

static void test_broken(kcache_store *s, kcache_compiler *c)
{
    char cu[700];
    snprintf(cu, sizeof(cu), "%s/broken.cu", corpus);
    kcache_stats *before = stats(s);
    kcache_result *r = compile(c, cu, "sm_90", NULL, 0, 0, 0);
    CHECK(r->status == KCACHE_ECOMPILE);
    CHECK(r->data == NULL);
    CHECK(r->log && strstr(r->log, "undefined_symbol"));
    kcache_stats *after = stats(s);
    CHECK(after->entries == before->entries);
    kcache_stats_free(before);
    kcache_stats_free(after);
    kcache_result_free(r);
}

static void test_lowered_names(kcache_compiler *c)
{
    char cu[700];
    snprintf(cu, sizeof(cu), "%s/tiled_gemm.cu", corpus);
    const char *exprs[] = {"tiled_gemm<float, 16>", "tiled_gemm<double, 8>"};
    kcache_request q = KCACHE_REQUEST_INIT;
    q.source_path = cu;
    q.arch = "sm_90";
    q.name_exprs = exprs;
    q.n_name_exprs = 2;
    kcache_result *miss = NULL, *hit = NULL;
    CHECK_RC(kcache_compiler_compile(&miss, c, &q), 0);
    CHECK_RC(kcache_compiler_compile(&hit, c, &q), 0);
    REQUIRE(miss && hit);
    CHECK(!miss->hit && hit->hit);
    for (size_t i = 0; i < 2; i++) {
        const char *a = kcache_result_lowered_name(miss, exprs[i]);
        const char *b = kcache_result_lowered_name(hit, exprs[i]);
        CHECK(a && b && strcmp(a, b) == 0);
        CHECK(a && strncmp(a, "_Z10tiled_gemm", 14) == 0);
    }
    CHECK(miss->size == hit->size && memcmp(miss->data, hit->data, hit->size) == 0);
    kcache_result_free(miss);
    kcache_result_free(hit);
}

/* The LTO link of the corpus's two files, by c. */
static kcache_result *link_lto(kcache_compiler *c)
{
    char a[700], b[700];
    snprintf(a, sizeof(a), "%s/lto/vec_ops.cu", corpus);
    snprintf(b, sizeof(b), "%s/lto/launch.cu", corpus);
    kcache_request ra = KCACHE_REQUEST_INIT, rb = KCACHE_REQUEST_INIT;
    ra.source_path = a;
    rb.source_path = b;
    kcache_link_input in[2] = {{.request = &ra}, {.request = &rb}};
    kcache_link_request lr = KCACHE_LINK_REQUEST_INIT;
    lr.arch = "sm_90";
    lr.lto = 1;
    lr.inputs = in;
    lr.n_inputs = 2;
    kcache_result *r = NULL;
    CHECK_RC(kcache_compiler_link(&r, c, &lr), 0);
    REQUIRE(r);
    return r;
}

static void test_lto(kcache_store *s, kcache_compiler *c)
{
    kcache_stats *s0 = stats(s);
    kcache_result *first = link_lto(c);
    if (first->status)
        fprintf(stderr, "link: %s\n%s\n", first->message, first->log);
    CHECK(first->size > 64 && memcmp(first->data, "\177ELF", 4) == 0);
    CHECK(!first->hit);
    kcache_stats *s1 = stats(s);
    CHECK(s1->entries == s0->entries + 3);  /* two LTO-IR compiles and the link */
    CHECK(s1->misses == s0->misses + 3);
    kcache_result *second = link_lto(c);
    CHECK(second->hit);
    kcache_stats *s2 = stats(s);
    CHECK(s2->hits == s1->hits + 3); /* every step hit */
    CHECK(s2->misses == s1->misses);
    CHECK(first->size == second->size && memcmp(first->data, second->data, first->size) == 0);
    kcache_stats_free(s0);
    kcache_stats_free(s1);
    kcache_stats_free(s2);
    kcache_result_free(first);
    kcache_result_free(second);
}

/* Eight processes miss block_sort.cu at once: one compiles, seven wait for it. */
static void test_single_flight(void)
{
    char path[700], sflight[700];
    snprintf(path, sizeof(path), "%s/block_sort.cu", corpus);
    snprintf(sflight, sizeof(sflight), "%s/flight.db", test_dir());
    kcache_store_close(open_store(sflight, 0));
    const char *opts[] = {"-I/usr/local/cuda/include/cccl", "-std=c++17"};
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pids[8];
    for (int i = 0; i < 8; i++) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0);
        if (pids[i] == 0) {
            kcache_store *s = open_store(sflight, 0);
            kcache_compiler *c = ct_compiler(s, NULL);
            kcache_result *r = compile(c, path, "sm_90", opts, 2, 0, 0);
            char line[8];
            snprintf(line, sizeof(line), "%c", r->status ? 'E' : r->hit ? 'H' : 'M');
            ssize_t w = write(fds[1], line, 1);
            kcache_result_free(r);
            kcache_compiler_free(c);
            kcache_store_close(s);
            _exit(w == 1 ? 0 : 1);
        }
    }
    close(fds[1]);
    char outcomes[16] = "";
    ssize_t n = 0, k;
    while ((k = read(fds[0], outcomes + n, sizeof(outcomes) - 1 - (size_t)n)) > 0)
        n += k;
    close(fds[0]);
    for (int i = 0; i < 8; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    int misses = 0, hits = 0;
    for (ssize_t i = 0; i < n; i++) {
        misses += outcomes[i] == 'M';
        hits += outcomes[i] == 'H';
    }
    printf("single flight: %s\n", outcomes);
    CHECK(n == 8 && misses == 1 && hits == 7);
    kcache_store *s = open_store(sflight, 0);
    kcache_stats *st = stats(s);
    CHECK(st->misses == 1 && st->entries == 1);
    kcache_stats_free(st);

    /* Reproducible bytes: a recompile of the same key gives the same CUBIN. */
    kcache_compiler *c = ct_compiler(s, NULL);
    kcache_result *cached = compile(c, path, "sm_90", opts, 2, 0, 0);
    kcache_result *fresh = compile(c, path, "sm_90", opts, 2, 0, KCACHE_COMPILE_REFRESH);
    CHECK(cached->hit && !fresh->hit);
    CHECK(cached->size == fresh->size && memcmp(cached->data, fresh->data, fresh->size) == 0);
    kcache_result_free(cached);
    kcache_result_free(fresh);
    kcache_compiler_free(c);
    kcache_store_close(s);
}

/* The store cannot be written: the compile still returns its artifact. */
static void test_store_unusable(void)
{
    char cu[700];
    snprintf(cu, sizeof(cu), "%s/saxpy.cu", corpus);
    kcache_store *ro = open_store(db, 1);
    kcache_compiler *c = ct_compiler(ro, NULL);
    kcache_result *r = compile(c, cu, "sm_90", NULL, 0, 0, KCACHE_COMPILE_REFRESH);
    CHECK(r->status == 0 && r->data && r->size > 0);
    CHECK(r->store_status == KCACHE_EREADONLY);
    kcache_result_free(r);
    kcache_compiler_free(c);
    kcache_store_close(ro);
}

/* Reads path whole into *size bytes (NULL on failure). */
static unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *p = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (p = malloc((size_t)n)) && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (f)
        fclose(f);
    *size = n > 0 ? (size_t)n : 0;
    return p;
}

static int spill(const char *path, const unsigned char *data, size_t size)
{
    char tmp[PATH_MAX + 400];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(data, 1, size, f) == size;
    if (f)
        ok &= fclose(f) == 0;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

/*
 * NVRTC replaced after a process loaded it under that path (an upgrade under a
 * long-running program): a compiler opened since reads the new build-id, but
 * the process compiles with the copy it loaded. Its kernels are not filed
 * under the new build.
 */
static void test_nvrtc_replaced(const kc_toolkit *tk)
{
    char dir[PATH_MAX], copy[PATH_MAX + 32], from[PATH_MAX], path[PATH_MAX + 300], id[80];
    snprintf(dir, sizeof(dir), "%s/nvrtc copy", test_dir());
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(from, sizeof(from), "%s", tk->nvrtc_path);
    *strrchr(from, '/') = '\0';
    DIR *d = opendir(from);
    REQUIRE(d);
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, "libnvrtc-builtins.so", 20) != 0)
            continue;
        size_t n;
        snprintf(path, sizeof(path), "%s/%s", from, de->d_name);
        unsigned char *b = slurp(path, &n);
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        REQUIRE(b && spill(path, b, n) == 0);
        free(b);
    }
    closedir(d);
    size_t n;
    unsigned char *lib = slurp(tk->nvrtc_path, &n);
    REQUIRE(lib);
    snprintf(copy, sizeof(copy), "%s/libnvrtc.so.%d", dir, KC_CUDA_MAJOR);
    REQUIRE(spill(copy, lib, n) == 0);

    char db2[PATH_MAX + 32];
    snprintf(db2, sizeof(db2), "%s/replaced.db", test_dir());
    kcache_store *s = open_store(db2, 0);
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.store = s;
    o.nvrtc_path = copy;
    kcache_compiler *before = NULL, *after = NULL;
    char err[512], src[PATH_MAX + 32];
    REQUIRE(kcache_compiler_new(&before, &o, err, sizeof(err)) == 0);
    snprintf(src, sizeof(src), "%s/replaced.cu", test_dir());
    FILE *f = fopen(src, "w");
    REQUIRE(f && fputs("__global__ void k(int *o) { o[0] = 5; }\n", f) >= 0 && !fclose(f));
    kcache_result *r = compile(before, src, "sm_90", NULL, 0, KCACHE_KIND_PTX, 0);
    CHECK(r->keyed && r->store_status == 0 && !r->hit);
    kcache_result_free(r);

    /* Another build at that path: its build-id's bytes changed, renamed over it. */
    REQUIRE(kc_elf_build_id(copy, id, sizeof(id)) == 0);
    unsigned char raw[40];
    size_t id_n = strlen(id) / 2;
    for (size_t i = 0; i < id_n; i++)
        REQUIRE(sscanf(id + 2 * i, "%2hhx", &raw[i]) == 1);
    unsigned char *at = memmem(lib, n, raw, id_n);
    REQUIRE(at);
    for (size_t i = 0; i < id_n; i++)
        at[i] ^= 0x5a;
    REQUIRE(spill(copy, lib, n) == 0);
    REQUIRE(kcache_compiler_new(&after, &o, err, sizeof(err)) == 0);
    CHECK(strcmp(kcache_compiler_nvrtc_id(before), kcache_compiler_nvrtc_id(after)) != 0);
    f = fopen(src, "w");
    REQUIRE(f && fputs("__global__ void k(int *o) { o[0] = 6; }\n", f) >= 0 && !fclose(f));
    r = compile(after, src, "sm_90", NULL, 0, KCACHE_KIND_PTX, 0);
    CHECK(r->status == 0 && r->size > 0);
    CHECK(r->store_status != 0 && strstr(r->store_message, "another build"));
    kcache_result_free(r);

    /* That build, with other bytes, compiled at another path (as by another process):
     * a rebuild here, with the copy loaded earlier under the first path (glibc hands
     * it back by name), is no verdict on its entry. */
    static const char release[] = "Cuda compilation tools, release 13.0, V13.0.88";
    unsigned char *rel = memmem(lib, n, release, sizeof(release) - 1);
    REQUIRE(rel);
    rel[sizeof(release) - 2] = '9';
    rel[sizeof(release) - 3] = '9';
    REQUIRE(spill(copy, lib, n) == 0);
    snprintf(path, sizeof(path), "%s/other", test_dir());
    REQUIRE(mkdir(path, 0755) == 0);
    d = opendir(dir);
    REQUIRE(d);
    for (struct dirent *de; (de = readdir(d));) {
        char a[2 * PATH_MAX], b[2 * PATH_MAX];
        size_t m;
        if (strncmp(de->d_name, "libnvrtc", 8) != 0)
            continue;
        snprintf(a, sizeof(a), "%s/%s", dir, de->d_name);
        snprintf(b, sizeof(b), "%s/%s", path, de->d_name);
        unsigned char *bytes = slurp(a, &m);
        REQUIRE(bytes && spill(b, bytes, m) == 0);
        free(bytes);
    }
    closedir(d);
    char other[2 * PATH_MAX];
    snprintf(other, sizeof(other), "%s/libnvrtc.so.%d", path, KC_CUDA_MAJOR);
    o.nvrtc_path = other;
    kcache_compiler *elsewhere = NULL;
    REQUIRE(kcache_compiler_new(&elsewhere, &o, err, sizeof(err)) == 0);
    CHECK(strcmp(kcache_compiler_nvrtc_id(elsewhere), kcache_compiler_nvrtc_id(after)) == 0);
    f = fopen(src, "w");
    REQUIRE(f && fputs("__global__ void k(int *o) { o[0] = 7; }\n", f) >= 0 && !fclose(f));
    r = compile(elsewhere, src, "sm_90", NULL, 0, KCACHE_KIND_PTX, 0);
    CHECK(r->status == 0 && r->store_status == 0 && memmem(r->data, r->size, "V13.0.99", 8));
    kcache_key made = r->key;
    kcache_result_free(r);
    int same = -1;
    r = NULL;
    int rc = kcache_compiler_recompile(&r, &same, after, &made);
    CHECK(rc == KCACHE_ENOTSUP && r && strstr(r->message, "another build"));
    kcache_result_free(r);
    kcache_compiler_free(elsewhere);
    kcache_compiler_free(after);
    kcache_compiler_free(before);
    kcache_store_close(s);
    free(lib);
}

/*
 * An nvJitLink without a GNU build-id (a toolkit whose copy has none): nothing
 * tells its build from another of the same name, so its links are not kept.
 */
/*
 * A toolkit at test_dir()/NAME: the real one's headers and NVRTC, and a copy
 * of its nvJitLink whose build-id note is dropped (drop) or whose build-id
 * bytes are changed (another build). Returns the copy's path in nvjitlink.
 */
static void toolkit_copy(char *root, size_t root_size, char *nvjitlink, size_t nvjitlink_size,
                         const char *name, const kc_toolkit *tk, int drop)
{
    char path[PATH_MAX + 64], to[PATH_MAX + 64];
    snprintf(root, root_size, "%s/%s", test_dir(), name);
    snprintf(path, sizeof(path), "%s/lib64", root);
    if (mkdir(root, 0755) == 0) {
        REQUIRE(mkdir(path, 0755) == 0);
        static const char *const links[] = {"include", "version.json", "nvvm"};
        for (size_t i = 0; i < KC_ARRAY_SIZE(links); i++) {
            snprintf(path, sizeof(path), "%s/%s", root, links[i]);
            snprintf(to, sizeof(to), "%s/%s", tk->root, links[i]);
            REQUIRE(symlink(to, path) == 0);
        }
        snprintf(path, sizeof(path), "%s/lib64/%s", root, strrchr(tk->nvrtc_path, '/') + 1);
        REQUIRE(symlink(tk->nvrtc_path, path) == 0);
    }
    snprintf(nvjitlink, nvjitlink_size, "%s/lib64/libnvJitLink.so.%d", root, KC_CUDA_MAJOR);
    size_t n;
    const char *from = access(nvjitlink, F_OK) == 0 ? nvjitlink : tk->nvjitlink_path;
    unsigned char *lib = slurp(from, &n);
    REQUIRE(lib);
    char id[80];
    unsigned char raw[40];
    REQUIRE(kc_elf_build_id(from, id, sizeof(id)) == 0);
    size_t id_n = strlen(id) / 2;
    for (size_t i = 0; i < id_n; i++)
        REQUIRE(sscanf(id + 2 * i, "%2hhx", &raw[i]) == 1);
    unsigned char *desc = memmem(lib, n, raw, id_n);
    REQUIRE(desc && desc - lib >= 16 && !memcmp(desc - 4, "GNU", 4));
    if (drop)
        desc[-8] ^= 0x40; /* the note's type: a note, not a build-id any more */
    else
        desc[from == nvjitlink] ^= 0x5a; /* a second copy: another byte, another build */
    REQUIRE(spill(nvjitlink, lib, n) == 0);
    free(lib);
}

static void test_nvjitlink_without_build_id(kcache_store *s, const kc_toolkit *tk)
{
    char root[PATH_MAX], lib[PATH_MAX + 64];
    toolkit_copy(root, sizeof(root), lib, sizeof(lib), "toolkit without ids", tk, 1);
    kcache_compiler *c = ct_compiler(s, root);
    kcache_result *r = link_lto(c);
    CHECK(r->size > 64 && !r->keyed && r->store_status != 0 &&
          strstr(r->store_message, "build-id"));
    kcache_result_free(r);
    kcache_compiler_free(c);
}

/*
 * nvJitLink replaced under a process that loaded it: a compiler opened since
 * keys the new build, the process links with the copy it has. Not kept.
 */
static void test_nvjitlink_replaced(kcache_store *s, const kc_toolkit *tk)
{
    char root[PATH_MAX], lib[PATH_MAX + 64];
    toolkit_copy(root, sizeof(root), lib, sizeof(lib), "toolkit replaced", tk, 0);
    kcache_compiler *before = ct_compiler(s, root);
    kcache_result *r = link_lto(before);
    CHECK(r->keyed && r->store_status == 0);
    kcache_result_free(r);
    toolkit_copy(root, sizeof(root), lib, sizeof(lib), "toolkit replaced", tk, 0);
    kcache_compiler *after = ct_compiler(s, root);
    r = link_lto(after);
    CHECK(!r->hit && r->size > 64 && r->store_status != 0 &&
          strstr(r->store_message, "another build"));
    kcache_result_free(r);
    kcache_compiler_free(after);
    kcache_compiler_free(before);
}

int main(void)
{
    corpus = getenv("CORPUS");
    REQUIRE(corpus);
    kc_toolkit tk;
    const kc_nvrtc *api;
    if (ct_nvrtc_find(&tk, &api))
        return TEST_SKIP;
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    kcache_store *s = open_store(db, 0);
    kcache_compiler *c = ct_compiler(s, NULL);
    test_nvrtc_cache_off(api);
    test_search_order_matches_nvrtc(c, api);
    test_computed_include(s, c);
    test_broken(s, c);
    test_lowered_names(c);
    test_lto(s, c);
    test_nvjitlink_without_build_id(s, &tk);
    test_nvjitlink_replaced(s, &tk);
    kcache_compiler_free(c);
    kcache_store_close(s);
    test_store_unusable();
    test_single_flight();
    test_nvrtc_replaced(&tk);
    kc_toolkit_free(&tk);
    return test_done();
}
