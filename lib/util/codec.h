/*
 * How artifact bytes are stored: a zstd frame with its content checksum, or
 * the raw bytes where compression does not pay. Every decode is checked.
 */
#ifndef KC_CODEC_H
#define KC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "util/common.h"

enum kc_codec {
    KC_CODEC_RAW = 0,
    KC_CODEC_ZSTD = 1,
};

#define KC_DIGEST_SIZE 32

typedef struct kc_codec_ctx kc_codec_ctx;

int kc_codec_new(kc_codec_ctx **out);
void kc_codec_free(kc_codec_ctx *ctx);

/* BLAKE2b-256. */
void kc_digest(uint8_t out[KC_DIGEST_SIZE], const void *data, size_t size);

/*
 * Encodes raw bytes for storage into out (reset first). *codec says how.
 * The encoding is a pure function of the input.
 */
int kc_encode(kc_codec_ctx *ctx, kc_buf *out, int *codec, const void *raw, size_t size);

/*
 * Decodes stored bytes into dst, which holds exactly raw_size bytes. Returns
 * 0, or KCACHE_ECORRUPT if they do not decode to raw_size bytes with a valid
 * checksum.
 */
int kc_decode_into(kc_codec_ctx *ctx, void *dst, int codec, const void *stored, size_t stored_size,
                   size_t raw_size);

/*
 * Decodes stored bytes into a new buffer of exactly raw_size bytes (plus a
 * NUL not counted) that the caller frees. Returns 0, KCACHE_ECORRUPT if the
 * bytes do not decode to raw_size bytes with a valid checksum, or ENOMEM.
 */
int kc_decode(kc_codec_ctx *ctx, void **out, int codec, const void *stored, size_t stored_size,
              size_t raw_size);

#endif
