/*
 * The CUBIN reader: what `kcache inspect` shows must be what NVIDIA's own
 * tools read from the same file, and no input may crash it.
 *
 * The fixtures come from tests/fixtures/cubin/gen.sh (nvcc 13.0). Every
 * expected value below was read from `cuobjdump -res-usage` (REG, STACK,
 * SHARED, CONSTANT[0]) and `cuobjdump -elf` (sm, ABI, toolkit) of these very
 * files, max_threads and local memory from cuFuncGetAttribute on an H200;
 * parameters and barriers from `ptxas -v` and the kernels' signatures.
 * When the kernels moved into examples/ (our own code, same names and
 * signatures), the saxpy, gemm and sort fixtures were rebuilt from there with
 * no cuobjdump or GPU at hand: `nvcc -Xptxas -v` with gen.sh's options gave
 * registers, stack, static shared memory (+1 KiB reserved from sm_90 on, as
 * cuobjdump counts it), cmem[0] and barriers; only registers changed (saxpy
 * 10 -> 24, sort_then_scan<256, 8> on sm_80 53 -> 55). These kernels have no
 * launch bounds and no local memory (0 stack, 0 spill), hence 0 for both.
 */
#include <kcache/cubin.h>
#include <kcache/core.h>
#include <stdint.h>
#include <time.h>

#include "testutil.h"

typedef struct want_kernel {
    const char *name;
    uint32_t registers, stack, shared, constant, local, max_threads, params, barriers;
} want_kernel;

typedef struct want_file {
    const char *file;
    unsigned sm;
    const char *arch;
    unsigned relocatable;
    size_t n;
    want_kernel k[4]; /* sorted by name */
} want_file;

#define GEMM_D8 "_Z10tiled_gemmIdLi8EEvPKT_S2_PS0_i"
#define GEMM_F16 "_Z10tiled_gemmIfLi16EEvPKT_S2_PS0_i"
#define SORT_128_4 "_Z14sort_then_scanILi128ELi4EEvPKiPi"
#define SORT_256_8 "_Z14sort_then_scanILi256ELi8EEvPKiPi"
#define SORT_512_4 "_Z14sort_then_scanILi512ELi4EEvPKiPi"
#define SPILLER "_Z7spillerPKfPfi"

/* name, REG, STACK, SHARED, CONSTANT[0], local, max threads, params, barriers */
static const want_file files[] = {
    {"saxpy_sm80.cubin", 80, "sm_80", 0, 1, {{"saxpy", 24, 0, 0, 380, 0, 0, 28, 0}}},
    {"saxpy_sm90.cubin", 90, "sm_90", 0, 1, {{"saxpy", 24, 0, 0, 556, 0, 0, 28, 0}}},
    {"saxpy_sm90a.cubin", 90, "sm_90a", 0, 1, {{"saxpy", 24, 0, 0, 556, 0, 0, 28, 0}}},
    {"gemm_sm80.cubin",
     80,
     "sm_80",
     0,
     2,
     {{GEMM_D8, 32, 0, 1024, 380, 0, 0, 28, 1}, {GEMM_F16, 32, 0, 2048, 380, 0, 0, 28, 1}}},
    {"gemm_sm90.cubin",
     90,
     "sm_90",
     0,
     2,
     {{GEMM_D8, 32, 0, 2048, 556, 0, 0, 28, 1}, {GEMM_F16, 32, 0, 3072, 556, 0, 0, 28, 1}}},
    {"gemm_sm90a.cubin",
     90,
     "sm_90a",
     0,
     2,
     {{GEMM_D8, 32, 0, 2048, 556, 0, 0, 28, 1}, {GEMM_F16, 32, 0, 3072, 556, 0, 0, 28, 1}}},
    {"sort_sm80.cubin",
     80,
     "sm_80",
     0,
     3,
     {{SORT_128_4, 40, 0, 4640, 368, 0, 0, 16, 1},
      {SORT_256_8, 55, 0, 9280, 368, 0, 0, 16, 1},
      {SORT_512_4, 47, 0, 18528, 368, 0, 0, 16, 1}}},
    {"sort_sm90.cubin",
     90,
     "sm_90",
     0,
     3,
     {{SORT_128_4, 40, 0, 5664, 544, 0, 0, 16, 1},
      {SORT_256_8, 54, 0, 10304, 544, 0, 0, 16, 1},
      {SORT_512_4, 47, 0, 19552, 544, 0, 0, 16, 1}}},
    {"sort_sm90a.cubin",
     90,
     "sm_90a",
     0,
     3,
     {{SORT_128_4, 40, 0, 5664, 544, 0, 0, 16, 1},
      {SORT_256_8, 54, 0, 10304, 544, 0, 0, 16, 1},
      {SORT_512_4, 47, 0, 19552, 544, 0, 0, 16, 1}}},
    /* Spills, a thread limit, a call with its own frame, a large parameter. */
    {"spill_sm90.cubin",
     90,
     "sm_90",
     0,
     4,
     {{SPILLER, 32, 592, 1024, 548, 592, 256, 20, 0},
      {"big_param", 10, 0, 1024, 792, 0, 0, 264, 0},
      {"caller", 24, 96, 1024, 548, 96, 0, 20, 0},
      {"dyn_shared", 12, 0, 1024, 536, 0, 0, 8, 1}}},
    /* -rdc: the device functions rec() and callee() are not kernels; stacks wait for the link. */
    {"spill_rdc_sm80.cubin",
     80,
     "sm_80",
     1,
     4,
     {{SPILLER, 32, 0, 0, 372, 608, 256, 20, 0},
      {"big_param", 8, 0, 0, 616, 0, 0, 264, 0},
      {"caller", 24, 0, 0, 372, 32, 0, 20, 0},
      {"dyn_shared", 10, 0, 0, 360, 0, 0, 8, 1}}},
};

static uint8_t *read_fixture(const char *name, size_t *size)
{
    const char *dir = getenv("FIXTURES");
    char path[1024];
    snprintf(path, sizeof(path), "%s/cubin/%s", dir ? dir : "tests/fixtures", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s (set FIXTURES to tests/fixtures)\n", path);
        exit(1);
    }
    REQUIRE(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    REQUIRE(n > 0 && fseek(f, 0, SEEK_SET) == 0);
    uint8_t *b = malloc((size_t)n);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static void check_kernel(const char *file, const kcache_cubin_kernel *got, const want_kernel *w)
{
    if (strcmp(got->name, w->name) != 0) {
        fprintf(stderr, "%s: kernel %s, wanted %s\n", file, got->name, w->name);
        test_failures++;
        return;
    }
    const struct {
        const char *what;
        uint32_t got, want;
    } v[] = {
        {"registers", got->registers, w->registers},
        {"stack", got->stack_bytes, w->stack},
        {"shared", got->shared_bytes, w->shared},
        {"constant", got->constant_bytes, w->constant},
        {"local", got->local_bytes, w->local},
        {"max_threads", got->max_threads, w->max_threads},
        {"params", got->param_bytes, w->params},
        {"barriers", got->barriers, w->barriers},
        {"spill", got->spill_bytes, 0},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        if (v[i].got != v[i].want) {
            fprintf(stderr, "%s: %s: %s %u, cuobjdump says %u\n", file, w->name, v[i].what,
                    v[i].got, v[i].want);
            test_failures++;
        }
    }
    CHECK(got->code_bytes > 0 && got->code_bytes % 128 == 0);
}

static void test_fixtures(void)
{
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const want_file *w = &files[i];
        size_t size;
        uint8_t *data = read_fixture(w->file, &size);
        kcache_cubin_info *info = NULL;
        char err[256];
        int rc = kcache_cubin_parse(&info, data, size, err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "%s: %s\n", w->file, err);
            test_failures++;
            free(data);
            continue;
        }
        CHECK(info->sm == w->sm);
        if (strcmp(info->arch, w->arch) != 0) {
            fprintf(stderr, "%s: arch %s, cuobjdump says %s\n", w->file, info->arch, w->arch);
            test_failures++;
        }
        CHECK(info->elf_abi_version == 8);
        CHECK(info->toolkit_version == 130);
        CHECK(info->virtual_sm == w->sm);
        CHECK(info->relocatable == w->relocatable);
        CHECK(info->n_kernels == w->n);
        for (size_t k = 0; k < info->n_kernels && k < w->n; k++)
            check_kernel(w->file, &info->kernels[k], &w->k[k]);
        kcache_cubin_free(info);
        free(data);
    }
}

/* Parses and checks the result's shape: success, or EINVAL with a message and no info. */
static int parse_any(const uint8_t *data, size_t size)
{
    kcache_cubin_info *info = (kcache_cubin_info *)(uintptr_t)1;
    char err[128] = "unset";
    int rc = kcache_cubin_parse(&info, data, size, err, sizeof(err));
    if (rc == 0) {
        CHECK(info != NULL);
        for (size_t i = 0; info && i < info->n_kernels; i++)
            CHECK(info->kernels[i].name && info->kernels[i].name[0]);
        kcache_cubin_free(info);
    } else {
        CHECK(rc == KCACHE_EINVAL);
        CHECK(info == NULL);
        CHECK(err[0] && strcmp(err, "unset") != 0 && !strchr(err, '\n'));
    }
    return rc;
}

static void bad(const void *data, size_t size, const char *want_in_message)
{
    kcache_cubin_info *info = NULL;
    char err[256] = "";
    CHECK_RC(kcache_cubin_parse(&info, data, size, err, sizeof(err)), KCACHE_EINVAL);
    CHECK(info == NULL);
    if (!strstr(err, want_in_message)) {
        fprintf(stderr, "message \"%s\" does not say \"%s\"\n", err, want_in_message);
        test_failures++;
    }
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    put_u16(p, (uint16_t)v);
    put_u16(p + 2, (uint16_t)(v >> 16));
}

static void test_not_cubins(void)
{
    size_t size;
    uint8_t *cubin = read_fixture("saxpy_sm90.cubin", &size);
    uint8_t *b = malloc(size);
    REQUIRE(b);

    bad("", 0, "ELF");
    bad("hello, world", 12, "ELF");
    bad("\x7f"
        "ELF",
        4, "truncated");
    /* Bytes the user might hand to inspect by mistake: PTX text. */
    static const char ptx[] =
        "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90\n";
    bad(ptx, sizeof(ptx) - 1, "ELF");

    memcpy(b, cubin, size);
    b[4] = 1; /* ELFCLASS32 */
    bad(b, size, "64-bit");
    memcpy(b, cubin, size);
    b[5] = 2; /* big-endian */
    bad(b, size, "little-endian");
    memcpy(b, cubin, size);
    put_u16(b + 18, 62); /* EM_X86_64: a host object */
    bad(b, size, "not an NVIDIA GPU");
    memcpy(b, cubin, size);
    put_u32(b + 48, 0x06000004); /* no SM */
    bad(b, size, "no SM");
    memcpy(b, cubin, size);
    put_u16(b + 58, 40); /* e_shentsize */
    bad(b, size, "section headers");
    memcpy(b, cubin, size);
    put_u16(b + 60, 0x7fff); /* e_shnum past the end */
    bad(b, size, "do not fit");
    /*
     * Section names in section 0, which lies far past the end: section 0 was
     * not checked and this read out of bounds (found by fuzzing; fuzz corpus:
     * regress-shstrndx-section0-oob).
     */
    memcpy(b, cubin, size);
    put_u16(b + 62, 0);
    {
        size_t shoff = (size_t)b[40] | (size_t)b[41] << 8 | (size_t)b[42] << 16;
        REQUIRE(shoff + 64 <= size);
        put_u32(b + shoff, 1);               /* sh_name */
        put_u32(b + shoff + 4, 1);           /* SHT_PROGBITS */
        put_u32(b + shoff + 24, 0x7ffffff0); /* sh_offset */
        put_u32(b + shoff + 32, 0x100000);   /* sh_size */
    }
    bad(b, size, "section 0 lies past its end");
    /* Truncated downloads: every section table that does not fit is refused. */
    bad(cubin, size - 1, "truncated");
    bad(cubin, size / 2, "truncated");
    bad(cubin, 64, "truncated");

    /* The API's own arguments. */
    kcache_cubin_info *info = NULL;
    CHECK_RC(kcache_cubin_parse(NULL, cubin, size, NULL, 0), KCACHE_EINVAL);
    CHECK_RC(kcache_cubin_parse(&info, NULL, 10, NULL, 0), KCACHE_EINVAL);
    CHECK(info == NULL);
    CHECK_RC(kcache_cubin_parse(&info, "xx", 2, NULL, 0), KCACHE_EINVAL); /* no errbuf: fine */
    char tiny[8];
    CHECK_RC(kcache_cubin_parse(&info, "xx", 2, tiny, sizeof(tiny)), KCACHE_EINVAL);
    CHECK(strlen(tiny) == sizeof(tiny) - 1);
    kcache_cubin_free(NULL);

    /* The buffer need not be aligned. */
    uint8_t *odd = malloc(size + 1);
    REQUIRE(odd);
    memcpy(odd + 1, cubin, size);
    CHECK_RC(kcache_cubin_parse(&info, odd + 1, size, NULL, 0), 0);
    CHECK(info && info->n_kernels == 1 && info->kernels[0].registers == 24);
    kcache_cubin_free(info);
    free(odd);
    free(b);
    free(cubin);
}

/* The layout before ELF ABI 8 (CUDA 12 and older): the SM in the low byte of e_flags. */
static void test_abi7(void)
{
    size_t size;
    uint8_t *b = read_fixture("saxpy_sm80.cubin", &size);
    b[8] = 7;
    put_u32(b + 48, 0x005a0d5a); /* EF_CUDA_SM90 | VIRTUAL_SM(90) | ACCELERATORS_V1 | 64-bit */
    kcache_cubin_info *info = NULL;
    CHECK_RC(kcache_cubin_parse(&info, b, size, NULL, 0), 0);
    REQUIRE(info);
    CHECK(info->sm == 90 && strcmp(info->arch, "sm_90a") == 0 && info->elf_abi_version == 7);
    kcache_cubin_free(info);

    /* Without EIATTR_REGCOUNT, the count that ABI 7 keeps in the .text's sh_info. */
    int found = 0;
    for (size_t i = 0; i + 12 <= size; i++) {
        if (memcmp(b + i, "\x04\x2f\x08\x00", 4) == 0) {
            b[i + 1] = 0x7e; /* an attribute nobody knows: skipped */
            found = 1;
        }
    }
    REQUIRE(found);
    CHECK_RC(kcache_cubin_parse(&info, b, size, NULL, 0), 0);
    REQUIRE(info);
    CHECK(info->n_kernels == 1 && info->kernels[0].registers == 24);
    kcache_cubin_free(info);
    free(b);
}

/*
 * A synthetic CUBIN: n_sections PROGBITS sections all named by one name of
 * shstr_len bytes, and n_kernels kernel symbols all named by one name of
 * str_len bytes. Small shapes give a valid file; large ones, hostile ones.
 */
static uint8_t *make_cubin(size_t *size_out, size_t n_sections, size_t shstr_len, size_t n_kernels,
                           size_t str_len)
{
    size_t shstr_off = 64, shstr_size = shstr_len + 2;
    size_t str_off = shstr_off + shstr_size, str_size = str_len + 2;
    size_t sym_off = (str_off + str_size + 7) & ~(size_t)7, sym_size = (n_kernels + 1) * 24;
    size_t sh_off = sym_off + sym_size, shnum = 4 + n_sections;
    size_t size = sh_off + shnum * 64;
    REQUIRE(shnum < 0xff00);
    uint8_t *b = calloc(1, size);
    REQUIRE(b);
    memcpy(b,
           "\x7f"
           "ELF\x02\x01\x01\x41\x08",
           9);
    put_u16(b + 16, 2);   /* ET_EXEC */
    put_u16(b + 18, 190); /* EM_CUDA */
    put_u32(b + 20, 1);
    put_u32(b + 40, (uint32_t)sh_off);
    put_u32(b + 48, 0x06005a04); /* sm_90, ABI 8 */
    put_u16(b + 52, 64);
    put_u16(b + 58, 64);
    put_u16(b + 60, (uint16_t)shnum);
    put_u16(b + 62, 1);
    memset(b + shstr_off + 1, 'x', shstr_len);
    memset(b + str_off + 1, 'k', str_len);
    for (size_t i = 1; i <= n_kernels; i++) {
        uint8_t *sym = b + sym_off + i * 24;
        put_u32(sym, 1);
        sym[4] = 0x12; /* STB_GLOBAL, STT_FUNC */
        sym[5] = 0x10; /* an entry point */
    }
    const struct {
        uint32_t type;
        size_t off, size, link, entsize;
    } sec[4] = {{0, 0, 0, 0, 0},
                {3, shstr_off, shstr_size, 0, 0},
                {3, str_off, str_size, 0, 0},
                {2, sym_off, sym_size, 2, 24}};
    for (size_t i = 0; i < shnum; i++) {
        uint8_t *sh = b + sh_off + i * 64;
        put_u32(sh, i ? 1 : 0);
        put_u32(sh + 4, i < 4 ? sec[i].type : 1);
        if (i < 4) {
            put_u32(sh + 24, (uint32_t)sec[i].off);
            put_u32(sh + 32, (uint32_t)sec[i].size);
            put_u32(sh + 40, (uint32_t)sec[i].link);
            put_u32(sh + 56, (uint32_t)sec[i].entsize);
        }
    }
    *size_out = size;
    return b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Inputs shaped to make a careless reader slow: names shared by many
 * sections or symbols were scanned once per user, time quadratic in the input
 * (1.5 s and 4.5 s for far smaller shapes than these; minutes for these). A
 * linear reader takes milliseconds.
 */
static void test_hostile_shapes(void)
{
    size_t size;
    kcache_cubin_info *info = NULL;
    char err[256];

    uint8_t *b = make_cubin(&size, 0, 4, 1, 5);
    CHECK_RC(kcache_cubin_parse(&info, b, size, err, sizeof(err)), 0);
    REQUIRE(info);
    CHECK(strcmp(info->arch, "sm_90") == 0 && info->n_kernels == 1);
    CHECK(info->n_kernels == 1 && strcmp(info->kernels[0].name, "kkkkk") == 0);
    kcache_cubin_free(info);
    free(b);

    b = make_cubin(&size, 0xfe00, 8 << 20, 0, 1);
    double t = now_s();
    CHECK_RC(kcache_cubin_parse(&info, b, size, err, sizeof(err)), 0);
    t = now_s() - t;
    if (t > 2.0) {
        fprintf(stderr, "%zu sections sharing an 8 MiB name took %.1f s\n", (size_t)0xfe00, t);
        test_failures++;
    }
    CHECK(info && info->n_kernels == 0);
    kcache_cubin_free(info);
    free(b);

    b = make_cubin(&size, 0, 1, 200000, 4 << 20);
    t = now_s();
    CHECK_RC(kcache_cubin_parse(&info, b, size, err, sizeof(err)), KCACHE_EINVAL);
    t = now_s() - t;
    CHECK(strstr(err, "share names") != NULL);
    if (t > 2.0) {
        fprintf(stderr, "200000 kernels sharing a 4 MiB name took %.1f s\n", t);
        test_failures++;
    }
    free(b);
}

/*
 * Every truncation and every single-byte change of real CUBINs: each is
 * either read or refused with a message, and never crashes (the sanitizer
 * builds make any out-of-bounds read fail here).
 */
static void test_damage(void)
{
    static const char *const names[] = {"saxpy_sm90.cubin", "spill_rdc_sm80.cubin"};
    for (size_t f = 0; f < sizeof(names) / sizeof(names[0]); f++) {
        size_t size;
        uint8_t *cubin = read_fixture(names[f], &size);
        /* Exactly sized copies, so that a read past the end is caught by ASan. */
        for (size_t n = 0; n < size; n += (f == 0 ? 1 : 7)) {
            uint8_t *b = malloc(n ? n : 1);
            REQUIRE(b);
            memcpy(b, cubin, n);
            parse_any(b, n);
            free(b);
        }
        uint8_t *b = malloc(size);
        REQUIRE(b);
        static const uint8_t values[] = {0x00, 0xff, 0x80, 0x01};
        size_t step = f == 0 ? 1 : 5;
        for (size_t i = 0; i < size; i += step) {
            for (size_t v = 0; v < sizeof(values); v++) {
                memcpy(b, cubin, size);
                if (b[i] == values[v])
                    continue;
                b[i] = values[v];
                parse_any(b, size);
            }
        }
        free(b);
        free(cubin);
    }
}

int main(void)
{
    (void)test_path; /* from testutil.h; this test needs no files */
    test_fixtures();
    test_not_cubins();
    test_abi7();
    test_hostile_shapes();
    test_damage();
    return test_done();
}
