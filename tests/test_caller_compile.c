/*
 * kcache_request.compile: a compiler of the caller's own (the drop-in NVRTC's
 * way of compiling exactly as a program asked). kcache keys the request,
 * serves a hit without calling it, stores what it made (names and log
 * included), stores nothing for a compile error, and keeps no inputs.
 * NVRTC is never loaded: the toolkit's library is only read for its build-id.
 */
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
    return kcache_compile(res, c, &r);
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
    CHECK(kcache_recompile(&res, &same, c, &key) == KCACHE_ENOTSUP);
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

    kcache_compiler_free(c);
    return test_done();
}
