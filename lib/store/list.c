/* Finding a key by prefix, and walking entries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

KCACHE_API int kcache_store_find(kcache_key *out, kcache_store *store, const char *hex_prefix)
{
    KC_CHECK_ARG(store, store && out && hex_prefix);
    size_t n = strlen(hex_prefix);
    uint8_t lo[KCACHE_KEY_SIZE] = {0}, hi[KCACHE_KEY_SIZE + 1];
    if (n < 4 || n > 2 * KCACHE_KEY_SIZE)
        return kc_err(store, KCACHE_EINVAL,
                      "key prefix '%.80s' must be 4 to 64 hex digits (see 'kcache ls')",
                      hex_prefix);
    char full[2 * KCACHE_KEY_SIZE + 1];
    memset(full, '0', sizeof(full) - 1);
    full[sizeof(full) - 1] = '\0';
    memcpy(full, hex_prefix, n);
    kcache_key parsed;
    if (kcache_key_parse(&parsed, full) != 0)
        return kc_err(store, KCACHE_EINVAL,
                      "key prefix '%.80s' is not hexadecimal (see 'kcache ls')", hex_prefix);
    memcpy(lo, parsed.bytes, sizeof(lo));
    /* The upper bound: the prefix plus one in its last digit, carried. */
    size_t nbytes = (n + 1) / 2;
    memcpy(hi, lo, sizeof(lo));
    unsigned step = n % 2 ? 0x10 : 0x01;
    size_t hi_n = nbytes;
    int carry = 1;
    for (size_t i = nbytes; i-- > 0 && carry;) {
        unsigned v = hi[i] + step;
        hi[i] = (uint8_t)v;
        carry = v > 0xff;
        step = 1;
    }
    if (carry) {
        memset(hi, 0xff, sizeof(hi));
        hi_n = sizeof(hi);
    }
    pthread_mutex_lock(&store->lock);
    sqlite3_stmt *st;
    int rc = store->db ? kc_db_stmt(store, &st, KC_STMT_FIND_PREFIX)
                       : kc_err(store, KCACHE_EIO, "no database");
    if (!rc) {
        sqlite3_bind_blob(st, 1, lo, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, hi, (int)hi_n, SQLITE_STATIC);
        int found = 0, src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            if (found++ == 0 && sqlite3_column_bytes(st, 0) == KCACHE_KEY_SIZE)
                memcpy(out->bytes, sqlite3_column_blob(st, 0), KCACHE_KEY_SIZE);
        }
        sqlite3_reset(st);
        if (src != SQLITE_DONE)
            rc = kc_sqlerr(store, src, "looking up a key");
        else if (found == 0)
            rc = kc_err(store, KCACHE_ENOTFOUND, "no entry starts with %s (see 'kcache ls')",
                        hex_prefix);
        else if (found > 1)
            rc = kc_err(store, KCACHE_EAMBIGUOUS,
                        "more than one entry starts with %s: give more digits", hex_prefix);
    }
    pthread_mutex_unlock(&store->lock);
    return rc;
}

/*
 * Walks the selected entries; the store's lock is held. *from_fn tells a
 * callback's own return value (any int, even one that looks like ours) from a
 * failure of the store, which alone may lead to recovery.
 */
static int list_locked(kcache_store *store, const kcache_filter *filter, enum kc_stmt which,
                       kcache_entry_fn fn, void *userdata, int *from_fn)
{
    *from_fn = 0;
    sqlite3_stmt *st;
    kc_flush_locked(store, 0);
    int rc = kc_db_stmt(store, &st, which);
    if (!rc) {
        if (filter->arch && *filter->arch)
            sqlite3_bind_text(st, 1, filter->arch, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, (int)filter->kind);
        sqlite3_bind_int64(st, 3, filter->accessed_before);
        sqlite3_bind_int64(st, 4, filter->created_since);
        sqlite3_bind_int64(st, 5, filter->limit ? (sqlite3_int64)filter->limit : -1);
        int src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            struct kc_row r;
            kc_row_from_list(&r, st);
            kcache_entry e = KCACHE_ENTRY_INIT;
            e.key = r.key;
            e.kind = (kcache_kind)r.kind;
            e.arch = r.arch;
            e.name = r.name;
            e.toolchain = r.toolchain;
            e.log = "";
            e.size = r.raw_size;
            e.stored_size = r.stored_size;
            if (r.digest)
                memcpy(e.digest, r.digest, sizeof(e.digest));
            e.created_at = r.created_at;
            e.accessed_at = r.accessed_at;
            e.hits = r.hits;
            e.compile_ns = r.compile_ns;
            if ((rc = fn(userdata, &e)) != 0) {
                *from_fn = 1;
                break;
            }
        }
        if (!rc && src != SQLITE_DONE)
            rc = kc_sqlerr(store, src, "listing entries");
        sqlite3_reset(st);
    }
    return rc;
}

KCACHE_API int kcache_store_list(kcache_store *store, const kcache_filter *filter,
                                 kcache_entry_fn fn, void *userdata)
{
    static const kcache_filter all = KCACHE_FILTER_INIT;
    static const enum kc_stmt by_sort[] = {
        [KCACHE_SORT_ACCESSED] = KC_STMT_LIST_ACCESSED,
        [KCACHE_SORT_CREATED] = KC_STMT_LIST_CREATED,
        [KCACHE_SORT_SIZE] = KC_STMT_LIST_SIZE,         [KCACHE_SORT_HITS] = KC_STMT_LIST_HITS,
        [KCACHE_SORT_LRU] = KC_STMT_LIST_LRU,
    };
    KC_CHECK_ARG(store, store && fn);
    if (!filter)
        filter = &all;
    if (filter->version < 1 || filter->version > KCACHE_FILTER_VERSION ||
        (unsigned)filter->sort >= KC_ARRAY_SIZE(by_sort))
        return kc_err(store, KCACHE_EINVAL, "kcache_store_list: bad filter");
    pthread_mutex_lock(&store->lock);
    int rc = KCACHE_EIO, from_fn = 0;
    if (store->db) {
        rc = list_locked(store, filter, by_sort[filter->sort], fn, userdata, &from_fn);
        if (rc == KCACHE_ECORRUPT && !from_fn && !store->read_only && !store->newer_schema &&
            kc_db_recover(store, store->errmsg) == 0) {
            store->pending_corrupt++;
            rc = list_locked(store, filter, by_sort[filter->sort], fn, userdata, &from_fn);
        }
    } else {
        kc_err(store, rc, "no database");
    }
    pthread_mutex_unlock(&store->lock);
    return rc;
}

struct key_list {
    kcache_key *keys;
    size_t n, cap;
};

static int collect_key(void *userdata, const kcache_entry *e)
{
    struct key_list *l = userdata;
    kcache_key *grown = kc_grow(l->keys, &l->cap, l->n, sizeof(*grown), 256);
    if (!grown)
        return KCACHE_ENOMEM;
    l->keys = grown;
    l->keys[l->n++] = e->key;
    return 0;
}

KCACHE_API int kcache_store_list_keys(kcache_key **out, size_t *n,
                                      kcache_store *store, const kcache_filter *filter)
{
    KC_CHECK_ARG(store, store && out && n);
    struct key_list l = {NULL, 0, 0};
    *out = NULL;
    *n = 0;
    int rc = kcache_store_list(store, filter, collect_key, &l);
    if (rc) {
        free(l.keys);
        if (rc == KCACHE_ENOMEM) {
            pthread_mutex_lock(&store->lock);
            kc_err(store, rc, "out of memory listing entries");
            pthread_mutex_unlock(&store->lock);
        }
        return rc;
    }
    *out = l.keys;
    *n = l.n;
    return 0;
}

KCACHE_API void kcache_keys_free(kcache_key *keys)
{
    free(keys);
}
