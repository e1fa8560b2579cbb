/*
 * Include closures carried by bundles: an export holds the closures its
 * entries' compiles remembered (manifest_store.c), so that the first compile
 * after an import is a hit found by stat() rather than by resolving the
 * includes again (a CUB kernel: 144-204 ms of resolution before, under a
 * millisecond after).
 *
 * A closure from outside is a shortcut, never a source of bytes:
 *   - it is checked against the files as any closure is (compile/manifest.c)
 *     before it leads anywhere: every path it names must hold what it
 *     recorded; a user file whose identity (device, inode, size, times to
 *     the nanosecond) is not the one recorded is read and hashed, a toolkit
 *     header must be the very file. On another machine identities differ,
 *     so a user file that holds has been hashed here;
 *   - it leads only to an entry the same bundle carries and the store now
 *     holds (through the gate, ingest.c): a closure cannot point a request
 *     at an entry the bundle could not also have put under the request's
 *     own key;
 *   - its size is bounded before it is decoded (KC_CARRIED_MAX), the rows
 *     read at most KC_MANIFEST_PER_BASE a key, its time clamped to now;
 *   - a signed bundle signs its closures too, in a row of their own beside
 *     the entries' signature (an older kcache ignores it and imports the
 *     entries). When an import checks a signature, closures are taken only
 *     under a matching one of theirs;
 *   - a closure the store already has (same base and key) stays as it is,
 *     and every closure this machine recorded is tried before a carried
 *     one: a bundle whose closure, copied from another entry's, leads a
 *     request to an entry of the bundle's would otherwise displace the
 *     entry a local closure leads to, past the rule that the store keeps
 *     its own (doc/trust.md, "Conflicts"). Where no local closure holds,
 *     a carried one is trusted as the bundle's entries are;
 *   - NVRTC's environment record (compile/nvenv.c keeps it as a closure whose
 *     base is its key) is this machine's answer, never exported;
 *   - whatever is wrong with closures drops them, never the import: they
 *     only save time.
 */
#include <stdlib.h>
#include <string.h>

#include "store/ingest.h"
#include "store/storelib.h"

/* The decoded size of a closure taken from a bundle, at most (as manifest_store.c reads). */
#define KC_CARRIED_MAX (64 << 20)

/* The name of the closures' signature among the bundle's counters. */
#define KC_CLOSURE_SIG_NAME "bundle_closures_signature_v1"

/* A closure row as a bundle carries it. */
struct carried {
    kcache_key base, key;
    int64_t recorded_at;
    void *data;
    size_t size;
};

/* Adds a closure row to a signature. */
static void sig_add_closure(kc_bundle_sig *sig, const struct carried *c)
{
    kc_bundle_sig_add_closure(sig, &c->base, &c->key, c->recorded_at, c->data, c->size);
}

/*
 * Runs sql (binding ?1 to key when given) on s's connection, s->lock held,
 * and hands each closure row, decoded, to fn; a row out of bounds or that
 * does not decode is passed over. Columns: base, key, recorded_at, raw_size,
 * then codec, data, id, parts as kc_closure_decode() reads them (a closure
 * may be stored in chunks). Returns 0, fn's code, or an error.
 */
static int each_row(kcache_store *s, const char *sql, const kcache_key *key, size_t most,
                    int (*fn)(void *, const struct carried *), void *userdata)
{
    sqlite3_stmt *st = NULL;
    pthread_mutex_lock(&s->lock);
    int rc = 0, src = sqlite3_prepare_v2(s->db.conn, sql, -1, &st, NULL);
    if (src == SQLITE_OK && key)
        sqlite3_bind_blob(st, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    size_t n = 0;
    while (!rc && src == SQLITE_OK && n < most && (src = sqlite3_step(st)) == SQLITE_ROW) {
        src = SQLITE_OK;
        n++;
        struct carried c = {.recorded_at = sqlite3_column_int64(st, 2)};
        const void *base = sqlite3_column_blob(st, 0), *k = sqlite3_column_blob(st, 1);
        int64_t raw = sqlite3_column_int64(st, 3);
        if (!base || !k || sqlite3_column_bytes(st, 0) != KCACHE_KEY_SIZE ||
            sqlite3_column_bytes(st, 1) != KCACHE_KEY_SIZE || raw <= 0 || raw > KC_CARRIED_MAX)
            continue;
        memcpy(c.base.bytes, base, KCACHE_KEY_SIZE);
        memcpy(c.key.bytes, k, KCACHE_KEY_SIZE);
        int drc = kc_closure_decode(s, &c.data, st, 4, 5, (size_t)raw);
        if (drc == KCACHE_ENOMEM)
            rc = KCACHE_ENOMEM;
        if (drc)
            continue;
        c.size = (size_t)raw;
        rc = fn(userdata, &c);
        free(c.data);
    }
    sqlite3_finalize(st);
    kc_unlock(s);
    if (!rc && src != SQLITE_OK && src != SQLITE_DONE)
        rc = KCACHE_EIO;
    return rc;
}

/* ---- export ------------------------------------------------------------ */

struct rows {
    struct carried *v;
    size_t n, cap;
};

static int keep_row(void *userdata, const struct carried *c)
{
    struct rows *l = userdata;
    struct carried *grown = kc_grow(l->v, &l->cap, l->n, sizeof(*grown), 4);
    if (!grown)
        return KCACHE_ENOMEM;
    l->v = grown;
    l->v[l->n] = *c;
    if (!(l->v[l->n].data = kc_memdup(c->data, c->size)))
        return KCACHE_ENOMEM;
    l->n++;
    return 0;
}

int kc_carried_export(kcache_store *store, kcache_store *dst, const kcache_key *key,
                      kc_bundle_sig *sig)
{
    static const char sql[] =
        "SELECT m.base, m.key, m.recorded_at, c.raw_size, c.codec, c.data, c.id, c.parts"
        " FROM manifest m JOIN closure c ON c.id = m.closure_id WHERE m.key = ?1 AND m.base <> m.key"
        " ORDER BY m.created_at DESC";
    struct rows l = {0};
    int rc = each_row(store, sql, key, KC_MANIFEST_PER_BASE, keep_row, &l);
    for (size_t i = 0; !rc && i < l.n; i++) {
        rc = kc_store_manifest_put(dst, &l.v[i].base, &l.v[i].key, l.v[i].recorded_at, l.v[i].data,
                                   l.v[i].size);
        if (!rc && sig)
            sig_add_closure(sig, &l.v[i]);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].data);
    free(l.v);
    return rc;
}

int kc_carried_sig_write(sqlite3 *db, kc_bundle_sig *sig, const kc_secret *secret)
{
    uint8_t mac[KC_MAC_SIZE];
    if (kc_bundle_sig_finish(mac, sig, secret))
        return SQLITE_NOMEM;
    return kc_bundle_sig_write_as(db, KC_CLOSURE_SIG_NAME, mac);
}

/* ---- import ------------------------------------------------------------ */

/* A bundle's closures, leading to the entries it carries; never NVRTC's record. */
static const char import_sql[] =
    "SELECT m.base, m.key, m.recorded_at, c.raw_size, c.codec, c.data, c.id, c.parts"
    " FROM manifest m JOIN closure c ON c.id = m.closure_id WHERE m.base <> m.key"
    " AND m.key IN (SELECT key FROM entry) ORDER BY m.base, m.key";

struct take {
    kcache_store *store;
    kc_bundle_sig sig;
    int64_t now_ns;
    size_t taken;
};

static int sign_row(void *userdata, const struct carried *c)
{
    sig_add_closure(&((struct take *)userdata)->sig, c);
    return 0;
}

/* 1 if the store holds an entry under key and no closure under (base, key), else 0. */
static int wanted(kcache_store *s, const struct carried *c)
{
    static const char sql[] = "SELECT (SELECT count(*) FROM entry WHERE key = ?2)"
                              " - (SELECT count(*) FROM manifest WHERE base = ?1 AND key = ?2)";
    sqlite3_stmt *st = NULL;
    int want = 0;
    pthread_mutex_lock(&s->lock);
    if (s->db.conn && sqlite3_prepare_v2(s->db.conn, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, c->base.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, c->key.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        want = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
    }
    sqlite3_finalize(st);
    kc_unlock(s);
    return want;
}

static int take_row(void *userdata, const struct carried *c)
{
    struct take *t = userdata;
    if (!wanted(t->store, c))
        return 0;
    int64_t at = c->recorded_at < 0 ? 0 : c->recorded_at > t->now_ns ? t->now_ns : c->recorded_at;
    if (kc_store_manifest_put_carried(t->store, &c->base, &c->key, at, c->data, c->size) == 0)
        t->taken++;
    return 0;
}

size_t kc_carried_import(kcache_store *store, kcache_store *src, size_t entries,
                         const kc_secret *verify_with)
{
    struct take t = {.store = store, .now_ns = kc_now_ms() * 1000000};
    /* At most as many closures as an export writes: KC_MANIFEST_PER_BASE an entry. */
    size_t most = entries * KC_MANIFEST_PER_BASE;
    if (verify_with) {
        uint8_t claimed[KC_MAC_SIZE], mac[KC_MAC_SIZE];
        pthread_mutex_lock(&src->lock);
        int has = kc_bundle_sig_read_as(src->db.conn, KC_CLOSURE_SIG_NAME, claimed);
        kc_unlock(src);
        int rc = has == 1 ? each_row(src, import_sql, NULL, most, sign_row, &t) : -1;
        if (!rc)
            rc = kc_bundle_sig_finish(mac, &t.sig, verify_with);
        kc_bundle_sig_free(&t.sig);
        if (rc || !kc_mac_equal(mac, claimed))
            return 0; /* not signed as the entries are: none taken */
    }
    each_row(src, import_sql, NULL, most, take_row, &t);
    return t.taken;
}
