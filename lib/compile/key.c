#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/codec.h"
#include "kcache/compile.h"
#include "compile/key.h"

void kc_key_add(kc_keybuf *k, int tag, const void *data, size_t size)
{
    uint8_t t = (uint8_t)tag;
    if (k->failed || size > UINT32_MAX || kc_buf_append(&k->b, &t, 1) ||
        kc_buf_append_u32(&k->b, (uint32_t)size) || kc_buf_append(&k->b, data, size))
        k->failed = 1;
}

void kc_key_add_str(kc_keybuf *k, int tag, const char *s)
{
    kc_key_add(k, tag, s ? s : "", s ? strlen(s) : 0);
}

void kc_key_finish(const kc_keybuf *k, kcache_key *out)
{
    kc_digest(out->bytes, k->b.data, k->b.size);
}

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

const char *kc_key_tag_name(int tag)
{
    static const char *const names[] = {
        [KC_TAG_FORMAT] = "format",           [KC_TAG_INPUT_KIND] = "input",
        [KC_TAG_OUTPUT_KIND] = "output",      [KC_TAG_ARCH] = "arch",
        [KC_TAG_NVRTC] = "nvrtc",             [KC_TAG_NVJITLINK] = "nvjitlink",
        [KC_TAG_OPTION] = "option",           [KC_TAG_NAME_EXPR] = "name-expression",
        [KC_TAG_SOURCE_NAME] = "source-name", [KC_TAG_SOURCE] = "source",
        [KC_TAG_HEADER] = "header",           [KC_TAG_EXTRA] = "extra-digest",
        [KC_TAG_LINK_INPUT] = "link-input",   [KC_TAG_TOOLKIT] = "toolkit",
    };
    if (tag <= 0 || (size_t)tag >= sizeof(names) / sizeof(names[0]))
        return NULL;
    return names[tag];
}

/* Renders one field as text: NULs separating parts become spaces. */
struct describe {
    kcache_key_component_fn fn;
    void *ud;
    kc_buf text;
};

static int describe_one(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct describe *d = ud;
    const char *name = kc_key_tag_name(tag);
    d->text.size = 0;
    for (size_t i = 0; i < n; i++) {
        char c = data[i] ? (char)data[i] : ' ';
        if (kc_buf_append(&d->text, &c, 1))
            return KCACHE_ENOMEM;
    }
    if (tag == KC_TAG_EXTRA || tag == KC_TAG_SOURCE) {
        /* Digests are bytes: show them as hex. */
        d->text.size = 0;
        for (size_t i = 0; i < n; i++) {
            char hex[3];
            snprintf(hex, sizeof(hex), "%02x", data[i]);
            if (kc_buf_append(&d->text, hex, 2))
                return KCACHE_ENOMEM;
        }
    }
    if (kc_buf_append(&d->text, "", 1))
        return KCACHE_ENOMEM;
    char unknown[16];
    if (!name) {
        snprintf(unknown, sizeof(unknown), "tag-%d", tag);
        name = unknown;
    }
    return d->fn(d->ud, name, (const char *)d->text.data);
}

KCACHE_API int kcache_key_describe(const void *material, size_t size,
                                   kcache_key_component_fn fn, void *userdata)
{
    if (!fn || (!material && size))
        return KCACHE_EINVAL;
    struct describe d = {fn, userdata, {0}};
    int rc = kc_key_walk(material, size, describe_one, &d);
    kc_buf_free(&d.text);
    return rc;
}
