/*
 * Artifact bytes encoded and decoded (zstd, LZ4, raw), each decode checked
 * (codec.h).
 */
#include <blake2.h>
#include <lz4.h>
#include <lz4hc.h>
#include <lz4frame.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "util/codec.h"
#include "util/frames.h"

/* xxHash as its header alone (no library to link or to ship). */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* Made on first use: a store that only reads lz4 or raw rows never makes zstd's. */
struct kc_codec_ctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    LZ4F_cctx *lz4c;
    LZ4F_dctx *lz4d;
};

int kc_codec_known(int codec)
{
    return codec == KC_CODEC_RAW || codec == KC_CODEC_ZSTD || codec == KC_CODEC_LZ4 ||
           codec == KC_CODEC_LZ4B || codec == KC_CODEC_LZ4C;
}

int kc_compression_parse(int *out, const char *text)
{
    static const struct {
        const char *name;
        int method;
    } names[] = {{"zstd", KC_CODEC_ZSTD}, {"lz4", KC_CODEC_LZ4B}, {"none", KC_CODEC_RAW}};
    for (size_t i = 0; text && i < KC_ARRAY_SIZE(names); i++)
        if (!strcmp(text, names[i].name)) {
            *out = names[i].method;
            return 0;
        }
    return KCACHE_EINVAL;
}

const char *kc_compression_name(int method)
{
    switch (method) {
    case KC_CODEC_ZSTD: return "zstd";
    case KC_CODEC_LZ4: return "lz4";
    case KC_CODEC_LZ4B: return "lz4";
    case KC_CODEC_LZ4C: return "lz4";
    case KC_CODEC_RAW: return "none";
    }
    return NULL;
}

int kc_codec_new(kc_codec_ctx **out)
{
    kc_codec_ctx *ctx = kc_calloc(1, sizeof(*ctx));
    if (!ctx)
        return KCACHE_ENOMEM;
    *out = ctx;
    return 0;
}

void kc_codec_free(kc_codec_ctx *ctx)
{
    if (!ctx)
        return;
    ZSTD_freeCCtx(ctx->cctx);
    ZSTD_freeDCtx(ctx->dctx);
    LZ4F_freeCompressionContext(ctx->lz4c);
    LZ4F_freeDecompressionContext(ctx->lz4d);
    free(ctx);
}

void kc_digest(uint8_t out[KC_DIGEST_SIZE], const void *data, size_t size)
{
    static const uint8_t empty = 0;
    blake2b(out, size ? data : &empty, NULL, KC_DIGEST_SIZE, size, 0);
}

/* The second half of a stored digest that is XXH3-128's (see codec.h). */
static const uint8_t stored_mark[16] = {'k', 'c', 'a', 'c', 'h', 'e', '-', 'x',
                                        'x', 'h', '3', '-', '1', '2', '8', 0};

#ifdef KC_XXH3_AVX2
void kc_xxh3_128_avx2(uint8_t out[16], const void *data, size_t size); /* xxh3_avx2.c */

/* Whether this CPU (and the OS, for the wider registers) has AVX2. */
static int have_avx2(void)
{
    __builtin_cpu_init(); /* a no-op once done; needed only before constructors ran */
    return __builtin_cpu_supports("avx2");
}
#endif

/* XXH3-128 in canonical (big-endian) order, with the widest vectors this CPU has. */
static void xxh3_128(uint8_t out[16], const void *data, size_t size)
{
#ifdef KC_XXH3_AVX2
    if (have_avx2()) {
        kc_xxh3_128_avx2(out, data, size);
        return;
    }
#endif
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
    memcpy(out, c.digest, 16);
}

void kc_stored_digest(uint8_t out[KC_DIGEST_SIZE], const void *data, size_t size)
{
    static const uint8_t empty = 0;
    xxh3_128(out, size ? data : &empty, size);
    memcpy(out + 16, stored_mark, 16);
}

int kc_stored_digest_fast(const uint8_t digest[KC_DIGEST_SIZE])
{
    return memcmp(digest + 16, stored_mark, 16) == 0;
}

int kc_stored_digest_ok(const uint8_t digest[KC_DIGEST_SIZE], const void *data, size_t size)
{
    uint8_t check[KC_DIGEST_SIZE];
    if (kc_stored_digest_fast(digest))
        kc_stored_digest(check, data, size);
    else
        kc_digest(check, data, size);
    return memcmp(check, digest, KC_DIGEST_SIZE) == 0;
}

/* The gear of a byte: one fixed 64-bit value per byte value (splitmix64's finaliser). */
static uint64_t gear(uint8_t b)
{
    uint64_t z = (b + UINT64_C(1)) * UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

size_t kc_chunk_size(const void *data, size_t size)
{
    const uint8_t *p = data;
    size_t end = size < KC_CHUNK_MAX ? size : KC_CHUNK_MAX;
    if (end <= KC_CHUNK_MIN)
        return end;
    /* Shifted a bit a byte, the hash holds the last 64 bytes: hashed from 64 before the least
     * cut, so that where it cuts depends on those bytes only. */
    uint64_t h = 0;
    for (size_t i = KC_CHUNK_MIN - 64; i < end; i++) {
        h = (h << 1) + gear(p[i]);
        if (i + 1 >= KC_CHUNK_MIN && h >> (64 - KC_CHUNK_BITS) == 0)
            return i + 1;
    }
    return end;
}

/* A zstd frame into out, or 0 bytes when it does not pay (out->size says). */
static int encode_zstd(kc_codec_ctx *ctx, kc_buf *out, const void *raw, size_t size)
{
    if (!ctx->cctx) {
        if (!(ctx->cctx = ZSTD_createCCtx()))
            return KCACHE_ENOMEM;
        ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_compressionLevel, KC_ZSTD_LEVEL);
        ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_checksumFlag, 1);
        ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_contentSizeFlag, 1);
    }
    size_t bound = ZSTD_compressBound(size);
    int rc = kc_buf_reserve(out, bound);
    if (rc)
        return rc;
    size_t n = ZSTD_compress2(ctx->cctx, out->data, bound, raw, size);
    if (!ZSTD_isError(n) && n < size)
        out->size = n;
    else /* incompressible or refused */
        ZSTD_CCtx_reset(ctx->cctx, ZSTD_reset_session_only);
    return 0;
}

static int encode_lz4(kc_codec_ctx *ctx, kc_buf *out, const void *raw, size_t size)
{
    if (!ctx->lz4c && LZ4F_isError(LZ4F_createCompressionContext(&ctx->lz4c, LZ4F_VERSION))) {
        ctx->lz4c = NULL;
        return KCACHE_ENOMEM;
    }
    LZ4F_preferences_t p;
    kc_lz4_preferences(&p, size);
    size_t bound = LZ4F_compressFrameBound(size, &p);
    int rc = kc_buf_reserve(out, bound);
    if (rc)
        return rc;
    uint8_t *o = out->data;
    size_t n = LZ4F_compressBegin(ctx->lz4c, o, bound, &p), m = 0, e = 0;
    if (!LZ4F_isError(n))
        m = LZ4F_compressUpdate(ctx->lz4c, o + n, bound - n, raw, size, NULL);
    if (!LZ4F_isError(n) && !LZ4F_isError(m))
        e = LZ4F_compressEnd(ctx->lz4c, o + n + m, bound - n - m, NULL);
    /* A failure leaves nothing in out: the caller stores the bytes as they are. */
    if (!LZ4F_isError(n) && !LZ4F_isError(m) && !LZ4F_isError(e) && n + m + e < size)
        out->size = n + m + e;
    return 0;
}

/* An LZ4 frame that says it holds exactly raw_size bytes, decoded whole, checksum checked. */
static int decode_lz4(kc_codec_ctx *ctx, void *dst, const void *stored, size_t stored_size,
                      size_t raw_size)
{
    if (!ctx->lz4d && LZ4F_isError(LZ4F_createDecompressionContext(&ctx->lz4d, LZ4F_VERSION))) {
        ctx->lz4d = NULL;
        return KCACHE_ENOMEM;
    }
    LZ4F_frameInfo_t info;
    size_t head = stored_size, in = 0, got = raw_size;
    size_t r = LZ4F_getFrameInfo(ctx->lz4d, &info, stored, &head);
    int ok = !LZ4F_isError(r) && info.contentSize == (unsigned long long)raw_size &&
             info.contentChecksumFlag == LZ4F_contentChecksumEnabled && raw_size;
    if (ok) {
        in = stored_size - head;
        r = LZ4F_decompress(ctx->lz4d, dst, &got, (const uint8_t *)stored + head, &in, NULL);
        /* 0: the frame ended and its checksum matched; and nothing may follow it. */
        ok = r == 0 && got == raw_size && head + in == stored_size;
    }
    if (!ok) {
        /* A frame left halfway leaves the context mid-frame: start the next one afresh. */
        LZ4F_freeDecompressionContext(ctx->lz4d);
        ctx->lz4d = NULL;
        return KCACHE_ECORRUPT;
    }
    return 0;
}

/* An LZ4 block into out, or 0 bytes when it does not pay. */
static int encode_lz4_block(kc_buf *out, const void *raw, size_t size)
{
    if (size > LZ4_MAX_INPUT_SIZE)
        return 0; /* stored raw */
    int bound = LZ4_compressBound((int)size);
    int rc = kc_buf_reserve(out, (size_t)bound);
    if (rc)
        return rc;
    int n = LZ4_compress_default(raw, (char *)out->data, (int)size, bound);
    if (n > 0 && (size_t)n < size)
        out->size = (size_t)n;
    return 0;
}

/* A block decoded to exactly raw_size bytes, no more and no fewer, using all of stored. */
static int decode_lz4_block(void *dst, const void *stored, size_t stored_size, size_t raw_size)
{
    if (!raw_size || stored_size > (size_t)LZ4_MAX_INPUT_SIZE || raw_size > (size_t)INT_MAX)
        return KCACHE_ECORRUPT;
    int n = LZ4_decompress_safe(stored, dst, (int)stored_size, (int)raw_size);
    return n >= 0 && (size_t)n == raw_size ? 0 : KCACHE_ECORRUPT;
}

/* The XXH3-128 of an LZ4 block, then the block; or 0 bytes when it does not pay. */
static int encode_lz4_checked(kc_buf *out, const void *raw, size_t size)
{
    if (size > LZ4_MAX_INPUT_SIZE)
        return 0; /* stored raw */
    int bound = LZ4_compressBound((int)size);
    int rc = kc_buf_reserve(out, KC_LZ4C_HASH + (size_t)bound);
    if (rc)
        return rc;
    uint8_t *block = out->data + KC_LZ4C_HASH;
    int n = LZ4_compress_HC(raw, (char *)block, (int)size, bound, KC_LZ4HC_LEVEL);
    if (n > 0 && KC_LZ4C_HASH + (size_t)n < size) {
        xxh3_128(out->data, block, (size_t)n);
        out->size = KC_LZ4C_HASH + (size_t)n;
    }
    return 0;
}

/* Checked before the block is decoded: intact stored bytes decode to what was stored. */
static int decode_lz4_checked(void *dst, const void *stored, size_t stored_size, size_t raw_size)
{
    uint8_t hash[KC_LZ4C_HASH];
    if (stored_size <= KC_LZ4C_HASH)
        return KCACHE_ECORRUPT;
    xxh3_128(hash, (const uint8_t *)stored + KC_LZ4C_HASH, stored_size - KC_LZ4C_HASH);
    if (memcmp(hash, stored, KC_LZ4C_HASH) != 0)
        return KCACHE_ECORRUPT;
    return decode_lz4_block(dst, (const uint8_t *)stored + KC_LZ4C_HASH,
                            stored_size - KC_LZ4C_HASH, raw_size);
}

int kc_encode(kc_codec_ctx *ctx, kc_buf *out, int *codec, int method, const void *raw,
              size_t size)
{
    out->size = 0;
    if (size >= KC_RAW_BELOW && method != KC_CODEC_RAW) {
        int rc = method == KC_CODEC_LZ4    ? encode_lz4(ctx, out, raw, size)
                 : method == KC_CODEC_LZ4B ? encode_lz4_block(out, raw, size)
                 : method == KC_CODEC_LZ4C ? encode_lz4_checked(out, raw, size)
                                           : encode_zstd(ctx, out, raw, size);
        if (rc)
            return rc;
        if (out->size) {
            *codec = method == KC_CODEC_LZ4 || method == KC_CODEC_LZ4B || method == KC_CODEC_LZ4C
                         ? method
                         : KC_CODEC_ZSTD;
            return 0;
        }
    }
    *codec = KC_CODEC_RAW;
    return kc_buf_append(out, raw, size);
}

int kc_decode_into(kc_codec_ctx *ctx, void *dst, int codec, const void *stored, size_t stored_size,
                   size_t raw_size)
{
    switch (codec) {
    case KC_CODEC_RAW:
        if (stored_size != raw_size)
            return KCACHE_ECORRUPT;
        if (raw_size)
            memcpy(dst, stored, raw_size);
        return 0;
    case KC_CODEC_ZSTD: {
        /* The frame must say it holds exactly raw_size bytes: a length read from
         * stored bytes never sizes anything. */
        if (ZSTD_getFrameContentSize(stored, stored_size) != (unsigned long long)raw_size)
            return KCACHE_ECORRUPT;
        if (!ctx->dctx && !(ctx->dctx = ZSTD_createDCtx()))
            return KCACHE_ENOMEM;
        size_t n = ZSTD_decompressDCtx(ctx->dctx, dst, raw_size, stored, stored_size);
        return ZSTD_isError(n) || n != raw_size ? KCACHE_ECORRUPT : 0;
    }
    case KC_CODEC_LZ4:
        return decode_lz4(ctx, dst, stored, stored_size, raw_size);
    case KC_CODEC_LZ4B:
        return decode_lz4_block(dst, stored, stored_size, raw_size);
    case KC_CODEC_LZ4C:
        return decode_lz4_checked(dst, stored, stored_size, raw_size);
    }
    return KCACHE_ECORRUPT; /* a codec this build does not know */
}

int kc_stored_checks_itself(int codec, const void *stored, size_t stored_size)
{
    /* RFC 8878: the magic number, then the frame header descriptor, whose bit 2 says that
     * the frame ends with a checksum of its content. */
    const uint8_t *p = stored;
    if (codec == KC_CODEC_LZ4C)
        return 1; /* kc_decode_into() refuses one too short to hold its hash */
    return codec == KC_CODEC_ZSTD && stored_size >= 5 && p[0] == 0x28 && p[1] == 0xb5 &&
           p[2] == 0x2f && p[3] == 0xfd && (p[4] >> 2 & 1);
}

/*
 * Whether the stored bytes' own header agrees with raw_size, read before a
 * buffer of raw_size is allocated: a damaged row claiming terabytes is then
 * damage (dropped, counted), not an out-of-memory error on every get. The
 * decoders check the same again, and everything else, while decoding.
 */
int kc_decode_plausible(int codec, const void *stored, size_t stored_size, size_t raw_size)
{
    const uint8_t *p = stored;
    switch (codec) {
    case KC_CODEC_RAW:
        return stored_size == raw_size;
    case KC_CODEC_ZSTD:
        return ZSTD_getFrameContentSize(stored, stored_size) == (unsigned long long)raw_size;
    case KC_CODEC_LZ4: {
        /* Frame: magic 0x184D2204 (LE), FLG (version 01, content size flag
         * 0x08), BD, then the content size, 8 bytes LE: written by kc_encode. */
        if (stored_size < 14 || p[0] != 0x04 || p[1] != 0x22 || p[2] != 0x4D || p[3] != 0x18 ||
            (p[4] & 0xC0) != 0x40 || !(p[4] & 0x08))
            return 0;
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | p[6 + i];
        return n == (uint64_t)raw_size;
    }
    case KC_CODEC_LZ4C: /* the block after its hash */
        return stored_size > KC_LZ4C_HASH &&
               kc_decode_plausible(KC_CODEC_LZ4B, p + KC_LZ4C_HASH, stored_size - KC_LZ4C_HASH,
                                   raw_size);
    case KC_CODEC_LZ4B:
        /* A block has no header: LZ4 never expands more than 255 times, nor
         * does compressing grow past its bound, so a raw_size outside these
         * is damage, found before anything of that size is allocated. */
        return raw_size && stored_size && raw_size <= (size_t)INT_MAX &&
               raw_size / 255 <= stored_size &&
               stored_size <= (size_t)LZ4_compressBound((int)raw_size);
    }
    return 0;
}

int kc_decode(kc_codec_ctx *ctx, void **out, int codec, const void *stored, size_t stored_size,
              size_t raw_size)
{
    *out = NULL;
    if (raw_size == SIZE_MAX || !kc_codec_known(codec) ||
        !kc_decode_plausible(codec, stored, stored_size, raw_size))
        return KCACHE_ECORRUPT;
    char *buf = kc_malloc(raw_size + 1);
    if (!buf)
        return KCACHE_ENOMEM;
    int rc = kc_decode_into(ctx, buf, codec, stored, stored_size, raw_size);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[raw_size] = '\0';
    *out = buf;
    return 0;
}
