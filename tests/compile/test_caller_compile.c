/*
 * kcache_request.compile: a compiler of the caller's own (the drop-in NVRTC's
 * way of compiling exactly as a program asked). kcache keys the request,
 * serves a hit without calling it, stores what it made (names and log
 * included), stores nothing for a compile error, and keeps no inputs. It is
 * handed the closure the key covers, may say "do not store", and what it made
 * is not stored when a file of the closure changed while it ran.
 * NVRTC is never loaded: the toolkit's library is only read for its build-id.
 */
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include <kcache/compile.h>

#include "testutil.h"

struct fake {
    int calls;
    int fail;     /* return KCACHE_ECOMPILE */
    const char *artifact;
};

static int fake_compile(void *userdata, kcache_made *out)
{
    static const char *const exprs[] = {"scale<float, 2>"};
    static const char *const lowered[] = {"_Z5scaleIfLi2EEvPT_"};
    struct fake *f = userdata;
    f->calls++;
    out->log = f->fail ? "k.cu(1): error: identifier \"x\" is undefined" : "a warning";
    if (f->fail)
        return KCACHE_ECOMPILE;
    out->data = f->artifact;
    out->size = strlen(f->artifact);
    out->n_names = 1;
    out->name_exprs = exprs;
    out->lowered_names = lowered;
    out->toolchain = "a fake compiler";
    return 0;
}

static int compile(kcache_result **res, kcache_compiler *c, const char *src, struct fake *f)
{
    static const char *const exprs[] = {"scale<float, 2>"};
    static const char *const opts[] = {"-arch=sm_90"};
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source = src;
    r.source_name = "k.cu";
    r.options = opts;
    r.n_options = 1;
    r.name_exprs = exprs;
    r.n_name_exprs = 1;
    r.extra_digest = "fake";
    r.extra_digest_size = 4;
    r.compile = fake_compile;
    r.compile_userdata = f;
    return kcache_compiler_compile(res, c, &r);
}

/* A compiler that reads the disk itself: what it is handed, and what it does. */
struct reader {
    int calls;
    size_t n_probes, found;
    int saw_header, saw_absent, saw_root;
    const char *no_store;  /* said after compiling */
    const char *edit;      /* a file it rewrites while it compiles */
};

static int reading_compile(void *userdata, kcache_made *out)
{
    struct reader *f = userdata;
    f->calls++;
    f->n_probes = out->n_probes;
    f->found = 0;
    f->saw_header = f->saw_absent = 0;
    for (size_t i = 0; i < out->n_probes; i++) {
        const char *slash = strrchr(out->probes[i].path, '/');
        const char *base = slash ? slash + 1 : out->probes[i].path;
        f->found += (size_t)out->probes[i].found;
        f->saw_header |= !strcmp(base, "h.h") && out->probes[i].found;
        f->saw_absent |= !strcmp(base, "opt.h") && !out->probes[i].found;
    }
    f->saw_root = out->toolkit_root && out->toolkit_root[0] == '/';
    if (f->edit) {
        FILE *h = fopen(f->edit, "w");
        if (h) {
            fputs("#define H 22 /* edited while the compiler ran */\n", h);
            fclose(h);
        }
        f->edit = NULL;
    }
    out->data = "READ";
    out->size = 4;
    out->no_store = f->no_store;
    return 0;
}

static int compile_file(kcache_result **res, kcache_compiler *c, const char *path,
                        struct reader *f)
{
    static const char *const opts[] = {"-arch=sm_90"};
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source_path = path;
    r.options = opts;
    r.n_options = 1;
    r.extra_digest = "reader";
    r.extra_digest_size = 6;
    r.compile = reading_compile;
    r.compile_userdata = f;
    return kcache_compiler_compile(res, c, &r);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
}

/*
 * The closure reaches the caller's compiler; its "do not store" is obeyed; a
 * header edited while it compiles is not stored under the key of the old one.
 */
static void test_closure(kcache_compiler *c)
{
    char src[700], hdr[700];
    snprintf(src, sizeof(src), "%s/reader.cu", test_dir());
    snprintf(hdr, sizeof(hdr), "%s/h.h", test_dir());
    write_text(hdr, "#define H 1\n");
    write_text(src, "#include \"h.h\"\n#if __has_include(\"opt.h\")\n#endif\n"
                    "__global__ void k(int *p) { p[0] = H; }\n");
    struct reader f = {0};
    kcache_result *res = NULL;
    f.no_store = "unpredicted-read";
    CHECK(compile_file(&res, c, src, &f) == 0 && f.calls == 1);
    CHECK(f.saw_header && f.saw_absent && f.saw_root && f.found >= 1 && f.n_probes > f.found);
    CHECK(res && res->size == 4 && !memcmp(res->data, "READ", 4) && !res->keyed);
    CHECK(res && strstr(res->store_message, "not stored: unpredicted-read"));
    kcache_result_free(res);
    /* Not stored: the next request compiles again. */
    f.no_store = NULL;
    f.edit = hdr;
    CHECK(compile_file(&res, c, src, &f) == 0 && f.calls == 2);
    CHECK(res && !res->keyed && strstr(res->store_message, "not stored: closure-changed"));
    kcache_result_free(res);
    /* The edit was not stored under the old header's key, nor under its own. */
    CHECK(compile_file(&res, c, src, &f) == 0 && f.calls == 3);
    CHECK(res && res->keyed && !res->hit && !res->store_message[0]);
    kcache_result_free(res);
    CHECK(compile_file(&res, c, src, &f) == 0 && f.calls == 3 && res && res->hit);
    kcache_result_free(res);
}

/*
 * A compiler that reads the disk, run while kcache resolves (KCACHE_COMPILE_OVERLAP):
 * its artifact is the header's text as it read it.
 */
struct overlapper {
    const char *hdr;
    int calls, overlapped, again, stopped;
    int edit;              /* rewrite the header (same size) after reading it */
    char artifact[64];
};

static void read_into(char *out, size_t size, const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, size - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
}

static int overlapped_compile(void *userdata, kcache_made *out)
{
    struct overlapper *f = userdata;
    f->calls++;
    f->overlapped = out->await_closure && !out->probes;
    read_into(f->artifact, sizeof(f->artifact), f->hdr);
    if (f->edit) {
        FILE *h = fopen(f->hdr, "w");
        if (h) {
            fputs("#define H 2\n", h);
            fclose(h);
        }
        f->edit = 0;
    }
    int told = out->await_closure ? out->await_closure(out) : 0;
    if (told == 1) {
        f->again++;
        read_into(f->artifact, sizeof(f->artifact), f->hdr); /* compiled again */
    }
    f->stopped = told < 0 && out->stop_asked(out);
    out->data = f->artifact;
    out->size = strlen(f->artifact);
    return 0;
}

static int compile_overlapped(kcache_result **res, kcache_compiler *c, const char *path,
                              const char *extra_opt, struct overlapper *f)
{
    const char *opts[] = {"-arch=sm_90", extra_opt};
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source_path = path;
    r.options = opts;
    r.n_options = extra_opt ? 2 : 1;
    r.extra_digest = "overlap";
    r.extra_digest_size = 7;
    r.flags = KCACHE_COMPILE_OVERLAP;
    r.compile = overlapped_compile;
    r.compile_userdata = f;
    return kcache_compiler_compile(res, c, &r);
}

static int more_than_one_cpu(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 1;
}

/*
 * KCACHE_COMPILE_OVERLAP: the compiler runs before the closure is known; a
 * header edited after the compiler read it and before the resolution did is
 * never stored under the new text's key with the old text's artifact; an
 * entry found meanwhile is served and the compiler told to stop.
 */
static void test_overlap(kcache_compiler *c)
{
    char src[700], hdr[700];
    snprintf(src, sizeof(src), "%s/overlap.cu", test_dir());
    snprintf(hdr, sizeof(hdr), "%s/ov.h", test_dir());
    write_text(hdr, "#define H 1\n");
    write_text(src, "#include \"ov.h\"\n__global__ void k(int *p) { p[0] = H; }\n");
    if (!more_than_one_cpu()) {
        printf("one CPU: nothing is overlapped, so only the sequential order is checked\n");
        return;
    }
    /* Files too recent to vouch for what the compiler read before the resolution: compiled
     * again after it. */
    struct overlapper f = {.hdr = hdr};
    kcache_result *res = NULL;
    CHECK(compile_overlapped(&res, c, src, NULL, &f) == 0 && f.calls == 1 && f.overlapped);
    CHECK(f.again == 1 && res && res->keyed && !res->hit && !res->store_message[0]);
    kcache_result_free(res);
    /* Old enough to trust: one compile, stored; then an edit while the compiler runs. */
    sleep(3);
    write_text(src, "#include \"ov.h\"\n__global__ void k(long *p) { p[0] = H; }\n");
    f = (struct overlapper){.hdr = hdr};
    CHECK(compile_overlapped(&res, c, src, NULL, &f) == 0 && f.calls == 1 && f.overlapped);
    CHECK(f.again == 0 && res && res->keyed && !res->hit && !res->store_message[0]);
    kcache_result_free(res);
    write_text(src, "#include \"ov.h\"\n__global__ void k(short *p) { p[0] = H; }\n");
    f = (struct overlapper){.hdr = hdr, .edit = 1};
    CHECK(compile_overlapped(&res, c, src, NULL, &f) == 0 && f.calls == 1 && f.overlapped);
    kcache_result_free(res);
    /* What the edit made is whatever it read; what comes next is the new text's. */
    CHECK(compile_overlapped(&res, c, src, NULL, &f) == 0);
    CHECK(res && !strcmp(res->data, "#define H 2\n"));
    kcache_result_free(res);
    /* Another search path (no remembered closure for it), the same key: the entry is
     * found while the compiler runs, served, and the compiler told to stop. */
    f = (struct overlapper){.hdr = hdr};
    CHECK(compile_overlapped(&res, c, src, "-I/nonexistent-kcache-dir", &f) == 0);
    CHECK(f.calls == 1 && f.overlapped && f.stopped && res && res->hit);
    CHECK(res && !strcmp(res->data, "#define H 2\n"));
    kcache_result_free(res);
}

static int lowered_is(const kcache_result *res, const char *want)
{
    const char *got = res ? kcache_result_lowered_name(res, "scale<float, 2>") : NULL;
    return got && !strcmp(got, want);
}

int main(void)
{
    char db[600], err[512];
    snprintf(db, sizeof(db), "%s/k.db", test_dir());
    kcache_compiler_options o = KCACHE_COMPILER_OPTIONS_INIT;
    o.store_path = db;
    kcache_compiler *c = NULL;
    if (kcache_compiler_new(&c, &o, err, sizeof(err)) != 0) {
        printf("SKIP: no CUDA toolkit: %s\n", err);
        return TEST_SKIP;
    }
    REQUIRE(kcache_compiler_store(c));

    /* A miss calls it, and what it made comes back and is stored. */
    struct fake f = {0, 0, "ARTIFACT-1"};
    kcache_result *res = NULL;
    CHECK(compile(&res, c, "__global__ void k() {}\n", &f) == 0);
    CHECK(f.calls == 1 && res && !res->hit && res->keyed);
    CHECK(res && res->size == 10 && memcmp(res->data, "ARTIFACT-1", 10) == 0);
    CHECK(res && !strcmp(res->log, "a warning"));
    CHECK(lowered_is(res, "_Z5scaleIfLi2EEvPT_"));
    kcache_key key = res->key;
    kcache_result_free(res);

    /* A hit never calls it. */
    f.artifact = "SOMETHING-ELSE";
    CHECK(compile(&res, c, "__global__ void k() {}\n", &f) == 0);
    CHECK(f.calls == 1 && res && res->hit);
    CHECK(res && res->size == 10 && memcmp(res->data, "ARTIFACT-1", 10) == 0);
    CHECK(res && !strcmp(res->log, "a warning"));
    CHECK(lowered_is(res, "_Z5scaleIfLi2EEvPT_"));
    kcache_result_free(res);

    /* Its entries keep no inputs: nothing to rebuild them from. */
    int same = -1;
    CHECK(kcache_compiler_recompile(&res, &same, c, &key) == KCACHE_ENOTSUP);
    kcache_result_free(res);
    res = NULL;

    /* A compile error: its log comes back, nothing is stored, the next call compiles again. */
    struct fake bad = {0, 1, NULL};
    CHECK(compile(&res, c, "__global__ void k() { x; }\n", &bad) == KCACHE_ECOMPILE);
    CHECK(res && strstr(res->log, "undefined"));
    kcache_result_free(res);
    CHECK(compile(&res, c, "__global__ void k() { x; }\n", &bad) == KCACHE_ECOMPILE);
    CHECK(bad.calls == 2);
    kcache_result_free(res);

    test_closure(c);
    test_overlap(c);

    kcache_compiler_free(c);
    return test_done();
}
