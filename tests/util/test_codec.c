/* The codec: what it stores decodes to exactly what was put, or is refused. */
#include <zstd.h>

/* xxHash at this file's own (baseline) vector width: what every CPU must agree with. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/codec.h"
#include "testutil.h"

static void fill_compressible(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i % 64 < 48) ? (i * 7 + seed) % 13 : (seed * 31 + i) % 251);
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        p[i] = (uint8_t)(seed >> 56);
    }
}

/* Encodes with method, checks the codec chosen, decodes both ways and compares. */
static void round_trip_with(kc_codec_ctx *c, int method, const uint8_t *raw, size_t n,
                            int want_codec)
{
    kc_buf enc = {0};
    int codec = -1;
    CHECK_RC(kc_encode(c, &enc, &codec, method, raw, n), 0);
    if (codec != want_codec)
        fprintf(stderr, "method %s, %zu bytes: codec %d, wanted %d\n",
                kc_compression_name(method), n, codec, want_codec);
    CHECK(codec == want_codec);
    if (codec != KC_CODEC_RAW)
        CHECK(enc.size < n);
    else
        CHECK(enc.size == n);
    void *out = NULL;
    CHECK_RC(kc_decode(c, &out, codec, enc.data, enc.size, n), 0);
    REQUIRE(out);
    CHECK(n == 0 || memcmp(out, raw, n) == 0);
    CHECK(((char *)out)[n] == '\0');
    free(out);
    uint8_t *into = malloc(n + 1);
    REQUIRE(into);
    CHECK_RC(kc_decode_into(c, into, codec, enc.data, enc.size, n), 0);
    CHECK(n == 0 || memcmp(into, raw, n) == 0);
    free(into);
    /* The encoding is a pure function of the input. */
    kc_buf again = {0};
    int codec2;
    CHECK_RC(kc_encode(c, &again, &codec2, method, raw, n), 0);
    CHECK(codec2 == codec && again.size == enc.size &&
          (enc.size == 0 || memcmp(again.data, enc.data, enc.size) == 0));
    kc_buf_free(&again);
    kc_buf_free(&enc);
}

static void round_trip(kc_codec_ctx *c, const uint8_t *raw, size_t n, int want_codec)
{
    round_trip_with(c, KC_CODEC_ZSTD, raw, n, want_codec);
}

static void test_round_trips(kc_codec_ctx *c)
{
    static uint8_t buf[1 << 20];
    round_trip(c, buf, 0, KC_CODEC_RAW);
    fill_compressible(buf, 10, 1);
    round_trip(c, buf, 10, KC_CODEC_RAW); /* tiny: raw */
    fill_compressible(buf, sizeof(buf), 2);
    round_trip(c, buf, 4096, KC_CODEC_ZSTD);
    round_trip(c, buf, sizeof(buf), KC_CODEC_ZSTD);
    fill_random(buf, sizeof(buf), 3);
    round_trip(c, buf, 100000, KC_CODEC_RAW); /* incompressible: raw */
    /* The context is reused after an incompressible input. */
    fill_compressible(buf, 300000, 4);
    round_trip(c, buf, 300000, KC_CODEC_ZSTD);
}

/*
 * Each setting of `compression`: what it stores and that any context reads
 * it back (a store reads rows whatever it writes now).
 */
static void test_methods(kc_codec_ctx *c)
{
    static uint8_t buf[1 << 20];
    static const struct {
        const char *name;
        int method;
    } m[] = {{"zstd", KC_CODEC_ZSTD}, {"lz4", KC_CODEC_LZ4B}, {"none", KC_CODEC_RAW}};
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        int method = -1;
        CHECK_RC(kc_compression_parse(&method, m[i].name), 0);
        CHECK(method == m[i].method);
        CHECK(!strcmp(kc_compression_name(method), m[i].name));
        CHECK(kc_codec_known(method));
        round_trip_with(c, method, buf, 0, KC_CODEC_RAW);
        fill_compressible(buf, 10, 1);
        round_trip_with(c, method, buf, 10, KC_CODEC_RAW); /* tiny: raw, whatever the method */
        fill_compressible(buf, sizeof(buf), 2);
        round_trip_with(c, method, buf, 4096, method);
        round_trip_with(c, method, buf, sizeof(buf), method);
        fill_random(buf, 100000, 3);
        round_trip_with(c, method, buf, 100000, KC_CODEC_RAW); /* incompressible */
        fill_compressible(buf, 300000, 4);
        round_trip_with(c, method, buf, 300000, method);
    }
    /* The names a user may write, and nothing else: no case folding, no levels. */
    static const char *const bad[] = {"", "ZSTD", "lz4hc", "zstd:6", "gzip", "raw", " none"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int method = 42;
        CHECK_RC(kc_compression_parse(&method, bad[i]), KCACHE_EINVAL);
        CHECK(method == 42);
    }
    CHECK(kc_compression_name(7) == NULL);
    CHECK(!kc_codec_known(5) && !kc_codec_known(-1) && kc_codec_known(KC_CODEC_LZ4C));
    /* The frames an earlier `lz4` wrote still decode, and still count as lz4. */
    CHECK(kc_codec_known(KC_CODEC_LZ4) && !strcmp(kc_compression_name(KC_CODEC_LZ4), "lz4"));
    fill_compressible(buf, 65536, 6);
    round_trip_with(c, KC_CODEC_LZ4, buf, 65536, KC_CODEC_LZ4);

    /* A fresh context decodes what another wrote, in any codec. */
    kc_codec_ctx *other = NULL;
    REQUIRE(kc_codec_new(&other) == 0);
    fill_compressible(buf, 65536, 5);
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        kc_buf enc = {0};
        int codec;
        REQUIRE(kc_encode(c, &enc, &codec, m[i].method, buf, 65536) == 0);
        uint8_t *out = malloc(65536);
        REQUIRE(out);
        CHECK_RC(kc_decode_into(other, out, codec, enc.data, enc.size, 65536), 0);
        CHECK(memcmp(out, buf, 65536) == 0);
        free(out);
        kc_buf_free(&enc);
    }
    kc_codec_free(other);
}

static int decodes(kc_codec_ctx *c, int codec, const void *stored, size_t n, size_t raw_size)
{
    void *out = (void *)1;
    int rc = kc_decode(c, &out, codec, stored, n, raw_size);
    CHECK(rc != 0 || out != NULL);
    CHECK(rc == 0 || out == NULL);
    free(out);
    return rc;
}

static void test_damage(kc_codec_ctx *c)
{
    enum { N = 200000 };
    static uint8_t raw[N];
    fill_compressible(raw, N, 5);
    kc_buf enc = {0};
    int codec;
    REQUIRE(kc_encode(c, &enc, &codec, KC_CODEC_ZSTD, raw, N) == 0 && codec == KC_CODEC_ZSTD);
    uint8_t *copy = malloc(enc.size);
    REQUIRE(copy);

    /* Truncated anywhere. */
    size_t cuts[] = {0, 1, 4, 5, 12, enc.size / 2, enc.size - 5, enc.size - 4, enc.size - 1};
    for (size_t i = 0; i < KC_ARRAY_SIZE(cuts); i++)
        CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, cuts[i], N), KCACHE_ECORRUPT);

    /* One byte altered anywhere: header, blocks, checksum. Every position of
     * a smaller frame, and a spread of them in this one. */
    unsigned benign = 0, refused = 0;
    for (size_t pos = 0; pos < enc.size; pos += pos < 64 ? 1 : 97) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(copy, enc.data, enc.size);
            copy[pos] ^= (uint8_t)(1u << bit);
            /* A change that does not change what the frame decodes to (an
             * unused bit of a table) may pass; different bytes never do. The
             * store's digest of the stored bytes catches those too. */
            void *out = NULL;
            int rc = kc_decode(c, &out, KC_CODEC_ZSTD, copy, enc.size, N);
            if (rc == 0 && memcmp(out, raw, N) == 0) {
                benign++;
            } else if (rc != KCACHE_ECORRUPT) {
                fprintf(stderr, "byte %zu bit %d altered: decode returned %d\n", pos, bit, rc);
                test_failures++;
            } else {
                refused++;
            }
            free(out);
        }
    }
    CHECK(refused > 20 * benign);
    /* The last bytes are the checksum: the frame decodes, the check catches it. */
    for (size_t k = 1; k <= 4; k++) {
        memcpy(copy, enc.data, enc.size);
        copy[enc.size - k] ^= 0xff;
        CHECK_RC(decodes(c, KC_CODEC_ZSTD, copy, enc.size, N), KCACHE_ECORRUPT);
    }

    /* A frame that claims another size than the entry records. */
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, enc.size, N - 1), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, enc.size, N + 1), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, enc.size, 0), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, enc.size, SIZE_MAX), KCACHE_ECORRUPT);

    /* A frame without a content size, and one that lies about it. */
    ZSTD_CCtx *z = ZSTD_createCCtx();
    REQUIRE(z);
    ZSTD_CCtx_setParameter(z, ZSTD_c_contentSizeFlag, 0);
    ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
    size_t bound = ZSTD_compressBound(N);
    uint8_t *frame = malloc(bound);
    REQUIRE(frame);
    size_t fn = ZSTD_compress2(z, frame, bound, raw, N);
    REQUIRE(!ZSTD_isError(fn));
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, frame, fn, N), KCACHE_ECORRUPT);
    ZSTD_CCtx_reset(z, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setPledgedSrcSize(z, N / 2);
    fn = ZSTD_compress2(z, frame, bound, raw, N / 2);
    REQUIRE(!ZSTD_isError(fn));
    /* A frame of N/2 bytes decoding into a buffer of N: refused. */
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, frame, fn, N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, frame, fn, N / 2), 0);
    /* Two frames back to back whose sum is the right size: the first frame's
     * header does not describe the whole, so they are refused. */
    size_t fn2 = ZSTD_compress2(z, frame + fn, bound - fn, raw + N / 2, N / 2);
    if (!ZSTD_isError(fn2))
        CHECK_RC(decodes(c, KC_CODEC_ZSTD, frame, fn + fn2, N), KCACHE_ECORRUPT);
    ZSTD_freeCCtx(z);
    free(frame);

    /* Raw bytes whose length does not match. */
    CHECK_RC(decodes(c, KC_CODEC_RAW, raw, 100, 101), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_RAW, raw, 101, 100), KCACHE_ECORRUPT);
    /* A codec this build does not know. */
    CHECK_RC(decodes(c, 7, enc.data, enc.size, N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, -1, raw, 100, 100), KCACHE_ECORRUPT);
    /* Garbage that is not a frame at all. */
    fill_random(copy, enc.size, 9);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, copy, enc.size, N), KCACHE_ECORRUPT);

    free(copy);
    kc_buf_free(&enc);

    /* LZ4 frames: cut, flipped, followed by more, or claiming another size are refused. */
    REQUIRE(kc_encode(c, &enc, &codec, KC_CODEC_LZ4, raw, N) == 0 && codec == KC_CODEC_LZ4);
    REQUIRE((copy = malloc(enc.size)));
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
        if (cuts[i] < enc.size)
            CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, cuts[i], N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, enc.size, N - 1), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, enc.size, N + 1), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, enc.size, 0), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, enc.size, SIZE_MAX), KCACHE_ECORRUPT);
    /* Another codec's bytes under the lz4 number, and lz4's under zstd's. */
    CHECK_RC(decodes(c, KC_CODEC_LZ4, raw, 100, N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, enc.size, N), KCACHE_ECORRUPT);
    /* Flips anywhere, header and checksum included: refused, or (a bit the frame does
     * not use) the same bytes; other bytes never. The context is reused after each. */
    for (size_t pos = 0; pos < enc.size; pos += pos < 64 ? 1 : 1 + enc.size / 97) {
        memcpy(copy, enc.data, enc.size);
        copy[pos] ^= 0x5a;
        uint8_t *out = malloc(N);
        REQUIRE(out);
        int rc = kc_decode_into(c, out, KC_CODEC_LZ4, copy, enc.size, N);
        if (!(rc == KCACHE_ECORRUPT || (rc == 0 && memcmp(out, raw, N) == 0))) {
            fprintf(stderr, "lz4 byte %zu altered: decode returned %d\n", pos, rc);
            test_failures++;
        }
        free(out);
    }
    CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, enc.size, N), 0);
    {
        uint8_t *more = malloc(enc.size + 4);
        REQUIRE(more);
        memcpy(more, enc.data, enc.size);
        memset(more + enc.size, 0, 4);
        CHECK_RC(decodes(c, KC_CODEC_LZ4, more, enc.size + 4, N), KCACHE_ECORRUPT);
        free(more);
    }
    free(copy);
    kc_buf_free(&enc);

    /*
     * LZ4 blocks: cut, followed by more, or claiming another size are refused
     * without allocating what a damaged size claims. A block has no checksum
     * of its own (the stored digest, checked before any decode, is its
     * check: test_corruption), so flips are only required not to crash.
     */
    REQUIRE(kc_encode(c, &enc, &codec, KC_CODEC_LZ4B, raw, N) == 0 && codec == KC_CODEC_LZ4B);
    REQUIRE((copy = malloc(enc.size + 4)));
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
        if (cuts[i] < enc.size)
            CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, cuts[i], N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, enc.size, N - 1), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, enc.size, N + 1), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, enc.size, 0), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, enc.size, SIZE_MAX), KCACHE_ECORRUPT);
    CHECK(!kc_decode_plausible(KC_CODEC_LZ4B, enc.data, 16, (size_t)1 << 30));
    CHECK_RC(decodes(c, KC_CODEC_LZ4, enc.data, enc.size, N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_ZSTD, enc.data, enc.size, N), KCACHE_ECORRUPT);
    memcpy(copy, enc.data, enc.size);
    memset(copy + enc.size, 0, 4);
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, copy, enc.size + 4, N), KCACHE_ECORRUPT);
    for (size_t pos = 0; pos < enc.size; pos += 1 + enc.size / 97) {
        memcpy(copy, enc.data, enc.size);
        copy[pos] ^= 0x5a;
        uint8_t *out = malloc(N);
        REQUIRE(out);
        int rc = kc_decode_into(c, out, KC_CODEC_LZ4B, copy, enc.size, N);
        CHECK(rc == 0 || rc == KCACHE_ECORRUPT);
        free(out);
    }
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, enc.size, N), 0);
    free(copy);
    kc_buf_free(&enc);
}

/*
 * Hashed LZ4 blocks (closure chunks): every byte changed, in the hash or in
 * the block, and every cut are refused, so a damaged chunk never decodes to
 * other bytes of its length; they say they check themselves.
 */
static void test_checked_blocks(kc_codec_ctx *c)
{
    enum { N = 6000 };
    static uint8_t raw[N];
    fill_compressible(raw, N, 7);
    kc_buf enc = {0};
    int codec = -1;
    REQUIRE(kc_encode(c, &enc, &codec, KC_CODEC_LZ4C, raw, N) == 0 && codec == KC_CODEC_LZ4C);
    CHECK(kc_stored_checks_itself(KC_CODEC_LZ4C, enc.data, enc.size));
    CHECK(!kc_stored_checks_itself(KC_CODEC_LZ4B, enc.data + KC_LZ4C_HASH,
                                   enc.size - KC_LZ4C_HASH));
    CHECK(kc_decode_plausible(KC_CODEC_LZ4C, enc.data, enc.size, N));
    CHECK(!kc_decode_plausible(KC_CODEC_LZ4C, enc.data, KC_LZ4C_HASH, N));
    CHECK_RC(decodes(c, KC_CODEC_LZ4C, enc.data, enc.size, N), 0);
    uint8_t *copy = malloc(enc.size), *out = malloc(N);
    REQUIRE(copy && out);
    size_t refused = 0, tried = 0;
    for (size_t pos = 0; pos < enc.size; pos++) {
        memcpy(copy, enc.data, enc.size);
        copy[pos] ^= 0x01;
        refused += kc_decode_into(c, out, KC_CODEC_LZ4C, copy, enc.size, N) == KCACHE_ECORRUPT;
        tried++;
    }
    CHECK(refused == tried);
    for (size_t cut = 0; cut < enc.size; cut += 1 + enc.size / 50)
        CHECK_RC(decodes(c, KC_CODEC_LZ4C, enc.data, cut, N), KCACHE_ECORRUPT);
    CHECK_RC(decodes(c, KC_CODEC_LZ4B, enc.data, enc.size, N), KCACHE_ECORRUPT);
    free(copy);
    free(out);
    kc_buf_free(&enc);
}

static void test_digest(void)
{
    uint8_t a[KC_DIGEST_SIZE], b[KC_DIGEST_SIZE];
    kc_digest(a, "", 0);
    kc_digest(b, NULL, 0);
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    /* BLAKE2b-256 of "abc" (libb2 and Python hashlib agree). */
    static const uint8_t abc[KC_DIGEST_SIZE] = {
        0xbd, 0xdd, 0x81, 0x3c, 0x63, 0x42, 0x39, 0x72, 0x31, 0x71, 0xef,
        0x3f, 0xee, 0x98, 0x57, 0x9b, 0x94, 0x96, 0x4e, 0x3b, 0xb1, 0xcb,
        0x3e, 0x42, 0x72, 0x62, 0xc8, 0xc0, 0x68, 0xd5, 0x23, 0x19};
    kc_digest(a, "abc", 3);
    CHECK(memcmp(a, abc, sizeof(a)) == 0);
    kc_digest(b, "abd", 3);
    CHECK(memcmp(a, b, sizeof(a)) != 0);
}

/*
 * The stored digest is XXH3-128 whichever vector width this CPU runs it at
 * (codec.c): the same as the baseline build's over every path of the hash
 * (short inputs, the middle ranges, the long loop, its last partial stripe),
 * aligned or not. A row written on one machine is read on another.
 */
static void test_stored_digest(void)
{
    static const size_t sizes[] = {0,   1,   3,   4,    8,    9,    16,   17,    128,  129,
                                   240, 241, 255, 1024, 1025, 4096, 4097, 29000, 65536, 100003};
    enum { MAX = 100003 + 1 };
    uint8_t *buf = malloc(MAX);
    REQUIRE(buf);
    fill_random(buf, MAX, 11);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t off = 0; off < 2; off++) {
            const uint8_t *p = buf + off;
            size_t n = sizes[i];
            uint8_t got[KC_DIGEST_SIZE];
            XXH128_canonical_t want;
            XXH128_canonicalFromHash(&want, XXH3_128bits(p, n));
            kc_stored_digest(got, p, n);
            if (memcmp(got, want.digest, 16) != 0)
                fprintf(stderr, "XXH3-128 of %zu bytes at offset %zu differs\n", n, off);
            CHECK(memcmp(got, want.digest, 16) == 0);
            CHECK(kc_stored_digest_fast(got) && kc_stored_digest_ok(got, p, n));
            if (n) {
                got[i % 16] ^= 1;
                CHECK(!kc_stored_digest_ok(got, p, n));
            }
        }
    }
    free(buf);
}

int main(void)
{
    (void)test_path; /* from testutil.h; this test needs no files */
    kc_codec_ctx *c = NULL;
    REQUIRE(kc_codec_new(&c) == 0 && c);
    test_round_trips(c);
    test_methods(c);
    test_damage(c);
    test_checked_blocks(c);
    test_digest();
    test_stored_digest();
    kc_codec_free(c);
    kc_codec_free(NULL);
    return test_done();
}
