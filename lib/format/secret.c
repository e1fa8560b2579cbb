/* Signing with a shared secret (secret.h), alone: bundles and the shared tier sign with it. */
#include <blake2.h>
#include <string.h>

#include "format/secret.h"

void kc_secret_init(kc_secret *out, const char *secret)
{
    memset(out, 0, sizeof(*out));
    if (!secret || !*secret)
        return;
    out->set = 1;
    blake2b(out->key, secret, NULL, sizeof(out->key), strlen(secret), 0);
}

void kc_mac_init(kc_mac *m, const kc_secret *secret)
{
    if (secret && secret->set)
        blake2b_init_key(&m->st, KC_MAC_SIZE, secret->key, sizeof(secret->key));
    else
        blake2b_init(&m->st, KC_MAC_SIZE);
}

void kc_mac_update(kc_mac *m, const void *data, size_t size)
{
    blake2b_update(&m->st, data, size);
}

void kc_mac_final(kc_mac *m, uint8_t out[KC_MAC_SIZE])
{
    blake2b_final(&m->st, out, KC_MAC_SIZE);
}

int kc_mac_equal(const uint8_t a[KC_MAC_SIZE], const uint8_t b[KC_MAC_SIZE])
{
    uint8_t diff = 0;
    for (int i = 0; i < KC_MAC_SIZE; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}
