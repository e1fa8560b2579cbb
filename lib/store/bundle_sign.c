/*
 * Signed bundles.
 *
 * Decisions:
 *   - The secret is the shared tier's (remote_secret), signed with the same
 *     keyed BLAKE2b (util/secret.h): a fleet has one secret to hand out, and
 *     the people who may publish to its Redis are the people who may
 *     publish its bundles.
 *   - What is signed is the bundle's contents, not its file: every field an
 *     import merges (key, kind, arch, name, toolchain, log, compile time,
 *     creation time, the artifact's BLAKE2b-256, the key material, the name
 *     expressions with their lowered names, each input's role, name and
 *     BLAKE2b-256), entry by entry, in key order. The artifact is covered
 *     by its digest, which the import gate checks against the bytes. A file
 *     signature would break with any byte SQLite may rewrite and cannot sit
 *     inside the file it signs.
 *   - The signature is a row of the bundle's counter table
 *     (KC_SIG_NAME, the 32 bytes as a blob): no schema change, so a signed
 *     bundle is still a bundle of this schema that any kcache of it imports
 *     (an older one ignores the row), and a stray counter cannot be mistaken
 *     for one (its value is an integer).
 *   - Export signs whenever the secret is set (signing costs one hash per
 *     entry of what is hashed anyway); `--sign` makes a missing secret an
 *     error, for CI that must not ship an unsigned bundle. Import checks a
 *     signature whenever it has the secret, and refuses a bad one; it
 *     refuses an unsigned bundle only when told to (--require-signature,
 *     import_require_signature), so that unsigned bundles keep working.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/ingest.h"
#include "util/settings.h"

#define KC_SIG_NAME "bundle_signature_v1"

struct kc_sig_item {
    kcache_key key;
    uint8_t digest[KC_MAC_SIZE];
};

static void add_u64(kc_mac *m, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    kc_mac_update(m, b, sizeof(b));
}

/* Length first: no two different sequences of fields hash the same stream. */
static void add_bytes(kc_mac *m, const void *data, size_t size)
{
    add_u64(m, size);
    if (size)
        kc_mac_update(m, data, size);
}

static void add_text(kc_mac *m, const char *s)
{
    add_bytes(m, s ? s : "", s ? strlen(s) : 0);
}

void kc_bundle_sig_add(kc_bundle_sig *s, const kcache_entry *e)
{
    struct kc_sig_item *grown = kc_grow(s->items, &s->cap, s->n, sizeof(*grown), 256);
    if (!grown) {
        s->failed = 1;
        return;
    }
    s->items = grown;
    struct kc_sig_item *it = &s->items[s->n++];
    it->key = e->key;
    kc_mac m;
    kc_mac_init(&m, NULL);
    add_text(&m, "kcache-bundle-entry-1");
    add_bytes(&m, e->key.bytes, KCACHE_KEY_SIZE);
    add_u64(&m, (uint64_t)e->kind);
    add_text(&m, e->arch);
    add_text(&m, e->name);
    add_text(&m, e->toolchain);
    add_text(&m, e->log);
    add_u64(&m, e->compile_ns);
    add_u64(&m, (uint64_t)e->created_at);
    add_bytes(&m, e->digest, sizeof(e->digest));
    add_bytes(&m, e->key_material, e->key_material_size);
    add_u64(&m, e->n_names);
    for (size_t i = 0; i < e->n_names; i++) {
        add_text(&m, e->name_exprs[i]);
        add_text(&m, e->lowered_names[i]);
    }
    add_u64(&m, e->n_inputs);
    for (size_t i = 0; i < e->n_inputs; i++) {
        uint8_t d[KC_DIGEST_SIZE];
        kc_digest(d, e->inputs[i].data, e->inputs[i].size);
        add_u64(&m, (uint64_t)e->inputs[i].role);
        add_text(&m, e->inputs[i].name);
        add_bytes(&m, d, sizeof(d));
    }
    kc_mac_final(&m, it->digest);
}

static int by_key(const void *a, const void *b)
{
    return memcmp(((const struct kc_sig_item *)a)->key.bytes,
                  ((const struct kc_sig_item *)b)->key.bytes, KCACHE_KEY_SIZE);
}

int kc_bundle_sig_finish(uint8_t out[KC_MAC_SIZE], kc_bundle_sig *s, const kc_secret *secret)
{
    if (s->failed)
        return KCACHE_ENOMEM;
    if (s->n)
        qsort(s->items, s->n, sizeof(*s->items), by_key);
    kc_mac m;
    kc_mac_init(&m, secret);
    add_text(&m, "kcache-bundle-1");
    add_u64(&m, s->n);
    for (size_t i = 0; i < s->n; i++)
        kc_mac_update(&m, s->items[i].digest, KC_MAC_SIZE);
    kc_mac_final(&m, out);
    return 0;
}

void kc_bundle_sig_free(kc_bundle_sig *s)
{
    free(s->items);
    memset(s, 0, sizeof(*s));
}

int kc_bundle_sig_read(sqlite3 *db, uint8_t out[KC_MAC_SIZE])
{
    sqlite3_stmt *st = NULL;
    int found = 0;
    int src = sqlite3_prepare_v2(db, "SELECT value FROM counter WHERE name = ?1", -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_text(st, 1, KC_SIG_NAME, -1, SQLITE_STATIC);
        src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            /* Anything but 32 bytes under this name is a signature that cannot match. */
            found = sqlite3_column_type(st, 0) == SQLITE_BLOB &&
                            sqlite3_column_bytes(st, 0) == KC_MAC_SIZE
                        ? 1
                        : KCACHE_ECORRUPT;
            if (found == 1)
                memcpy(out, sqlite3_column_blob(st, 0), KC_MAC_SIZE);
            src = SQLITE_DONE;
        }
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? found : KCACHE_ECORRUPT;
}

int kc_bundle_sig_write(sqlite3 *db, const uint8_t sig[KC_MAC_SIZE])
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO counter (name, value) VALUES (?1, ?2)",
                                 -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_text(st, 1, KC_SIG_NAME, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, sig, KC_MAC_SIZE, SQLITE_STATIC);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? SQLITE_OK : src;
}

void kc_bundle_secret(kc_secret *out, kcache_store *store)
{
    char text[1024];
    if (kc_config_value(text, sizeof(text), "remote_secret", NULL, kcache_store_path(store)))
        text[0] = '\0';
    kc_secret_init(out, text);
    memset(text, 0, sizeof(text));
}

int kc_bundle_require_setting(int *out, kcache_store *store)
{
    char text[32];
    *out = 0;
    int rc = kc_config_value(text, sizeof(text), "import_require_signature", NULL,
                             kcache_store_path(store));
    if (rc == KCACHE_ENOTFOUND)
        return 0;
    if (rc || kc_config_bool(out, text))
        return KCACHE_EINVAL;
    return 0;
}
