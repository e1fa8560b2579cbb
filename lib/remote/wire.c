/* The value of a remote entry: encoding, signing, and the checks before belief (wire.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/wire.h"

static const char magic[4] = {'K', 'C', 'R', 'E'};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void kc_wire_secret_init(kc_wire_secret *out, const char *secret)
{
    kc_secret_init(out, secret);
}

/* Keyed by the secret (a signature), or plain (secret NULL: a checksum). */
static void sign(uint8_t sig[KC_WIRE_SIG_SIZE], const kc_wire_secret *secret,
                 const kcache_key *key, const void *data, size_t size)
{
    kc_mac m;
    kc_mac_init(&m, secret);
    kc_mac_update(&m, key->bytes, KCACHE_KEY_SIZE);
    kc_mac_update(&m, data, size);
    kc_mac_final(&m, sig);
}

static size_t text_len(const char *s)
{
    return (s ? strlen(s) : 0) + 1;
}

static int append_text(kc_buf *b, const char *s)
{
    return kc_buf_append(b, s ? s : "", text_len(s));
}

int kc_wire_encode(kc_buf *out, kc_codec_ctx *codec, int method, const kcache_entry *e,
                   int64_t created_ms, const kc_wire_secret *secret)
{
    kc_buf names = {0}, stored = {0};
    int rc, how = KC_CODEC_RAW;
    out->size = 0;
    for (size_t i = 0; i < e->n_names; i++) {
        const char *pair[2] = {e->name_exprs[i], e->lowered_names[i]};
        for (int k = 0; k < 2; k++)
            if ((rc = kc_buf_append_u32(&names, (uint32_t)strlen(pair[k]))) ||
                (rc = append_text(&names, pair[k])))
                goto out;
    }
    if ((rc = kc_encode(codec, &stored, &how, method, e->data, e->size)))
        goto out;
    uint8_t h[KC_WIRE_HEADER_SIZE];
    memcpy(h, magic, 4);
    put32(h + 4, KC_WIRE_FORMAT);
    put32(h + 8, secret && secret->set ? 1u : 0u);
    put32(h + 12, (uint32_t)e->kind);
    put32(h + 16, (uint32_t)how);
    put32(h + 20, (uint32_t)e->n_names);
    put64(h + 24, e->size);
    put64(h + 32, stored.size);
    put64(h + 40, e->compile_ns);
    put64(h + 48, (uint64_t)created_ms);
    put32(h + 56, (uint32_t)text_len(e->arch));
    put32(h + 60, (uint32_t)text_len(e->name));
    put32(h + 64, (uint32_t)text_len(e->toolchain));
    put32(h + 68, (uint32_t)text_len(e->log));
    put32(h + 72, (uint32_t)names.size);
    put32(h + 76, (uint32_t)e->key_material_size);
    kc_digest(h + 80, e->data, e->size);
    if ((rc = kc_buf_append(out, h, sizeof(h))) || (rc = append_text(out, e->arch)) ||
        (rc = append_text(out, e->name)) || (rc = append_text(out, e->toolchain)) ||
        (rc = append_text(out, e->log)) || (rc = kc_buf_append(out, names.data, names.size)) ||
        (rc = kc_buf_append(out, e->key_material, e->key_material_size)) ||
        (rc = kc_buf_append(out, stored.data, stored.size)))
        goto out;
    uint8_t sig[KC_WIRE_SIG_SIZE];
    sign(sig, NULL, &e->key, out->data, out->size);
    if ((rc = kc_buf_append(out, sig, sizeof(sig))))
        goto out;
    if (secret && secret->set) {
        sign(sig, secret, &e->key, out->data, out->size);
        rc = kc_buf_append(out, sig, sizeof(sig));
    }
out:
    kc_buf_free(&names);
    kc_buf_free(&stored);
    return rc;
}

void kc_wire_entry_free(kc_wire_entry *w)
{
    if (!w)
        return;
    free(w->data);
    free((void *)w->names);
    memset(w, 0, sizeof(*w));
}

/* A NUL-terminated string of n bytes (its NUL included) at *p, or NULL. */
static const char *take_text(const uint8_t **p, uint32_t n)
{
    const char *s = (const char *)*p;
    if (n == 0 || s[n - 1] != '\0' || memchr(s, '\0', n) != s + n - 1)
        return NULL;
    *p += n;
    return s;
}

static int decode_names(kc_wire_entry *w, const uint8_t *p, size_t size, uint32_t n)
{
    if (!n)
        return size == 0 ? 0 : KCACHE_ECORRUPT;
    /* Stored pairwise (expression, lowered name); kept as two arrays. */
    if (!(w->names = kc_calloc(2 * (size_t)n, sizeof(*w->names))))
        return KCACHE_ENOMEM;
    const uint8_t *end = p + size;
    for (uint32_t i = 0; i < 2 * n; i++) {
        if ((size_t)(end - p) < 4)
            return KCACHE_ECORRUPT;
        uint32_t len = kc_read_u32(p);
        p += 4;
        size_t at = i / 2 + (i % 2) * n;
        if ((size_t)(end - p) < (size_t)len + 1 || !(w->names[at] = take_text(&p, len + 1)))
            return KCACHE_ECORRUPT;
    }
    if (p != end)
        return KCACHE_ECORRUPT;
    w->e.n_names = n;
    w->e.name_exprs = w->names;
    w->e.lowered_names = w->names + n;
    return 0;
}

#define REFUSE(...) (kc_fmt(msg, msg_size, KCACHE_ECORRUPT, __VA_ARGS__), KCACHE_ECORRUPT)

int kc_wire_decode(kc_wire_entry *out, kc_codec_ctx *codec, const kcache_key *key,
                   const void *value, size_t size, const kc_wire_secret *secret, char *msg,
                   size_t msg_size)
{
    const uint8_t *v = value;
    memset(out, 0, sizeof(*out));
    if (size < KC_WIRE_HEADER_SIZE || memcmp(v, magic, 4) != 0)
        return REFUSE("not a kcache entry");
    if (kc_read_u32(v + 4) != KC_WIRE_FORMAT)
        return REFUSE("entry format %u, this kcache reads %u", kc_read_u32(v + 4),
                      KC_WIRE_FORMAT);
    uint32_t flags = kc_read_u32(v + 8), kind = kc_read_u32(v + 12), how = kc_read_u32(v + 16);
    uint32_t n_names = kc_read_u32(v + 20);
    uint64_t raw_size = get64(v + 24), stored_size = get64(v + 32);
    uint32_t len[6];
    for (int i = 0; i < 6; i++)
        len[i] = kc_read_u32(v + 56 + 4 * i);
    /* Sizes first: nothing is allocated or decompressed on a value's word. */
    if (size > KC_WIRE_MAX_VALUE || raw_size > KC_WIRE_MAX_RAW || stored_size > KC_WIRE_MAX_RAW)
        return REFUSE("entry of %llu bytes (artifact %llu) is over the bound of %llu",
                      (unsigned long long)size, (unsigned long long)raw_size,
                      (unsigned long long)KC_WIRE_MAX_RAW);
    uint64_t want = KC_WIRE_HEADER_SIZE + stored_size + KC_WIRE_SIG_SIZE +
                    ((flags & 1) ? KC_WIRE_SIG_SIZE : 0);
    for (int i = 0; i < 6; i++) {
        if (len[i] > KC_WIRE_MAX_TEXT)
            return REFUSE("entry field of %u bytes is over the bound", len[i]);
        want += len[i];
    }
    if (want != size || n_names > KC_WIRE_MAX_NAMES || (flags & ~1u))
        return REFUSE("entry sizes do not add up");
    if (kind < KCACHE_KIND_CUBIN || kind > KCACHE_KIND_DATA ||
        !kc_codec_known((int)how) || (how == KC_CODEC_RAW && raw_size != stored_size))
        return REFUSE("entry of an unknown kind or codec");
    size_t body = size - KC_WIRE_SIG_SIZE - ((flags & 1) ? KC_WIRE_SIG_SIZE : 0);
    uint8_t sig[KC_WIRE_SIG_SIZE];
    if (secret && secret->set) {
        if (!(flags & 1))
            return REFUSE("entry is not signed and remote_secret is set");
        sign(sig, secret, key, v, body + KC_WIRE_SIG_SIZE);
        /* Not a secret comparison worth timing-hardening: the verdict is public anyway. */
        if (memcmp(sig, v + body + KC_WIRE_SIG_SIZE, KC_WIRE_SIG_SIZE) != 0)
            return REFUSE("entry's signature does not match remote_secret");
    }
    /* The checksum covers what the key and the digest do not (names, log, arch). */
    sign(sig, NULL, key, v, body);
    if (memcmp(sig, v + body, KC_WIRE_SIG_SIZE) != 0)
        return REFUSE("entry's checksum does not match: damaged or changed");
    const uint8_t *p = v + KC_WIRE_HEADER_SIZE;
    kcache_entry *e = &out->e;
    e->version = KCACHE_ENTRY_VERSION;
    e->key = *key;
    e->kind = (kcache_kind)kind;
    if (!(e->arch = take_text(&p, len[0])) || len[0] > 32 || len[0] < 2 ||
        !(e->name = take_text(&p, len[1])) || !(e->toolchain = take_text(&p, len[2])) ||
        !(e->log = take_text(&p, len[3])))
        return REFUSE("entry's text fields are malformed");
    int rc = decode_names(out, p, len[4], n_names);
    if (rc) {
        kc_wire_entry_free(out);
        return rc == KCACHE_ENOMEM ? rc : REFUSE("entry's names are malformed");
    }
    p += len[4];
    e->key_material = p;
    e->key_material_size = len[5];
    p += len[5];
    /* The key is the hash of what it was derived from: a value cannot claim another's key. */
    kcache_key recomputed;
    kc_digest(recomputed.bytes, e->key_material, e->key_material_size);
    if (len[5] == 0 || memcmp(recomputed.bytes, key->bytes, KCACHE_KEY_SIZE) != 0) {
        kc_wire_entry_free(out);
        return REFUSE("entry's key material does not hash to its key");
    }
    void *data = NULL;
    rc = kc_decode(codec, &data, (int)how, p, (size_t)stored_size, (size_t)raw_size);
    uint8_t digest[KC_DIGEST_SIZE];
    if (!rc)
        kc_digest(digest, data, (size_t)raw_size);
    if (rc || memcmp(digest, v + 80, KC_DIGEST_SIZE) != 0) {
        free(data);
        kc_wire_entry_free(out);
        return rc == KCACHE_ENOMEM ? rc : REFUSE("entry's artifact does not match its digest");
    }
    out->data = data;
    memcpy(e->digest, digest, KC_DIGEST_SIZE);
    e->data = data;
    e->size = (size_t)raw_size;
    e->compile_ns = get64(v + 40);
    e->created_at = (int64_t)get64(v + 48);
    return 0;
}
