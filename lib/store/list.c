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
    int rc = store->db.conn ? kc_db_stmt(&store->db, &st, KC_STMT_FIND_PREFIX)
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
            rc = kc_sqlerr(&store->db, src, "looking up a key");
        else if (found == 0)
            rc = kc_err(store, KCACHE_ENOTFOUND, "no entry starts with %s (see 'kcache ls')",
                        hex_prefix);
        else if (found > 1)
            rc = kc_err(store, KCACHE_EAMBIGUOUS,
                        "more than one entry starts with %s: give more digits", hex_prefix);
    }
    kc_unlock(store);
    return rc;
}

/*
 * The selected entries' metadata, read under the store's lock into a list of
 * their own, so that the caller's function runs with no lock held (it may
 * call the store: a callback under a non-recursive lock would deadlock).
 */
struct entry_list {
    kcache_entry **v;
    size_t n, cap;
};

static void entry_list_free(struct entry_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        kcache_entry_free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static int list_locked(kcache_store *store, const kcache_filter *filter, enum kc_stmt which,
                       struct entry_list *out)
{
    sqlite3_stmt *st;
    kc_flush_locked(store, 0);
    int rc = kc_db_stmt(&store->db, &st, which);
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
            kcache_entry **grown = kc_grow(out->v, &out->cap, out->n, sizeof(*grown), 64);
            if (!grown) {
                rc = kc_err(store, KCACHE_ENOMEM, "out of memory listing entries");
                break;
            }
            out->v = grown;
            /* Metadata only (no artifact in the row): nothing to decode, nothing damaged. */
            if ((rc = kc_entry_build(&out->v[out->n], &r, store->codec))) {
                kc_err(store, rc, "out of memory listing entries");
                break;
            }
            out->n++;
        }
        if (!rc && src != SQLITE_DONE)
            rc = kc_sqlerr(&store->db, src, "listing entries");
        sqlite3_reset(st);
    }
    if (rc)
        entry_list_free(out);
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
    char msg[KC_ERRMSG_SIZE];
    if (kc_version_check(msg, sizeof(msg), "kcache_filter", filter->version, KCACHE_FILTER_VERSION))
        return kc_err_locking(store, KCACHE_EINVAL, "%s", msg);
    if ((unsigned)filter->sort >= KC_ARRAY_SIZE(by_sort))
        return kc_err_locking(store, KCACHE_EINVAL, "kcache_store_list: sort %d is not a kcache_sort",
                              (int)filter->sort);
    struct entry_list l = {NULL, 0, 0};
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, list_locked(store, filter, by_sort[filter->sort], &l));
    kc_unlock(store);
    for (size_t i = 0; !rc && i < l.n; i++)
        rc = fn(userdata, l.v[i]);
    entry_list_free(&l);
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
            kc_unlock(store);
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
