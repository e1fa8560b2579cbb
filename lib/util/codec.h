/*
 * How artifact bytes are stored: a zstd frame with its content checksum, a
 * bare LZ4 block (its size is the row's raw_size), or the raw bytes where
 * compression does not pay; the LZ4 frames an earlier kcache wrote for lz4
 * are still read. The codec is recorded per row (entry.codec, input.codec,
 * closure.codec), so a store holds a mix and the `compression` setting can
 * change at any time: every decode takes the row's codec, whatever the store
 * writes now. Every decode is checked.
 */
#ifndef KC_CODEC_H
#define KC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "util/common.h"

/* The numbers in the codec columns and on the wire: never renumber. */
enum kc_codec {
    KC_CODEC_RAW = 0,  /* the bytes themselves */
    KC_CODEC_ZSTD = 1, /* one zstd frame with its content size and checksum */
    KC_CODEC_LZ4 = 2,  /* one LZ4 frame with its content size and checksum (read, not written) */
    KC_CODEC_LZ4B = 3, /* one LZ4 block: its size is the row's raw_size, its check the stored digest */
    KC_CODEC_LZ4C = 4, /* the XXH3-128 of an LZ4 block (16 bytes, canonical), then the block */
};

/*
 * KC_CODEC_LZ4C is what closure chunks are written as: rows with no column
 * for a check of their own, read on every hit. The hash covers the stored
 * block and is checked before it is decoded (intact bytes decode to what was
 * stored). The block is LZ4HC's at KC_LZ4HC_LEVEL (written once, read on
 * every hit: it decodes in 11% fewer instructions than fast mode's and is 6%
 * smaller). XXH3-128 of the block and LZ4's decode cost a quarter of a zstd
 * frame's decode with its checksum (0.42 M against 1.66 M instructions for
 * CuPy's 143 KB closure in 26 chunks) for 17% more bytes. kc_encode() makes
 * it only when asked (never a `compression` setting).
 */
#define KC_LZ4C_HASH 16

/* Whether a codec number is one this build decodes. */
int kc_codec_known(int codec);

/*
 * The `compression` setting: what kc_encode() tries (KC_CODEC_ZSTD,
 * KC_CODEC_LZ4B, or KC_CODEC_RAW for none), by the name a user writes
 * ("zstd", "lz4", "none"). parse returns 0 or KCACHE_EINVAL; name returns
 * NULL for a number that is not a setting (KC_CODEC_LZ4, the frames an
 * earlier `lz4` wrote, is named "lz4" too: it is what they were written as).
 *
 * Why `lz4` writes a bare block and not a frame: a frame's own xxh32 of the
 * decoded bytes cost more than the decode itself, and every hit already
 * checks the stored bytes with XXH3-128 before decoding them; a block's size
 * is the row's raw_size, and LZ4_decompress_safe must produce exactly that
 * many bytes. Blocks are made with LZ4's fast compressor, not LZ4HC: HC
 * compressed far slower for a somewhat better ratio. The figures:
 * doc/design.md, The store.
 */
#define KC_COMPRESSION_NAMES "zstd, lz4 or none"
/*
 * The default is lz4 (LZ4 blocks, above), chosen by `benchmarks/compare/run`
 * (its figures: doc/design.md, The store; benchmarks/RESULTS.md has the run).
 * lz4 hits and writes faster than zstd at every size and keeps the hit of a
 * large entry within a few file reads; zstd keeps a third more entries under
 * a cap, and stays a setting for caches where disk is what is short. none
 * reads small entries fastest but stores 2.3 times lz4's bytes, so fewer
 * entries fit a cap and a cold hit reads more. doc/kcache.1, COMPRESSION,
 * says it for users.
 */
#define KC_COMPRESSION_DEFAULT KC_CODEC_LZ4B
int kc_compression_parse(int *out, const char *text);
const char *kc_compression_name(int method);

#define KC_DIGEST_SIZE 32

typedef struct kc_codec_ctx kc_codec_ctx;

/* A context for one thread at a time; the codecs' own state is made on first use. */
int kc_codec_new(kc_codec_ctx **out);
void kc_codec_free(kc_codec_ctx *ctx);

/* BLAKE2b-256. */
void kc_digest(uint8_t out[KC_DIGEST_SIZE], const void *data, size_t size);

/*
 * The length of the first content-defined chunk of data: where a gear hash
 * of the last 64 bytes has its top KC_CHUNK_BITS bits clear, at least
 * KC_CHUNK_MIN bytes in and at most KC_CHUNK_MAX (or size, when less).
 * Cut where the content says rather than at fixed offsets, two blobs that
 * differ in a few bytes, or by an insertion, share every chunk but the ones
 * around the change (learnt from FastCDC, USENIX ATC '16).
 */
#define KC_CHUNK_MIN 2048
#define KC_CHUNK_BITS 12
#define KC_CHUNK_MAX 16384
size_t kc_chunk_size(const void *data, size_t size);

/*
 * The check of an artifact's bytes as stored, which every hit runs: it guards
 * against damage, not tampering (it sits beside the bytes; keys, and what
 * bundles and the remote carry, are BLAKE2b's), so it is XXH3-128, many
 * times faster than BLAKE2b, which was most of a hit (doc/design.md, The
 * store). The 32-byte column keeps XXH3-128 in its first half and a fixed
 * mark in the second, which says per row which hash it is: rows written
 * before hold a BLAKE2b-256, still checked as such.
 */
void kc_stored_digest(uint8_t out[KC_DIGEST_SIZE], const void *data, size_t size);
/* 1 when digest (either kind) is that of data, else 0. */
int kc_stored_digest_ok(const uint8_t digest[KC_DIGEST_SIZE], const void *data, size_t size);
/* 1 when digest is of the XXH3-128 kind. */
int kc_stored_digest_fast(const uint8_t digest[KC_DIGEST_SIZE]);

/*
 * Encodes raw bytes for storage into out (reset first) with `method` (a
 * setting from kc_compression_parse()). *codec says how they were stored:
 * KC_CODEC_RAW where compressing does not pay (tiny or incompressible
 * input, or method none). The encoding is a pure function of the input and
 * the method.
 */
/* Below this, a frame's header and checksum outweigh what compression saves:
 * such bytes are always stored raw. */
#define KC_RAW_BELOW 64

int kc_encode(kc_codec_ctx *ctx, kc_buf *out, int *codec, int method, const void *raw,
              size_t size);

/*
 * Decodes stored bytes into dst, which holds exactly raw_size bytes. Returns
 * 0, or KCACHE_ECORRUPT if they do not decode to raw_size bytes with a valid
 * checksum, or the codec is not one this build knows.
 */
int kc_decode_into(kc_codec_ctx *ctx, void *dst, int codec, const void *stored, size_t stored_size,
                   size_t raw_size);

/*
 * Decodes stored bytes into a new buffer of exactly raw_size bytes (plus a
 * NUL not counted) that the caller frees. Returns 0, KCACHE_ECORRUPT if the
 * bytes do not decode to raw_size bytes with a valid checksum or the codec is
 * unknown, or ENOMEM.
 */
/*
 * 1 when the stored bytes carry a checksum of what they decode to, which a
 * decode checks: a zstd frame whose header says it has one, or a
 * KC_CODEC_LZ4C block. 0 otherwise (raw bytes, an LZ4 block, any other frame).
 */
int kc_stored_checks_itself(int codec, const void *stored, size_t stored_size);
/* Whether the stored bytes' header agrees with raw_size (checked before allocating). */
int kc_decode_plausible(int codec, const void *stored, size_t stored_size, size_t raw_size);
int kc_decode(kc_codec_ctx *ctx, void **out, int codec, const void *stored, size_t stored_size,
              size_t raw_size);

#endif
