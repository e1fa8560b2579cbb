#include <blake2.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "util/codec.h"

/*
 * Level 3, zstd's default. Measured on sm_90 CUBINs (issue 14,
 * benchmarks/PROFILE-writes.md): level 6 compressed them 4.2x against 4.0x
 * for level 3 (block_sort.cubin: 9,266 against 9,816 bytes), but at 78 MB/s
 * against 390 MB/s, so it was 88% of a put's instructions and held puts/s
 * under a file-per-entry cache's. Decoding speed does not depend on the
 * level. 6% more bytes on disk buys puts 3-4x cheaper in CPU.
 */
#define KC_ZSTD_LEVEL 3

/* Below this, a frame's header and checksum outweigh what compression saves. */
#define KC_RAW_BELOW 64

struct kc_codec_ctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
};

int kc_codec_new(kc_codec_ctx **out)
{
    kc_codec_ctx *ctx = kc_calloc(1, sizeof(*ctx));
    if (!ctx)
        return KCACHE_ENOMEM;
    ctx->cctx = ZSTD_createCCtx();
    ctx->dctx = ZSTD_createDCtx();
    if (!ctx->cctx || !ctx->dctx) {
        kc_codec_free(ctx);
        return KCACHE_ENOMEM;
    }
    ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_compressionLevel, KC_ZSTD_LEVEL);
    ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_contentSizeFlag, 1);
    *out = ctx;
    return 0;
}

void kc_codec_free(kc_codec_ctx *ctx)
{
    if (!ctx)
        return;
    ZSTD_freeCCtx(ctx->cctx);
    ZSTD_freeDCtx(ctx->dctx);
    free(ctx);
}

void kc_digest(uint8_t out[KC_DIGEST_SIZE], const void *data, size_t size)
{
    static const uint8_t empty = 0;
    blake2b(out, size ? data : &empty, NULL, KC_DIGEST_SIZE, size, 0);
}

int kc_encode(kc_codec_ctx *ctx, kc_buf *out, int *codec, const void *raw, size_t size)
{
    out->size = 0;
    if (size >= KC_RAW_BELOW) {
        size_t bound = ZSTD_compressBound(size);
        int rc = kc_buf_reserve(out, bound);
        if (rc)
            return rc;
        size_t n = ZSTD_compress2(ctx->cctx, out->data, bound, raw, size);
        if (!ZSTD_isError(n) && n < size) {
            out->size = n;
            *codec = KC_CODEC_ZSTD;
            return 0;
        }
        /* Incompressible or refused: store as is. */
        ZSTD_CCtx_reset(ctx->cctx, ZSTD_reset_session_only);
    }
    *codec = KC_CODEC_RAW;
    return kc_buf_append(out, raw, size);
}

int kc_decode_into(kc_codec_ctx *ctx, void *dst, int codec, const void *stored, size_t stored_size,
                   size_t raw_size)
{
    if (codec == KC_CODEC_RAW) {
        if (stored_size != raw_size)
            return KCACHE_ECORRUPT;
        if (raw_size)
            memcpy(dst, stored, raw_size);
        return 0;
    }
    if (codec != KC_CODEC_ZSTD)
        return KCACHE_ECORRUPT;
    /* The frame must say it holds exactly raw_size bytes: a length read from
     * stored bytes never sizes anything. */
    if (ZSTD_getFrameContentSize(stored, stored_size) != (unsigned long long)raw_size)
        return KCACHE_ECORRUPT;
    size_t n = ZSTD_decompressDCtx(ctx->dctx, dst, raw_size, stored, stored_size);
    if (ZSTD_isError(n) || n != raw_size)
        return KCACHE_ECORRUPT;
    return 0;
}

int kc_decode(kc_codec_ctx *ctx, void **out, int codec, const void *stored, size_t stored_size,
              size_t raw_size)
{
    *out = NULL;
    if (raw_size == SIZE_MAX)
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
