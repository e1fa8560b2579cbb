/*
 * XXH3-128 built for AVX2, alone: -mavx2 must reach this file and no other,
 * since any of it may use AVX2 (meson.build here). codec.c calls it only on
 * a CPU that has it: the stored-bytes check runs on every hit, and xxHash
 * picks its vector width when it is compiled, where the baseline x86-64
 * gives it SSE2, a third as fast. The hash is the same whatever the width
 * (xxHash's promise), so rows checked either way agree.
 */
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

void kc_xxh3_128_avx2(uint8_t out[16], const void *data, size_t size);

void kc_xxh3_128_avx2(uint8_t out[16], const void *data, size_t size)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
    memcpy(out, c.digest, 16);
}
