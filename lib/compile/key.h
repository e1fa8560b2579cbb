/*
 * The key: BLAKE2b-256 over a tag-length-value encoding of every input that
 * can change the output. Each field is (tag: 1 byte, length: 4 bytes little
 * endian, bytes), so no two different sets of inputs encode to the same
 * stream. The encoding is kept with the entry (key material) so that inspect
 * can show it and explain can compare two.
 */
#ifndef KC_KEY_H
#define KC_KEY_H

#include "util/common.h"

/*
 * Bump when the encoding or the meaning of a field changes: every old key
 * then misses instead of matching something it no longer describes.
 */
#define KC_KEY_FORMAT "kcache-key-1"

/* Field tags. Values are part of the format: never renumber. */
enum kc_key_tag {
    KC_TAG_FORMAT = 1,
    KC_TAG_INPUT_KIND = 2,   /* "cuda", "ptx", "ltoir", "cubin", "link" */
    KC_TAG_OUTPUT_KIND = 3,  /* "cubin", "ptx", "ltoir" */
    KC_TAG_ARCH = 4,
    KC_TAG_NVRTC = 5,        /* NVRTC's identity */
    KC_TAG_NVJITLINK = 6,    /* nvJitLink's identity, link steps only */
    KC_TAG_OPTION = 7,       /* one canonical option; order kept */
    KC_TAG_NAME_EXPR = 8,    /* sorted */
    KC_TAG_SOURCE_NAME = 9,
    KC_TAG_SOURCE = 10,      /* BLAKE2b-256 of the source text */
    KC_TAG_HEADER = 11,      /* spelling NUL state NUL (digest hex | toolkit path | "") */
    KC_TAG_EXTRA = 12,       /* the caller's extra digest */
    KC_TAG_LINK_INPUT = 13,  /* kind NUL BLAKE2b-256 hex of one link input */
    KC_TAG_TOOLKIT = 14,     /* the toolkit whose headers were used */
};

typedef struct kc_keybuf {
    kc_buf b;
    int failed;
} kc_keybuf;

void kc_key_add(kc_keybuf *k, int tag, const void *data, size_t size);
void kc_key_add_str(kc_keybuf *k, int tag, const char *s);
/* BLAKE2b-256 of the encoding. */
void kc_key_finish(const kc_keybuf *k, kcache_key *out);

/* Walks an encoding; fn gets the tag and its bytes. Returns 0 or KCACHE_ECORRUPT. */
int kc_key_walk(const void *material, size_t size,
                int (*fn)(void *ud, int tag, const uint8_t *data, size_t n), void *ud);

/* The component name of a tag ("option", "header", ...), or NULL. */
const char *kc_key_tag_name(int tag);

#endif
