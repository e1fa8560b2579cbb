/*
 * How an entry travels through the shared tier: one self-describing value,
 * optionally signed. Everything in it is checked before it is believed, in an
 * order that spends nothing on a value that is lying: sizes first (against
 * the bounds below, before anything is allocated or decompressed), then the
 * signature, then the key recomputed from the key material, and only then
 * the artifact is decompressed and checked against its digest.
 *
 * Layout (little endian):
 *   "KCRE"  u32 format (1)  u32 flags (bit 0: signed)  u32 kind  u32 codec
 *   u32 n_names  u64 raw_size  u64 stored_size  u64 compile_ns  u64 created_at_ms
 *   u32 arch_len  u32 name_len  u32 toolchain_len  u32 log_len  u32 names_len
 *   u32 material_len  digest[32] (BLAKE2b-256 of the raw artifact)
 *   arch, name, toolchain, log (each with its NUL)  names  key material
 *   stored artifact  checksum[32]  [signature[32]]
 * names: per name expression, u32 length + bytes + NUL, then the same for
 * its lowered name. The checksum is BLAKE2b-256 over the cache key and
 * every byte before it: it catches damage to what neither the key nor the
 * artifact's digest covers (names, log, metadata), not an adversary, who can
 * recompute it. The signature is keyed BLAKE2b-256 over the cache key and
 * every byte before it (checksum included): only holders of the secret can
 * make one, and a signed value cannot be replayed under another key.
 */
#ifndef KC_WIRE_H
#define KC_WIRE_H

#include "kcache/store.h"
#include "util/codec.h"
#include "util/common.h"
#include "format/secret.h"

#define KC_WIRE_FORMAT 1
#define KC_WIRE_HEADER_SIZE 112
#define KC_WIRE_SIG_SIZE 32
/* Bounds on what a remote value may claim, checked before anything is decompressed. */
#define KC_WIRE_MAX_RAW (UINT64_C(256) << 20)      /* an artifact */
#define KC_WIRE_MAX_VALUE (UINT64_C(320) << 20)    /* a whole value as Redis hands it */
#define KC_WIRE_MAX_TEXT (UINT32_C(16) << 20)      /* log, names, key material each */
#define KC_WIRE_MAX_NAMES 65536u

/* remote_secret, as format/secret.h keys with it (bundles are signed with the same). */
typedef kc_secret kc_wire_secret;

void kc_wire_secret_init(kc_wire_secret *out, const char *secret);

/*
 * Encodes e (its data raw) into out (reset first), its artifact compressed
 * with method (a `compression` of util/codec.h), signed when secret->set.
 */
int kc_wire_encode(kc_buf *out, kc_codec_ctx *codec, int method, const kcache_entry *e,
                   int64_t created_ms, const kc_wire_secret *secret);

/*
 * What the remote tier pushes with, whatever the local `compression`: zstd.
 * A value crosses the network and sits in the server's memory, where its
 * size counts and a decode is small beside the round trip; and every kcache
 * of a fleet reads zstd, while only builds with LZ4 read lz4. Every codec of
 * util/codec.h is read back, so a later build may push another.
 */
#define KC_WIRE_PUSH_CODEC KC_CODEC_ZSTD

/* A decoded value: entry points into the value and into the two allocations here. */
typedef struct kc_wire_entry {
    kcache_entry e;
    void *data;              /* the decompressed artifact */
    const char **names;      /* name_exprs then lowered_names */
} kc_wire_entry;

/*
 * Checks and decodes a value found under key. On success *out is filled (to
 * be released with kc_wire_entry_free(); it points into value, which must
 * outlive it). Returns 0, or KCACHE_ECORRUPT with why in msg: a value that is
 * not ours, claims more than the bounds, is unsigned or badly signed while a
 * secret is set, whose key material does not hash to key, or whose artifact
 * does not decompress to its digest.
 */
int kc_wire_decode(kc_wire_entry *out, kc_codec_ctx *codec, const kcache_key *key,
                   const void *value, size_t size, const kc_wire_secret *secret, char *msg,
                   size_t msg_size);
void kc_wire_entry_free(kc_wire_entry *w);

#endif
