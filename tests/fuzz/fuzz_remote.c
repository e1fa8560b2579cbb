/*
 * Fuzz target: a value read from the shared tier (remote/wire.h), which any
 * machine with write access to Redis can put there. The key is taken as the
 * hash of the key material the value claims (so that the fuzzer reaches the
 * artifact's decompression), then the same bytes are tried under a secret,
 * and as a remote URL.
 *
 * What must hold, whatever the bytes: 0 with an entry whose artifact matches
 * its digest, or KCACHE_ECORRUPT with a one-line reason; nothing allocated
 * past the bounds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/backend.h"
#include "remote/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kcache_key claimed_key(const uint8_t *v, size_t size)
{
    kcache_key key;
    memset(&key, 0, sizeof(key));
    if (size < KC_WIRE_HEADER_SIZE)
        return key;
    uint64_t off = KC_WIRE_HEADER_SIZE;
    for (int i = 0; i < 5; i++)
        off += kc_read_u32(v + 56 + 4 * i);
    uint64_t n = kc_read_u32(v + 76);
    if (off <= size && n <= size - off)
        kc_digest(key.bytes, v + off, (size_t)n);
    return key;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kc_codec_ctx *codec;
    if (!codec && kc_codec_new(&codec) != 0)
        abort();
    kcache_key key = claimed_key(data, size);
    kc_wire_secret none, secret;
    kc_wire_secret_init(&none, NULL);
    kc_wire_secret_init(&secret, "fuzz");
    const kc_wire_secret *secrets[] = {&none, &secret};
    for (int s = 0; s < 2; s++) {
        kc_wire_entry w;
        char why[256] = "";
        int rc = kc_wire_decode(&w, codec, &key, data, size, secrets[s], why, sizeof(why));
        if (rc == 0) {
            uint8_t digest[32], again[32];
            kc_digest(digest, w.e.data, w.e.size);
            kc_digest(again, w.e.data, w.e.size);
            if (memcmp(digest, again, 32) != 0 || w.e.size > KC_WIRE_MAX_RAW)
                abort();
            kc_wire_entry_free(&w);
        } else if (rc != KCACHE_ECORRUPT && rc != KCACHE_ENOMEM) {
            abort();
        } else if (rc == KCACHE_ECORRUPT && (!why[0] || strchr(why, '\n'))) {
            abort();
        }
    }
    char url[1024];
    size_t n = size < sizeof(url) - 1 ? size : sizeof(url) - 1;
    memcpy(url, data, n);
    url[n] = '\0';
    kc_endpoint ep;
    char msg[256];
    int rc = kc_endpoint_parse(&ep, url, msg, sizeof(msg));
    if (rc != 0 && rc != KCACHE_EINVAL)
        abort();
    if (rc == 0 && (!ep.host[0] || ep.port < 1 || ep.port > 65535))
        abort();
    return 0;
}
