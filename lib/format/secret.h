/*
 * Signing with a shared secret: keyed BLAKE2b-256. The shared tier signs its
 * values with it (remote/wire.c) and bundles are signed with it
 * (store/ingest.c): one secret (remote_secret) and one primitive, so a
 * fleet that trusts its Redis trusts its bundles the same way. Only holders
 * of the secret can make a signature; the digest beside an entry's bytes
 * guards against damage, this against someone who means it.
 */
#ifndef KC_SECRET_H
#define KC_SECRET_H

#include <blake2.h>
#include <stddef.h>
#include <stdint.h>

#define KC_MAC_SIZE 32

/* The key a secret signs with: BLAKE2b-512 of the secret, so that any length works. */
typedef struct kc_secret {
    int set;
    uint8_t key[64];
} kc_secret;

/* From the text of the setting; NULL or "" leaves it unset. */
void kc_secret_init(kc_secret *out, const char *secret);

/* BLAKE2b-256 keyed by secret (a signature), or plain when secret is NULL or unset. */
typedef struct kc_mac {
    blake2b_state st;
} kc_mac;

void kc_mac_init(kc_mac *m, const kc_secret *secret);
void kc_mac_update(kc_mac *m, const void *data, size_t size);
void kc_mac_final(kc_mac *m, uint8_t out[KC_MAC_SIZE]);

/* Compares two signatures in time that does not depend on where they differ. */
int kc_mac_equal(const uint8_t a[KC_MAC_SIZE], const uint8_t b[KC_MAC_SIZE]);

#endif
