/* Reading key material's layout (keyfmt.h); compile/key.c writes it. */
#include <string.h>

#include "util/common.h"
#include "format/keyfmt.h"

int kc_key_walk(const void *material, size_t size,
                int (*fn)(void *ud, int tag, const uint8_t *data, size_t n), void *ud)
{
    const uint8_t *p = material;
    size_t off = 0;
    while (off < size) {
        if (size - off < 5)
            return KCACHE_ECORRUPT;
        int tag = p[off];
        uint32_t n = kc_read_u32(p + off + 1);
        off += 5;
        if (size - off < n)
            return KCACHE_ECORRUPT;
        int rc = fn(ud, tag, p + off, n);
        if (rc)
            return rc;
        off += n;
    }
    return 0;
}

struct target {
    char *kind, *arch;
    size_t kind_size, arch_size;
    int fields; /* 1: format seen, 2: output kind, 4: arch */
    int first;
};

/* A field whose text is longer than the room for it, or holds a NUL, is no kind or arch. */
static int copy_text(char *dst, size_t size, const uint8_t *data, size_t n)
{
    if (n >= size || memchr(data, 0, n))
        return KCACHE_ECORRUPT;
    memcpy(dst, data, n);
    dst[n] = '\0';
    return 0;
}

static int read_target(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct target *t = ud;
    int first = t->first;
    t->first = 0;
    if (first) {
        static const char family[] = KC_KEY_FORMAT_FAMILY;
        if (tag != KC_TAG_FORMAT || n < sizeof(family) - 1 ||
            memcmp(data, family, sizeof(family) - 1) != 0)
            return 1; /* not kcache's format: stop, nothing to check */
        t->fields |= 1;
        return 0;
    }
    /* Only the first of each counts, as compile/key.c writes one of each. */
    if (tag == KC_TAG_OUTPUT_KIND && !(t->fields & 2)) {
        t->fields |= 2;
        return copy_text(t->kind, t->kind_size, data, n);
    }
    if (tag == KC_TAG_ARCH && !(t->fields & 4)) {
        t->fields |= 4;
        return copy_text(t->arch, t->arch_size, data, n);
    }
    return 0;
}

int kc_key_target(char *kind, size_t kind_size, char *arch, size_t arch_size,
                  const void *material, size_t size)
{
    struct target t = {kind, arch, kind_size, arch_size, 0, 1};
    if (!kind_size || !arch_size)
        return KCACHE_EINVAL;
    kind[0] = arch[0] = '\0';
    int rc = kc_key_walk(material, size, read_target, &t);
    if (!(t.fields & 1))
        return 0; /* empty, or not kcache's: a walk error before the format is no claim */
    if (rc < 0 || rc == 1 || (t.fields & 6) != 6)
        return KCACHE_ECORRUPT;
    return 1;
}

int kc_key_header_run(const void *material, size_t size, size_t *at, size_t *len)
{
    const uint8_t *p = material;
    size_t off = 0, start = 0;
    int in_run = 0;
    *at = *len = 0;
    while (off < size) {
        if (size - off < 5)
            return KCACHE_ECORRUPT;
        uint32_t n = kc_read_u32(p + off + 1);
        if (size - off - 5 < n)
            return KCACHE_ECORRUPT;
        if (p[off] == KC_TAG_HEADER && !in_run) {
            in_run = 1;
            start = off;
        } else if (p[off] != KC_TAG_HEADER && p[off] != KC_TAG_HEADER_PATH && in_run) {
            /* The headers' paths follow them, and are as shared as the list. */
            break;
        }
        off += 5 + (size_t)n;
    }
    if (!in_run)
        return 0;
    *at = start;
    *len = off - start;
    return 1;
}
