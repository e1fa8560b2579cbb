/*
 * The frames kcache writes, in one place: the encoder (codec.c) takes its
 * settings from here, and so does the benchmark's zstd floor
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
 * LZ4 frames: what `lz4` wrote before it wrote bare blocks (why it changed:
 * codec.h). Stores still hold them and read them (KC_CODEC_LZ4); kc_encode()
 * still makes them when asked, so tests can make the rows an earlier kcache
 * left, in the shape it wrote them: 64 KiB linked blocks, content size and
 * content checksum, LZ4HC at level 4 (on sort_sm90.cubin HC stored 3.07x
 * against fast mode's 2.36x and decoded faster; doc/design.md, The store).
 */
#define KC_LZ4HC_LEVEL 4

/* The preferences of those LZ4 frames, for `size` input bytes. */
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
