/*
 * The lists that entries share (schema/008_shared_lists.sql): how an input
 * list is named by its digest, for the store's puts and for the migration,
 * and the migration itself, which moves the lists of the entries a file
 * already holds into the shared tables in the transaction that migrates it.
 */
#include <stdlib.h>
#include <string.h>

#include "db/dbint.h"
#include "util/codec.h"
#include "format/keyfmt.h"

int kc_share_input_record(kc_buf *b, int role, const char *name, size_t name_n,
                          const uint8_t digest[32])
{
    uint8_t r = (uint8_t)role;
    if (name_n > UINT32_MAX)
        return KCACHE_EINVAL;
    return kc_buf_append(b, &r, 1) || kc_buf_append_u32(b, (uint32_t)name_n) ||
                   kc_buf_append(b, name, name_n) || kc_buf_append(b, digest, KC_DIGEST_SIZE)
               ? KCACHE_ENOMEM
               : 0;
}

/* The ids the query returns, in a new array. */
static int ids_of(sqlite3 *conn, const char *sql, int64_t **ids, size_t *n)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    int src = sqlite3_prepare_v2(conn, sql, -1, &st, NULL);
    while (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t *grown = kc_grow(*ids, &cap, *n, sizeof(*grown), 64);
        if (!grown) {
            src = SQLITE_NOMEM;
            break;
        }
        *ids = grown;
        (*ids)[(*n)++] = sqlite3_column_int64(st, 0);
        src = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? SQLITE_OK : src;
}

/* One step's statements, prepared once for every entry. */
enum { FIND_H, PUT_H, SPLIT_H, ROWS_I, FIND_L, PUT_L, PUT_ITEM, DROP_ROWS, SET_L, N_STMTS };
static const char *const share_sql[N_STMTS] = {
    [FIND_H] = "SELECT id FROM header_list WHERE digest = ?1",
    [PUT_H] = "INSERT INTO header_list (digest, size, codec, data) VALUES (?1, ?2, 0, ?3)",
    [SPLIT_H] = "UPDATE entry_info SET key_material = ?2, headers_id = ?3, headers_at = ?4"
                " WHERE id = ?1",
    [ROWS_I] = "SELECT ei.seq, ei.role, ei.name, ei.input_id, i.digest FROM entry_input ei"
               " LEFT JOIN input i ON i.id = ei.input_id WHERE ei.entry_id = ?1 ORDER BY ei.seq",
    [FIND_L] = "SELECT id FROM input_list WHERE digest = ?1",
    [PUT_L] = "INSERT INTO input_list (digest, n) VALUES (?1, ?2)",
    [PUT_ITEM] = "INSERT INTO input_list_item (list_id, seq, role, name, input_id)"
                 " VALUES (?1, ?2, ?3, ?4, ?5)",
    [DROP_ROWS] = "DELETE FROM entry_input WHERE entry_id = ?1 AND seq BETWEEN ?2 AND ?3",
    [SET_L] = "UPDATE entry_info SET inputs_id = ?2, inputs_at = ?3 WHERE id = ?1",
};

static int run(sqlite3_stmt *st)
{
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    return src == SQLITE_DONE || src == SQLITE_ROW ? SQLITE_OK : src;
}

/* The id of the row FIND finds by digest, 0 when none. */
static int find(sqlite3_stmt *st, const uint8_t *digest, int64_t *id)
{
    sqlite3_bind_blob(st, 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    int src = sqlite3_step(st);
    *id = src == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return src == SQLITE_ROW || src == SQLITE_DONE ? SQLITE_OK : src;
}

/* Entry id's header run into header_list; a material that does not parse stays whole. */
static int share_headers(sqlite3_stmt **s, sqlite3 *conn, int64_t id)
{
    sqlite3_stmt *q = NULL;
    int src =
        sqlite3_prepare_v2(conn, "SELECT key_material FROM entry_info WHERE id = ?1", -1, &q, NULL);
    if (src != SQLITE_OK)
        return src;
    sqlite3_bind_int64(q, 1, id);
    src = sqlite3_step(q);
    const uint8_t *m = src == SQLITE_ROW ? sqlite3_column_blob(q, 0) : NULL;
    size_t size = m ? (size_t)sqlite3_column_bytes(q, 0) : 0, at, len;
    uint8_t *rest = NULL;
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        goto out;
    src = SQLITE_OK;
    if (!m || kc_key_header_run(m, size, &at, &len) != 1)
        goto out;
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, m + at, len);
    int64_t list;
    if ((src = find(s[FIND_H], digest, &list)) || list)
        goto split;
    sqlite3_bind_blob(s[PUT_H], 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_int64(s[PUT_H], 2, (sqlite3_int64)len);
    sqlite3_bind_blob64(s[PUT_H], 3, m + at, len, SQLITE_STATIC);
    if ((src = run(s[PUT_H])))
        goto out;
    list = sqlite3_last_insert_rowid(conn);
split:
    if (src)
        goto out;
    if (!(rest = malloc(size - len + 1))) {
        src = SQLITE_NOMEM;
        goto out;
    }
    memcpy(rest, m, at);
    memcpy(rest + at, m + at + len, size - at - len);
    sqlite3_bind_int64(s[SPLIT_H], 1, id);
    sqlite3_bind_blob64(s[SPLIT_H], 2, rest, size - len, SQLITE_STATIC);
    sqlite3_bind_int64(s[SPLIT_H], 3, list);
    sqlite3_bind_int64(s[SPLIT_H], 4, (sqlite3_int64)at);
    src = run(s[SPLIT_H]);
out:
    free(rest);
    sqlite3_finalize(q);
    return src;
}

struct item {
    int64_t seq, input_id;
    int role;
    char *name;
};

static void items_free(struct item *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

/*
 * Entry id's first run of header inputs into an input list. An input row
 * that is missing leaves the entry as it is: the store finds it damaged.
 */
static int share_inputs(sqlite3_stmt **s, sqlite3 *conn, int64_t id)
{
    struct item *v = NULL;
    size_t n = 0, cap = 0;
    kc_buf rec = {0};
    int src = SQLITE_OK, whole = 1;
    sqlite3_bind_int64(s[ROWS_I], 1, id);
    while ((src = sqlite3_step(s[ROWS_I])) == SQLITE_ROW) {
        int role = sqlite3_column_int(s[ROWS_I], 1);
        if (role != 2 && n)
            break;
        if (role != 2)
            continue;
        const void *digest = sqlite3_column_blob(s[ROWS_I], 4);
        const char *name = (const char *)sqlite3_column_text(s[ROWS_I], 2);
        int64_t seq = sqlite3_column_int64(s[ROWS_I], 0);
        if (!digest || sqlite3_column_bytes(s[ROWS_I], 4) != KC_DIGEST_SIZE || !name ||
            (n && seq != v[n - 1].seq + 1)) {
            whole = 0;
            break;
        }
        struct item *grown = kc_grow(v, &cap, n, sizeof(*grown), 64);
        if (!grown || !(grown[n].name = kc_strdup(name))) {
            v = grown ? grown : v;
            src = SQLITE_NOMEM;
            break;
        }
        v = grown;
        v[n].seq = seq;
        v[n].role = role;
        v[n].input_id = sqlite3_column_int64(s[ROWS_I], 3);
        n++;
        if (kc_share_input_record(&rec, role, name, strlen(name), digest)) {
            src = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_reset(s[ROWS_I]);
    if (src != SQLITE_ROW && src != SQLITE_DONE && src != SQLITE_OK)
        goto out;
    src = SQLITE_OK;
    if (!n || !whole)
        goto out;
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, rec.data, rec.size);
    int64_t list;
    if ((src = find(s[FIND_L], digest, &list)))
        goto out;
    if (!list) {
        sqlite3_bind_blob(s[PUT_L], 1, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(s[PUT_L], 2, (sqlite3_int64)n);
        if ((src = run(s[PUT_L])))
            goto out;
        list = sqlite3_last_insert_rowid(conn);
        for (size_t i = 0; i < n && !src; i++) {
            sqlite3_bind_int64(s[PUT_ITEM], 1, list);
            sqlite3_bind_int64(s[PUT_ITEM], 2, (sqlite3_int64)i);
            sqlite3_bind_int(s[PUT_ITEM], 3, v[i].role);
            sqlite3_bind_text(s[PUT_ITEM], 4, v[i].name, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s[PUT_ITEM], 5, v[i].input_id);
            src = run(s[PUT_ITEM]);
        }
        if (src)
            goto out;
    }
    sqlite3_bind_int64(s[SET_L], 1, id);
    sqlite3_bind_int64(s[SET_L], 2, list);
    sqlite3_bind_int64(s[SET_L], 3, v[0].seq);
    if ((src = run(s[SET_L])) || sqlite3_changes(conn) != 1)
        goto out; /* no entry_info row: the rows stay, and the store finds the entry damaged */
    sqlite3_bind_int64(s[DROP_ROWS], 1, id);
    sqlite3_bind_int64(s[DROP_ROWS], 2, v[0].seq);
    sqlite3_bind_int64(s[DROP_ROWS], 3, v[n - 1].seq);
    src = run(s[DROP_ROWS]);
out:
    items_free(v, n);
    kc_buf_free(&rec);
    return src;
}

int kc_share_migrate(sqlite3 *conn)
{
    sqlite3_stmt *s[N_STMTS] = {0};
    int64_t *ids = NULL;
    size_t n = 0;
    int src = SQLITE_OK;
    for (int i = 0; i < N_STMTS && src == SQLITE_OK; i++)
        src = sqlite3_prepare_v2(conn, share_sql[i], -1, &s[i], NULL);
    if (src == SQLITE_OK)
        src = ids_of(conn, "SELECT id FROM entry_info WHERE key_material NOT NULL", &ids, &n);
    for (size_t i = 0; src == SQLITE_OK && i < n; i++)
        src = share_headers(s, conn, ids[i]);
    free(ids);
    ids = NULL;
    if (src == SQLITE_OK)
        src = ids_of(conn, "SELECT DISTINCT entry_id FROM entry_input WHERE role = 2", &ids, &n);
    for (size_t i = 0; src == SQLITE_OK && i < n; i++)
        src = share_inputs(s, conn, ids[i]);
    free(ids);
    for (int i = 0; i < N_STMTS; i++)
        sqlite3_finalize(s[i]);
    return src;
}
