/*
 * A program named in a new directory each time (CuPy names every program
 * <a new temporary directory>/kern.cu): a second process compiling the same
 * source under a name in another directory hits through the closure the
 * first one remembered, without resolving the tree again; a header placed
 * beside the new name, which NVRTC would find first, is never served the
 * first name's kernel. Each compile is a process of its own, as CuPy's are.
 * A hit through a closure writes nothing to the database, its count
 * included (doc/design.md, "A hit writes nothing to the database").
 * Skips (77) where the toolkit is missing.
 */
#include <kcache/compile.h>
#include <sys/stat.h>

#include "compiletest.h"

static char db[600], inc[600];
static const char *const opts[] = {"-I", inc};

/* A program named DIR/kern.cu holding text, in a directory of its own. */
static void program(char *path, size_t size, const char *dir, const char *text)
{
    test_in_new_dir(path, size, dir, "kern.cu");
    test_write_text(path, text);
}

/* Compiles path in a new process (ct_compile_in_child()); the PTX goes to path + ".ptx". */
static int compile_in_child(const char *path, int key_first)
{
    char out[700];
    snprintf(out, sizeof(out), "%s.ptx", path);
    return ct_compile_in_child(db, path, opts, 2, key_first, out, NULL);
}

static uint64_t closure_hits(void)
{
    return ct_counter(db, "closure_hits");
}

/* The bytes of the database at path and of its WAL (none when there is none), one after the other. */
static uint8_t *db_bytes(const char *path, size_t *size)
{
    char wal[700];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    size_t n = 0, w = 0;
    uint8_t *a = test_slurp(path, &n), *b = test_slurp(wal, &w);
    REQUIRE(a);
    uint8_t *all = realloc(a, n + w + 1);
    REQUIRE(all);
    if (b)
        memcpy(all + n, b, w);
    free(b);
    *size = n + (b ? w : 0);
    return all;
}

/*
 * A hit through a closure, files old enough to trust (checked by stat() alone,
 * nothing written back), leaves the database and its WAL as they were, its
 * count included; the count is still kept. A cache of its own, a and b named
 * in two directories.
 */
static void closure_hit_writes_nothing(const char *a, const char *b)
{
    char quiet[700], out[700];
    snprintf(quiet, sizeof(quiet), "%s/quiet.db", test_dir());
    snprintf(out, sizeof(out), "%s/quiet.ptx", test_dir());
    setenv("KCACHE_TEST_CLOCK_SHIFT_NS", "10000000000", 1);
    CHECK(ct_compile_in_child(quiet, a, opts, 2, 0, out, NULL) == 0);
    CHECK(ct_compile_in_child(quiet, b, opts, 2, 1, out, NULL) == (CT_HIT | CT_BY_CLOSURE));
    size_t before_n, after_n;
    uint8_t *before = db_bytes(quiet, &before_n);
    CHECK(ct_compile_in_child(quiet, b, opts, 2, 1, out, NULL) == (CT_HIT | CT_BY_CLOSURE));
    uint8_t *after = db_bytes(quiet, &after_n);
    int same = before_n == after_n && memcmp(before, after, before_n) == 0;
    if (!same)
        fprintf(stderr, "a closure hit wrote to the database (%zu bytes, then %zu)\n", before_n,
                after_n);
    CHECK(same);
    CHECK(ct_counter(quiet, "closure_hits") == 2);
    free(before);
    free(after);
    unsetenv("KCACHE_TEST_CLOCK_SHIFT_NS");
}

static int ptx_says(const char *path, const char *what)
{
    char out[700];
    snprintf(out, sizeof(out), "%s.ptx", path);
    return ct_file_says(out, what);
}

int main(void)
{
    if (ct_no_nvrtc())
        return TEST_SKIP;
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    snprintf(inc, sizeof(inc), "%s/include", test_dir());
    REQUIRE(mkdir(inc, 0700) == 0);
    char val[700];
    snprintf(val, sizeof(val), "%s/val.h", inc);
    test_write_text(val, "#define KC_VAL 1234567\n");
    /* "val.h" is looked for beside the name first, and found in -I. */
    const char *text = "#include \"val.h\"\n"
                       "extern \"C\" __global__ void k(int *v) { v[threadIdx.x] = KC_VAL; }\n";
    char a[700], b[700], c[700];
    program(a, sizeof(a), "tmpA", text);
    program(b, sizeof(b), "tmpB", text);
    program(c, sizeof(c), "tmpC", text);

    closure_hit_writes_nothing(a, b);

    int first = compile_in_child(a, 0);
    CHECK(first == 0); /* a miss, stored */
    CHECK(ptx_says(a, "1234567"));
    int second = compile_in_child(b, 1);
    if (!(second & CT_BY_CLOSURE))
        fprintf(stderr, "the name in another directory resolved the tree again\n");
    CHECK(second == (CT_HIT | CT_BY_CLOSURE));
    CHECK(closure_hits() == 1);
    CHECK(ptx_says(b, "1234567"));

    /* A header beside the new name comes first for NVRTC: never the first name's kernel. */
    char beside[700];
    snprintf(beside, sizeof(beside), "%s/tmpC/val.h", test_dir());
    test_write_text(beside, "#define KC_VAL 7654321\n");
    int third = compile_in_child(c, 1);
    CHECK(!(third & (CT_HIT | CT_BY_CLOSURE | CT_FAILED)));
    CHECK(ptx_says(c, "7654321"));
    CHECK(closure_hits() == 1);

    /*
     * A program that names its file (__FILE__) is keyed with its name. Named
     * by the file's name alone (kcache compile), its closure stands for any
     * directory; a program named with a directory, the same last component,
     * is another key and never reaches that kernel through it.
     */
    const char *named = "#include <val.h>\n"
                        "__device__ const char where[] = __FILE__;\n"
                        "extern \"C\" __global__ void k(int *v) { v[0] = KC_VAL + where[1]; }\n";
    char d[700], e[700], f[700];
    program(d, sizeof(d), "tmpD", named);
    program(e, sizeof(e), "tmpE", named);
    program(f, sizeof(f), "tmpF", named);
    CHECK(compile_in_child(d, 0) == 0);
    CHECK(compile_in_child(e, 1) == (CT_HIT | CT_BY_CLOSURE));
    char out[720];
    snprintf(out, sizeof(out), "%s.ptx", f);
    int other = ct_compile_named_in_child(db, f, "tmpF/kern.cu", opts, 2, 0, out, NULL);
    if (other & CT_HIT)
        fprintf(stderr, "tmpF/kern.cu was served the kernel of kern.cu\n");
    CHECK(other == 0);
    return test_done();
}
