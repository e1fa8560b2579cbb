/*
 * The frames kcache writes, in one place: the encoder (codec.c) takes its
 * settings from here, and so does the benchmark's floor
 * (benchmarks/compare), which must write frames of the same shape as the
 * store to be a floor for it.
 */
#ifndef KC_FRAMES_H
#define KC_FRAMES_H

#include <lz4frame.h>
#include <string.h>

/*
 * Level 3, zstd's default. Measured on sm_90 CUBINs
 * (benchmarks/PROFILE-writes.md): level 6 compressed them 4.2x against 4.0x
 * for level 3 (block_sort.cubin: 9,266 against 9,816 bytes), but several
 * times slower, so it was 88% of a put's instructions and held puts/s
 * under a file-per-entry cache's. Decoding speed does not depend on the
 * level. 6% more bytes on disk buys puts 3-4x cheaper in CPU (the speeds:
 * doc/design.md, The store).
 */
#define KC_ZSTD_LEVEL 3

/*
 * LZ4: the frame format with its content size and content checksum, not a
 * bare block. The store checks the stored bytes against their BLAKE2b before
 * decoding, and a second check of the decoded bytes catches what that one
 * cannot: damage to the stored bytes and to their digest that agree
 * (test_recovery's "altered artifact, digest matching"). zstd's frame
 * checksum and the raw codec's artifact digest give it; for a block it
 * would take a BLAKE2b of the decoded bytes, which on sort_sm90.cubin (38
 * KiB) costs 351 k instructions against the decode's 111 k (callgrind),
 * and would leave lz4 no faster than zstd. The frame's xxh32 costs about
 * a quarter of that (80 k), and its header says the decoded size, checked
 * against the row's before anything is decoded, as for zstd. 64 KiB linked
 * blocks: LZ4 looks back 64 KiB at most, so larger blocks would not store
 * less, and the decoder's buffers stay that small.
 *
 * LZ4HC at level 4 rather than LZ4's fast mode: on the corpus CUBINs
 * (tests/fixtures/cubin, sort_sm90) it stores 3.07x against 2.36x and
 * decodes faster (fewer and longer matches). Its put costs more than
 * zstd's at level 3, and several times fast mode's: lz4 is the setting for
 * reads, and an entry is written once and read many times (the times:
 * doc/design.md, The store).
 */
#define KC_LZ4HC_LEVEL 4

/* The preferences of every LZ4 frame kcache writes, for `size` input bytes. */
static inline void kc_lz4_preferences(LZ4F_preferences_t *p, size_t size)
{
    memset(p, 0, sizeof(*p));
    p->frameInfo.blockSizeID = LZ4F_max64KB;
    p->frameInfo.blockMode = LZ4F_blockLinked;
    p->frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
    p->frameInfo.contentSize = size;
    p->compressionLevel = KC_LZ4HC_LEVEL;
    p->autoFlush = 1;
}

#endif
