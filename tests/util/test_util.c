/* Sizes, ages, size formatting and key hex: what users type and read. */
#include <inttypes.h>
#include <kcache/kcache.h>

#include "testutil.h"

static void size_ok(const char *text, uint64_t want)
{
    uint64_t got = 0;
    int rc = kcache_parse_size(&got, text);
    if (rc != 0 || got != want) {
        fprintf(stderr, "parse_size(\"%s\") = %d, %" PRIu64 "; wanted %" PRIu64 "\n", text, rc,
                got, want);
        test_failures++;
    }
}

static void size_bad(const char *text)
{
    uint64_t got = 12345;
    int rc = kcache_parse_size(&got, text);
    if (rc != KCACHE_EINVAL || got != 12345) {
        fprintf(stderr, "parse_size(\"%s\") = %d (%" PRIu64 "); wanted EINVAL, untouched\n", text,
                rc, got);
        test_failures++;
    }
}

static void age_ok(const char *text, uint64_t want)
{
    uint64_t got = 0;
    int rc = kcache_parse_age(&got, text);
    if (rc != 0 || got != want) {
        fprintf(stderr, "parse_age(\"%s\") = %d, %" PRIu64 "; wanted %" PRIu64 "\n", text, rc,
                got, want);
        test_failures++;
    }
}

static void age_bad(const char *text)
{
    uint64_t got = 0;
    int rc = kcache_parse_age(&got, text);
    if (rc != KCACHE_EINVAL) {
        fprintf(stderr, "parse_age(\"%s\") = %d; wanted EINVAL\n", text, rc);
        test_failures++;
    }
}

static void fmt_is(uint64_t bytes, const char *want)
{
    char buf[32];
    const char *got = kcache_format_size(buf, sizeof(buf), bytes);
    if (got != buf || strcmp(buf, want) != 0) {
        fprintf(stderr, "format_size(%" PRIu64 ") = \"%s\"; wanted \"%s\"\n", bytes, buf, want);
        test_failures++;
    }
}

static void test_parse_size(void)
{
    size_ok("0", 0);
    size_ok("4096", UINT64_C(4096) << 30); /* a bare number is GiB, as in ccache */
    size_ok("1.5", UINT64_C(3) << 29);
    size_ok("4096B", 4096);
    size_ok("512K", 512 * 1024);
    size_ok("512KiB", 512 * 1024);
    size_ok("512kb", 512 * 1024);
    size_ok("300MB", UINT64_C(300) << 20);
    size_ok("2G", UINT64_C(2) << 30);
    size_ok("2 GiB", UINT64_C(2) << 30);
    size_ok("1.5GiB", UINT64_C(3) << 29);
    size_ok("1.5G", UINT64_C(3) << 29);
    size_ok("0.5M", UINT64_C(1) << 19);
    size_ok("1T", UINT64_C(1) << 40);
    size_ok("16777215T", UINT64_C(16777215) << 40);
    size_ok(" 7K ", 7 * 1024);

    size_bad("");
    size_bad(" ");
    size_bad("K");
    size_bad("abc");
    size_bad("12Q");
    size_bad("2GG");
    size_bad("2 G B");
    size_bad("1.");
    size_bad(".");
    size_bad("1.2.3");
    size_bad("-1");
    size_bad("-1G");
    size_bad("+5");
    size_bad("1e3");
    size_bad("0x10");
    size_bad("5K junk");
    /* Overflow, by digits and by unit. */
    size_bad("18446744073709551616");
    size_bad("99999999999999999999999");
    size_bad("16777216T");
    size_bad("17179869184G");
    size_bad("18446744073709551615K");
    /* Not a size at all. */
    CHECK_RC(kcache_parse_size(NULL, "1K"), KCACHE_EINVAL);
    uint64_t v;
    CHECK_RC(kcache_parse_size(&v, NULL), KCACHE_EINVAL);
}

static void test_parse_age(void)
{
    age_ok("30d", UINT64_C(30) * 86400);
    age_ok("12h", UINT64_C(12) * 3600);
    age_ok("90m", 90 * 60);
    age_ok("45s", 45);
    age_ok("2w", UINT64_C(2) * 604800);
    age_ok("1.5h", 5400);
    age_ok("1 day", 86400);
    age_bad("");
    age_bad("30");  /* no unit: seconds or days? say it */
    age_bad("30x");
    age_bad("-1d");
    age_bad("d");
    age_bad("99999999999999999999w");
    age_ok("366000d", KCACHE_AGE_MAX);
    age_bad("366001d"); /* past KCACHE_AGE_MAX: its milliseconds before now would overflow */
    age_bad("30000000000000w");
    age_bad("nan");
    age_bad("1e99s");
    age_bad("0x10s");
}

static void test_parse_count(void)
{
    uint64_t v = 7;
    CHECK_RC(kcache_parse_count(&v, "18446744073709551615", 0, UINT64_MAX), 0);
    CHECK(v == UINT64_MAX);
    CHECK_RC(kcache_parse_count(&v, "9223372036854775808", 0, UINT64_MAX), 0);
    CHECK(v == UINT64_C(1) << 63);
    CHECK_RC(kcache_parse_count(&v, " 12 ", 1, 256), 0);
    CHECK(v == 12);
    static const char *const bad[] = {"-1", "18446744073709551616", "99999999999999999999",
                                      "1e99", "nan", "inf", "0x10", "1.5", "", "+3", "3 x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        CHECK_RC(kcache_parse_count(&v, bad[i], 0, UINT64_MAX), KCACHE_EINVAL);
        CHECK(v == 7);
    }
    CHECK_RC(kcache_parse_count(&v, "257", 1, 256), KCACHE_EINVAL);
    CHECK_RC(kcache_parse_count(&v, "0", 1, 256), KCACHE_EINVAL);
    CHECK_RC(kcache_parse_count(&v, "9223372036854775808", 1, 3600000), KCACHE_EINVAL);
}

static void test_format_size(void)
{
    fmt_is(0, "0 B");
    fmt_is(1, "1 B");
    fmt_is(1023, "1023 B");
    fmt_is(1024, "1.00 KiB");
    fmt_is(1536, "1.50 KiB");
    fmt_is(512 * 1024, "512 KiB");
    fmt_is(UINT64_C(3) << 29, "1.50 GiB");
    fmt_is(UINT64_C(20) << 20, "20.0 MiB");
    /* Rounding must not print a value that belongs to the next unit. */
    fmt_is((UINT64_C(1) << 20) - 1, "1.00 MiB");
    fmt_is((UINT64_C(1) << 30) - 1, "1.00 GiB");
    fmt_is(UINT64_MAX, "16.0 EiB");

    /* What users type back in parses to about what was printed. */
    char buf[32];
    uint64_t back;
    kcache_format_size(buf, sizeof(buf), UINT64_C(3) << 29);
    CHECK_RC(kcache_parse_size(&back, buf), 0);
    CHECK(back == UINT64_C(3) << 29);

    /* Truncated to the buffer, always terminated. */
    char small[4];
    memset(small, 'x', sizeof(small));
    kcache_format_size(small, sizeof(small), UINT64_C(3) << 29);
    CHECK(small[3] == '\0' && strlen(small) == 3);
    CHECK(kcache_format_size(NULL, 10, 1) == NULL);
}

static void test_key_hex(void)
{
    kcache_key k, back;
    for (int i = 0; i < KCACHE_KEY_SIZE; i++)
        k.bytes[i] = (uint8_t)(i * 37 + 11);
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &k);
    CHECK(strlen(hex) == 64);
    CHECK(strncmp(hex, "0b30557a", 8) == 0);
    for (int i = 0; i < 64; i++)
        CHECK((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'));
    memset(&back, 0, sizeof(back));
    CHECK_RC(kcache_key_parse(&back, hex), 0);
    CHECK(memcmp(&back, &k, sizeof(k)) == 0);

    /* Upper case is the same key. */
    char upper[KCACHE_KEY_HEX_SIZE];
    for (int i = 0; i < KCACHE_KEY_HEX_SIZE; i++)
        upper[i] = (char)((hex[i] >= 'a' && hex[i] <= 'f') ? hex[i] - 32 : hex[i]);
    memset(&back, 0, sizeof(back));
    CHECK_RC(kcache_key_parse(&back, upper), 0);
    CHECK(memcmp(&back, &k, sizeof(k)) == 0);

    /* Every byte value round-trips. */
    for (int v = 0; v < 256; v++) {
        memset(&k, v, sizeof(k));
        kcache_key_hex(hex, &k);
        CHECK_RC(kcache_key_parse(&back, hex), 0);
        CHECK(memcmp(&back, &k, sizeof(k)) == 0);
    }

    char bad[80];
    CHECK_RC(kcache_key_parse(&back, ""), KCACHE_EINVAL);
    snprintf(bad, sizeof(bad), "%.63s", hex);
    CHECK_RC(kcache_key_parse(&back, bad), KCACHE_EINVAL);
    snprintf(bad, sizeof(bad), "%s0", hex);
    CHECK_RC(kcache_key_parse(&back, bad), KCACHE_EINVAL);
    snprintf(bad, sizeof(bad), "%s", hex);
    bad[10] = 'g';
    CHECK_RC(kcache_key_parse(&back, bad), KCACHE_EINVAL);
    bad[10] = ' ';
    CHECK_RC(kcache_key_parse(&back, bad), KCACHE_EINVAL);
    CHECK_RC(kcache_key_parse(NULL, hex), KCACHE_EINVAL);
    CHECK_RC(kcache_key_parse(&back, NULL), KCACHE_EINVAL);
}

static void test_kinds_and_errors(void)
{
    kcache_kind k;
    CHECK_RC(kcache_kind_parse(&k, "ptx"), 0);
    CHECK(k == KCACHE_KIND_PTX);
    CHECK_RC(kcache_kind_parse(&k, "PTX "), KCACHE_EINVAL);
    CHECK(kcache_kind_name((kcache_kind)0) == NULL);
    CHECK(strcmp(kcache_kind_name(KCACHE_KIND_LTOIR), "ltoir") == 0);
    for (int code = 0; code >= KCACHE_EDISABLED; code--)
        CHECK(strcmp(kcache_strerror(code), "unknown error") != 0);
    CHECK(strcmp(kcache_strerror(-1000), "unknown error") == 0);
}

/* The exported kcache_xxx_init(): as the macro, and only as much as the version laid out. */
static void test_exported_inits(void)
{
    kcache_store_options o;
    memset(&o, 0xab, sizeof(o));
    CHECK_RC(kcache_store_options_init(&o, KCACHE_STORE_OPTIONS_VERSION), 0);
    kcache_store_options want = KCACHE_STORE_OPTIONS_INIT;
    CHECK(memcmp(&o, &want, sizeof(o)) == 0);
    /* A caller built against version 1 has no no_create or compression: not written. */
    memset(&o, 0xab, sizeof(o));
    CHECK_RC(kcache_store_options_init(&o, 1), 0);
    CHECK(o.version == 1 && o.path == NULL && o.max_size == 0 && o.log_userdata == NULL);
    const unsigned char *tail = (const unsigned char *)&o.no_create;
    CHECK(tail[0] == 0xab && ((const unsigned char *)&o)[sizeof(o) - 1] == 0xab);
    CHECK_RC(kcache_store_options_init(&o, 0), KCACHE_EINVAL);
    CHECK_RC(kcache_store_options_init(&o, KCACHE_STORE_OPTIONS_VERSION + 1), KCACHE_EINVAL);
    CHECK_RC(kcache_store_options_init(NULL, 1), KCACHE_EINVAL);
    kcache_request r;
    CHECK_RC(kcache_request_init(&r, KCACHE_REQUEST_VERSION), 0);
    CHECK(r.version == KCACHE_REQUEST_VERSION && r.source == NULL && r.compile == NULL);
    kcache_gpu_options g;
    CHECK_RC(kcache_gpu_options_init(&g, 1), 0);
    kcache_transfer t;
    CHECK_RC(kcache_transfer_init(&t, KCACHE_TRANSFER_VERSION + 1), KCACHE_EINVAL);
}

int main(void)
{
    (void)test_path; /* from testutil.h; this test needs no files */
    test_parse_size();
    test_parse_age();
    test_parse_count();
    test_format_size();
    test_key_hex();
    test_kinds_and_errors();
    test_exported_inits();
    return test_done();
}
