/*
 * Entries keyed by a caller: bytes a caller (cuda.core's program cache,
 * Triton, a user's tool) stores under its own key in a namespace.
 *
 * Decisions:
 *   - The store's key is BLAKE2b-256 of a key material, as for a compile,
 *     and the material is kept with the entry. So the import gate (ingest.c)
 *     and the remote recompute and check such a key exactly as a compile's,
 *     and no caller can reach a compile's entry: the material's first field
 *     is a format of its own ("kcache-keyed-1"), in the tag-length-value
 *     encoding compile/key.h defines (tags KC_KEYED_TAG_* below are reserved
 *     there), so no compile's material can equal a caller's.
 *   - Such an entry is kind KCACHE_KIND_DATA with its namespace in arch.
 *     Every rule written for (arch, kind) then holds with no second path:
 *     the LRU and the cap, the hit and miss rows per (arch, kind) (so stats
 *     per namespace), list and prune filters, the remote's index by arch,
 *     export and import. A namespace is therefore a short name, like an
 *     architecture.
 *   - A get checks that the row it found is a caller's entry of that
 *     namespace: a key cannot be both, and a row that says otherwise is
 *     treated as a miss rather than handed out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

#define KC_KEYED_FORMAT "kcache-keyed-1"
/* Tag values shared with compile/key.h's enum kc_key_tag, which reserves them. */
#define KC_KEYED_TAG_FORMAT 1
#define KC_KEYED_TAG_NAMESPACE 15
#define KC_KEYED_TAG_CALLER_KEY 16

static int ns_valid(const char *ns)
{
    size_t n = ns ? strlen(ns) : 0;
    if (n == 0 || n > KCACHE_NAMESPACE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = ns[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int add_field(kc_buf *b, int tag, const void *data, size_t size)
{
    uint8_t t = (uint8_t)tag;
    int rc = kc_buf_append(b, &t, 1);
    if (!rc)
        rc = kc_buf_append_u32(b, (uint32_t)size);
    if (!rc)
        rc = kc_buf_append(b, data, size);
    return rc;
}

/* The material of (ns, key) into *b, and its digest into *out. */
static int keyed_material(kc_buf *b, kcache_key *out, const char *ns, const void *key,
                          size_t key_size)
{
    int rc = add_field(b, KC_KEYED_TAG_FORMAT, KC_KEYED_FORMAT, strlen(KC_KEYED_FORMAT));
    if (!rc)
        rc = add_field(b, KC_KEYED_TAG_NAMESPACE, ns, strlen(ns));
    if (!rc)
        rc = add_field(b, KC_KEYED_TAG_CALLER_KEY, key_size ? key : "", key_size);
    if (!rc)
        kc_digest(out->bytes, b->data, b->size);
    return rc;
}

/* KCACHE_EINVAL with the rule a namespace or a key broke; s may be NULL. */
static int check_args(kcache_store *s, const char *fn, const char *ns, const void *key,
                      size_t key_size)
{
    if (!ns_valid(ns))
        return s ? kc_err_locking(s, KCACHE_EINVAL,
                                  "%s: namespace '%.40s' must be 1 to %d letters, digits, '.', "
                                  "'_' or '-'", fn, ns ? ns : "(null)", KCACHE_NAMESPACE_MAX)
                 : KCACHE_EINVAL;
    if ((!key && key_size) || key_size > KCACHE_CALLER_KEY_MAX)
        return s ? kc_err_locking(s, KCACHE_EINVAL, "%s: a key must be at most %d bytes", fn,
                                  KCACHE_CALLER_KEY_MAX)
                 : KCACHE_EINVAL;
    return 0;
}

KCACHE_API int kcache_key_caller(kcache_key *out, const char *ns, const void *key,
                                 size_t key_size)
{
    if (!out || check_args(NULL, __func__, ns, key, key_size))
        return KCACHE_EINVAL;
    kc_buf b = {0};
    int rc = keyed_material(&b, out, ns, key, key_size);
    kc_buf_free(&b);
    return rc;
}

KCACHE_API int kcache_store_put_keyed(kcache_store *store, const char *ns, const void *key,
                                      size_t key_size, const void *data, size_t size)
{
    KC_CHECK_ARG(store, store && (data || !size));
    int rc = check_args(store, __func__, ns, key, key_size);
    if (rc)
        return rc;
    kc_buf material = {0};
    kcache_entry e = KCACHE_ENTRY_INIT;
    if ((rc = keyed_material(&material, &e.key, ns, key, key_size))) {
        kc_buf_free(&material);
        return kc_err_locking(store, rc, "out of memory");
    }
    e.kind = KCACHE_KIND_DATA;
    e.arch = ns;
    e.name = "";
    e.data = data;
    e.size = size;
    e.key_material = material.data;
    e.key_material_size = material.size;
    rc = kcache_store_put(store, &e);
    kc_buf_free(&material);
    return rc;
}

/* The store's key of a caller's (ns, key), the arguments checked first (message on store). */
static int keyed_key(kcache_key *out, kcache_store *store, const char *fn, const char *ns,
                     const void *key, size_t key_size)
{
    int rc = check_args(store, fn, ns, key, key_size);
    if (!rc && (rc = kcache_key_caller(out, ns, key, key_size)))
        rc = kc_err_locking(store, rc, "out of memory");
    return rc;
}

KCACHE_API int kcache_store_get_keyed(kcache_entry **out, kcache_store *store, const char *ns,
                                      const void *key, size_t key_size, unsigned flags)
{
    KC_CHECK_ARG(store, store && out);
    *out = NULL;
    kcache_key k;
    int rc = keyed_key(&k, store, __func__, ns, key, key_size);
    if (rc)
        return rc;
    rc = kcache_store_get(out, store, &k, flags);
    if (!rc && ((*out)->kind != KCACHE_KIND_DATA || strcmp((*out)->arch, ns) != 0)) {
        kcache_entry_free(*out);
        *out = NULL;
        return kc_err_locking(store, KCACHE_ENOTFOUND,
                              "the entry under this key is not one of namespace %s", ns);
    }
    /* A caller's miss is a miss of its namespace: no compile follows to count it. */
    if (rc == KCACHE_ENOTFOUND && !(flags & KCACHE_GET_NO_TOUCH))
        kc_store_count_miss(store, ns, KCACHE_KIND_DATA);
    return rc;
}

KCACHE_API int kcache_store_delete_keyed(kcache_store *store, const char *ns, const void *key,
                                         size_t key_size)
{
    KC_CHECK_ARG(store, store);
    kcache_key k;
    int rc = keyed_key(&k, store, __func__, ns, key, key_size);
    return rc ? rc : kcache_store_delete(store, &k);
}

/* One statement on the namespace, in the caller's transaction or none. */
static int ns_step(kcache_store *s, const char *sql, const char *ns, sqlite3_stmt **out)
{
    int src = sqlite3_prepare_v2(s->db.conn, sql, -1, out, NULL);
    if (src != SQLITE_OK)
        return kc_sqlerr(&s->db, src, "reading a namespace");
    sqlite3_bind_int(*out, 1, KCACHE_KIND_DATA);
    sqlite3_bind_text(*out, 2, ns, -1, SQLITE_STATIC);
    src = sqlite3_step(*out);
    return src == SQLITE_ROW || src == SQLITE_DONE ? 0
                                                   : kc_sqlerr(&s->db, src, "reading a namespace");
}

static int ns_stats_locked(kcache_store *s, kcache_namespace_stats *out, const char *ns)
{
    sqlite3_stmt *st = NULL;
    int rc = ns_step(s, "SELECT count(*), total(raw_size), total(stored_size) FROM entry"
                        " WHERE kind = ?1 AND arch = ?2", ns, &st);
    if (!rc) {
        out->entries = (uint64_t)sqlite3_column_int64(st, 0);
        out->raw_bytes = (uint64_t)sqlite3_column_double(st, 1);
        out->stored_bytes = (uint64_t)sqlite3_column_double(st, 2);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (!rc && !(rc = ns_step(s, "SELECT hits, misses FROM usage WHERE kind = ?1 AND arch = ?2",
                              ns, &st)) &&
        sqlite3_data_count(st) == 2) {
        out->hits = (uint64_t)sqlite3_column_int64(st, 0);
        out->misses = (uint64_t)sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    /* This process's counts not yet written, and the ones waiting in PATH-hits. */
    kcache_usage *logged = NULL;
    size_t n_logged = 0, cap_logged = 0;
    if (!rc && (rc = kc_hitlog_usage(s, &logged, &n_logged, &cap_logged)))
        rc = kc_err(s, rc, "out of memory");
    for (size_t i = 0; !rc && i < s->n_usage + n_logged; i++) {
        const kcache_usage *u = i < s->n_usage ? &s->usage[i] : &logged[i - s->n_usage];
        if ((int)u->kind == KCACHE_KIND_DATA && !strcmp(u->arch, ns)) {
            out->hits += u->hits;
            out->misses += u->misses;
        }
    }
    free(logged);
    return rc;
}

KCACHE_API int kcache_store_namespace_stats(kcache_namespace_stats *out, kcache_store *store,
                                            const char *ns)
{
    KC_CHECK_ARG(store, store && out);
    if (kc_check_version(store, out, "kcache_namespace_stats", KCACHE_NAMESPACE_STATS_VERSION))
        return KCACHE_EINVAL;
    int rc = check_args(store, __func__, ns, NULL, 0);
    if (rc)
        return rc;
    unsigned version = out->version;
    memset(out, 0, sizeof(*out));
    out->version = version;
    pthread_mutex_lock(&store->lock);
    KC_WITH_RECOVERY(store, rc, ns_stats_locked(store, out, ns));
    kc_unlock(store);
    return rc;
}

static void bind_ns(sqlite3_stmt *st, const void *ns)
{
    sqlite3_bind_int(st, 1, KCACHE_KIND_DATA);
    sqlite3_bind_text(st, 2, ns, -1, SQLITE_STATIC);
}

static void bind_id(sqlite3_stmt *st, const void *id)
{
    sqlite3_bind_int64(st, 1, *(const int64_t *)id);
}

static int ns_clear_locked(kcache_store *s, const char *ns, uint64_t *deleted)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    int64_t gone = 0;
    if ((rc = kc_cascade_once(s, "SELECT id FROM entry WHERE kind = ?1 AND arch = ?2",
                              NULL, bind_ns, ns, &gone))) {
        kc_db_rollback(&s->db);
        return rc;
    }
    uint64_t changed = (uint64_t)gone;
    if ((rc = kc_pending_write(s)) || (rc = kc_db_commit(&s->db))) {
        kc_db_rollback(&s->db);
        return rc;
    }
    kc_pending_clear(s);
    if (deleted)
        *deleted = changed;
    return 0;
}

KCACHE_API int kcache_store_clear_namespace(uint64_t *deleted, kcache_store *store,
                                            const char *ns)
{
    KC_CHECK_ARG(store, store);
    int rc = check_args(store, __func__, ns, NULL, 0);
    if (rc)
        return rc;
    if (deleted)
        *deleted = 0;
    pthread_mutex_lock(&store->lock);
    rc = kc_db_writable(&store->db);
    if (!rc)
        KC_WITH_RECOVERY(store, rc, ns_clear_locked(store, ns, deleted));
    kc_unlock(store);
    return rc;
}

/* Flushes every count first, so none of the namespace's is written after the zeroing. */
static int ns_zero_locked(kcache_store *s, const char *ns)
{
    int rc = kc_flush_locked(s, 1);
    if (rc || (rc = kc_db_begin_write(&s->db)))
        return rc;
    sqlite3_stmt *st = NULL;
    rc = ns_step(s, "DELETE FROM usage WHERE kind = ?1 AND arch = ?2", ns, &st);
    sqlite3_finalize(st);
    if (rc || (rc = kc_db_commit(&s->db))) {
        kc_db_rollback(&s->db);
        return rc;
    }
    return 0;
}

KCACHE_API int kcache_store_zero_namespace_stats(kcache_store *store, const char *ns)
{
    KC_CHECK_ARG(store, store);
    int rc = check_args(store, __func__, ns, NULL, 0);
    if (rc)
        return rc;
    pthread_mutex_lock(&store->lock);
    rc = kc_db_writable(&store->db);
    if (!rc)
        KC_WITH_RECOVERY(store, rc, ns_zero_locked(store, ns));
    kc_unlock(store);
    return rc;
}

/*
 * The import gate's part (ingest.c): an entry's key material says whether it
 * is a caller's, and of which namespace; its kind and arch must say the same,
 * or a bundle could hand a compile's bytes out under a caller's key as data
 * of another namespace, or a caller's bytes as a kernel.
 */
int kc_keyed_check(const kcache_entry *e, char *what, size_t what_size)
{
    const uint8_t *p = e->key_material;
    size_t size = e->key_material_size, off = 0;
    const uint8_t *field[3] = {NULL, NULL, NULL};
    uint32_t len[3] = {0, 0, 0};
    static const int tags[3] = {KC_KEYED_TAG_FORMAT, KC_KEYED_TAG_NAMESPACE,
                                KC_KEYED_TAG_CALLER_KEY};
    for (int i = 0; i < 3 && size - off >= 5; i++) {
        uint32_t n = kc_read_u32(p + off + 1);
        if (p[off] != tags[i] || size - off - 5 < n)
            break;
        field[i] = p + off + 5;
        len[i] = n;
        off += 5 + (size_t)n;
    }
    int keyed = field[0] && len[0] == strlen(KC_KEYED_FORMAT) &&
                memcmp(field[0], KC_KEYED_FORMAT, len[0]) == 0;
    if (!keyed && e->kind == KCACHE_KIND_DATA) {
        snprintf(what, what_size, "it is data but its key is not a caller's");
        return KCACHE_ECORRUPT;
    }
    if (keyed && e->kind != KCACHE_KIND_DATA) {
        snprintf(what, what_size, "its key is a caller's but it is not data");
        return KCACHE_ECORRUPT;
    }
    if (keyed && (!field[2] || off != size || !e->arch || len[1] != strlen(e->arch) ||
                  memcmp(field[1], e->arch, len[1]) != 0)) {
        snprintf(what, what_size, "its namespace is not the one its key was made in");
        return KCACHE_ECORRUPT;
    }
    return 0;
}

/* The namespace's entries, least recently used first, deleted until its bytes fit. */
static int ns_trim_locked(kcache_store *s, const char *ns, uint64_t max_bytes, uint64_t *evicted)
{
    kc_flush_locked(s, 0); /* this process's reads count as uses before choosing */
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    struct kc_cascade del = {{NULL}};
    uint64_t total = 0, n = 0;
    if ((rc = ns_step(s, "SELECT total(raw_size) FROM entry WHERE kind = ?1 AND arch = ?2", ns,
                      &st)))
        goto out;
    total = (uint64_t)sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (total <= max_bytes)
        goto out;
    if ((rc = kc_cascade_prepare(s, &del, "SELECT id FROM entry WHERE id = ?1", NULL)))
        goto out;
    int src;
    if ((rc = ns_step(s, "SELECT id, raw_size FROM entry WHERE kind = ?1 AND arch = ?2"
                         " ORDER BY accessed_at, id", ns, &st)))
        goto out;
    while (total > max_bytes && sqlite3_data_count(st) == 2) {
        int64_t id = sqlite3_column_int64(st, 0);
        uint64_t size = (uint64_t)sqlite3_column_int64(st, 1);
        if ((rc = kc_cascade_run(s, &del, bind_id, &id, NULL)))
            goto out;
        total -= size < total ? size : total;
        n++;
        src = sqlite3_step(st);
        if (src != SQLITE_ROW && src != SQLITE_DONE) {
            rc = kc_sqlerr(&s->db, src, "evicting from a namespace");
            goto out;
        }
    }
    if (n && (rc = kc_counter_write(s, "evictions", n)))
        goto out;
out:
    sqlite3_finalize(st);
    kc_cascade_finalize(&del);
    if (!rc && !(rc = kc_pending_write(s)) && !(rc = kc_db_commit(&s->db))) {
        kc_pending_clear(s);
        *evicted = n;
        return 0;
    }
    kc_db_rollback(&s->db);
    return rc;
}

KCACHE_API int kcache_store_trim_namespace(uint64_t *evicted, kcache_store *store, const char *ns,
                                           uint64_t max_bytes)
{
    KC_CHECK_ARG(store, store);
    int rc = check_args(store, __func__, ns, NULL, 0);
    if (rc)
        return rc;
    uint64_t n = 0;
    pthread_mutex_lock(&store->lock);
    rc = kc_db_writable(&store->db);
    if (!rc)
        KC_WITH_RECOVERY(store, rc, ns_trim_locked(store, ns, max_bytes, &n));
    kc_unlock(store);
    if (evicted)
        *evicted = rc ? 0 : n;
    return rc;
}
