/*
 * What goes with an entry, and the totals, written by the statement that
 * deletes it rather than by triggers (schema/006_no_triggers.sql).
 *
 * Every open parses every trigger of the schema, whatever the process does
 * next: the five triggers were half of the schema's parse, 0.54 M of the
 * 2.52 M instructions of a whole `kcache compile` hit (callgrind). So the
 * few statements that delete entries say themselves what goes with them, as
 * sets: the victims are one SELECT of entry ids (with its parameters), and
 * each statement below takes them by that SELECT, children first, the totals
 * before the rows they count are gone. An input, a shared list or a
 * closure goes with the last entry (or list, or manifest) that refers to
 * it. A put adds to the totals in kc_put_rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

/* The input lists only the victims refer to. */
#define GOING_LISTS                                                                                \
    "SELECT f.inputs_id FROM entry_info f WHERE f.id IN (@V) AND f.inputs_id NOT NULL"           \
    " AND NOT EXISTS (SELECT 1 FROM entry_info g WHERE g.inputs_id = f.inputs_id"                \
    " AND g.id NOT IN (@V))"

/* The closures only the victims' manifests refer to. */
#define GOING_CLOSURES                                                                             \
    "SELECT m.closure_id FROM manifest m WHERE m.key IN (SELECT key FROM entry WHERE id IN (@V))" \
    " AND NOT EXISTS (SELECT 1 FROM manifest x WHERE x.closure_id = m.closure_id"                \
    " AND x.key NOT IN (SELECT key FROM entry WHERE id IN (@V)))"

static const char *const cascade_sql[KC_CASCADE_STEPS] = {
    "UPDATE totals SET entries = entries - (SELECT count(*) FROM entry WHERE id IN (@V)),"
    " raw_bytes = raw_bytes - (SELECT coalesce(sum(raw_size), 0) FROM entry WHERE id IN (@V)),"
    " stored_bytes = stored_bytes -"
    " (SELECT coalesce(sum(stored_size), 0) FROM entry WHERE id IN (@V))",
    /* Every entry removed, whatever the reason, counted with the removal (the
     * stress run's books: tests/cli/test_busy.py). */
    "INSERT INTO counter (name, value) SELECT 'entries_removed', count(*) FROM entry"
    " WHERE id IN (@V) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    "DELETE FROM artifact WHERE id IN (@V)",
    /* An input goes when no entry left and no input list left refers to it. */
    "DELETE FROM input WHERE id IN (SELECT input_id FROM entry_input WHERE entry_id IN (@V)"
    " UNION SELECT input_id FROM input_list_item WHERE list_id IN (" GOING_LISTS "))"
    " AND NOT EXISTS (SELECT 1 FROM entry_input x WHERE x.input_id = input.id"
    " AND x.entry_id NOT IN (@V)) AND NOT EXISTS (SELECT 1 FROM input_list_item y"
    " WHERE y.input_id = input.id AND y.list_id NOT IN (" GOING_LISTS "))",
    "DELETE FROM input_list_item WHERE list_id IN (" GOING_LISTS ")",
    "DELETE FROM input_list WHERE id IN (" GOING_LISTS ")",
    "DELETE FROM header_list WHERE id IN (SELECT headers_id FROM entry_info WHERE id IN (@V))"
    " AND NOT EXISTS (SELECT 1 FROM entry_info g WHERE g.headers_id = header_list.id"
    " AND g.id NOT IN (@V))",
    /* After the lists: they are found through the victims' rows. */
    "DELETE FROM entry_info WHERE id IN (@V)",
    "DELETE FROM entry_input WHERE entry_id IN (@V)",
    /* A closure's chunks no other closure holds, its parts, then the closure itself. */
    "DELETE FROM closure_chunk WHERE id IN (SELECT chunk_id FROM closure_part WHERE closure_id IN"
    " (" GOING_CLOSURES ")) AND NOT EXISTS (SELECT 1 FROM closure_part p WHERE"
    " p.chunk_id = closure_chunk.id AND p.closure_id NOT IN (" GOING_CLOSURES "))",
    "DELETE FROM closure_part WHERE closure_id IN (" GOING_CLOSURES ")",
    "DELETE FROM closure WHERE id IN (" GOING_CLOSURES ")",
    "DELETE FROM manifest WHERE key IN (SELECT key FROM entry WHERE id IN (@V))",
    "DELETE FROM entry WHERE @D",
};

/* sql with every @V replaced by victims and @D by where (constant SQL of ours, never user
 * input). */
static char *expand(const char *sql, const char *victims, const char *where)
{
    size_t n = 0, vn = strlen(victims), wn = strlen(where);
    for (const char *p = sql; (p = strchr(p, '@')); p++)
        n++;
    char *out = kc_malloc(strlen(sql) + n * (vn + wn) + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = sql; *p;) {
        if (p[0] == '@' && (p[1] == 'V' || p[1] == 'D')) {
            const char *with = p[1] == 'V' ? victims : where;
            size_t wl = p[1] == 'V' ? vn : wn;
            memcpy(o, with, wl);
            o += wl;
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

int kc_cascade_prepare(kcache_store *s, struct kc_cascade *c, const char *victims,
                       const char *where)
{
    memset(c, 0, sizeof(*c));
    char in_victims[512];
    if (!where) {
        snprintf(in_victims, sizeof(in_victims), "id IN (%s)", victims);
        where = in_victims;
    }
    for (int i = 0; i < KC_CASCADE_STEPS; i++) {
        char *sql = expand(cascade_sql[i], victims, where);
        if (!sql) {
            kc_cascade_finalize(c);
            return kc_err(s, KCACHE_ENOMEM, "out of memory");
        }
        int src = sqlite3_prepare_v2(s->db.conn, sql, -1, &c->st[i], NULL);
        free(sql);
        if (src != SQLITE_OK) {
            kc_cascade_finalize(c);
            return kc_sqlerr(&s->db, src, "preparing a statement that deletes entries");
        }
    }
    return 0;
}

int kc_cascade_run(kcache_store *s, struct kc_cascade *c, kc_cascade_bind_fn bind,
                   const void *ctx, int64_t *deleted)
{
    for (int i = 0; i < KC_CASCADE_STEPS; i++) {
        sqlite3_stmt *st = c->st[i];
        bind(st, ctx);
        int src = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        if (src != SQLITE_DONE)
            return kc_sqlerr(&s->db, src, "deleting entries");
    }
    if (deleted)
        *deleted = sqlite3_changes(s->db.conn); /* the last statement's: entries */
    return 0;
}

void kc_cascade_finalize(struct kc_cascade *c)
{
    for (int i = 0; i < KC_CASCADE_STEPS; i++) {
        sqlite3_finalize(c->st[i]);
        c->st[i] = NULL;
    }
}

int kc_cascade_once(kcache_store *s, const char *victims, const char *where,
                    kc_cascade_bind_fn bind, const void *ctx, int64_t *deleted)
{
    struct kc_cascade c;
    int rc = kc_cascade_prepare(s, &c, victims, where);
    if (!rc)
        rc = kc_cascade_run(s, &c, bind, ctx, deleted);
    kc_cascade_finalize(&c);
    return rc;
}

static void bind_key(sqlite3_stmt *st, const void *ctx)
{
    sqlite3_bind_blob(st, 1, ctx, KCACHE_KEY_SIZE, SQLITE_STATIC);
}

int kc_delete_key(kcache_store *s, const kcache_key *key, int64_t *deleted)
{
    *deleted = 0;
    /* Most puts replace nothing: one lookup before preparing the whole cascade. */
    sqlite3_stmt *q = NULL;
    int src = sqlite3_prepare_v2(s->db.conn, "SELECT 1 FROM entry WHERE key = ?1", -1, &q, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_blob(q, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        src = sqlite3_step(q);
    }
    sqlite3_finalize(q);
    if (src == SQLITE_DONE)
        return 0;
    if (src != SQLITE_ROW)
        return kc_sqlerr(&s->db, src, "preparing a statement that deletes an entry");
    /* The row itself by its key, as the lookup found it: a damaged key index may
     * lead to a row of another key, which must go with it (store.c, get). */
    return kc_cascade_once(s, "SELECT id FROM entry WHERE key = ?1", "key = ?1", bind_key,
                           key->bytes, deleted);
}

int kc_closures_collect(kcache_store *s, const char *sql_ids, const kcache_key *base,
                        int64_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    size_t cap = 0;
    int src = sqlite3_prepare_v2(s->db.conn, sql_ids, -1, &q, NULL);
    if (src == SQLITE_OK)
        sqlite3_bind_blob(q, 1, base->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    while (src == SQLITE_OK && (src = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t *grown = kc_grow(*ids, &cap, *n, sizeof(*grown), 8);
        if (!grown) {
            sqlite3_finalize(q);
            return kc_err(s, KCACHE_ENOMEM, "out of memory");
        }
        *ids = grown;
        (*ids)[(*n)++] = sqlite3_column_int64(q, 0);
        src = SQLITE_OK;
    }
    sqlite3_finalize(q);
    return src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "reading include closures");
}

int kc_closures_drop_unused(kcache_store *s, const int64_t *ids, size_t n)
{
    if (!n)
        return 0;
    /* The closure if unused; then, if it went, its chunks no other closure holds, its parts. */
    static const char *const sql[] = {
        "DELETE FROM closure WHERE id = ?1 AND NOT EXISTS"
        " (SELECT 1 FROM manifest WHERE closure_id = ?1)",
        "DELETE FROM closure_chunk WHERE id IN (SELECT chunk_id FROM closure_part"
        " WHERE closure_id = ?1) AND NOT EXISTS (SELECT 1 FROM closure_part p"
        " WHERE p.chunk_id = closure_chunk.id AND p.closure_id <> ?1)",
        "DELETE FROM closure_part WHERE closure_id = ?1",
    };
    sqlite3_stmt *q[KC_ARRAY_SIZE(sql)] = {NULL};
    int src = SQLITE_OK;
    for (size_t k = 0; src == SQLITE_OK && k < KC_ARRAY_SIZE(sql); k++)
        src = sqlite3_prepare_v2(s->db.conn, sql[k], -1, &q[k], NULL);
    for (size_t i = 0; src == SQLITE_OK && i < n; i++) {
        for (size_t k = 0; src == SQLITE_OK && k < KC_ARRAY_SIZE(sql); k++) {
            sqlite3_bind_int64(q[k], 1, ids[i]);
            src = sqlite3_step(q[k]);
            sqlite3_reset(q[k]);
            if (src == SQLITE_DONE)
                src = k == 0 && sqlite3_changes(s->db.conn) == 0 ? SQLITE_DONE : SQLITE_OK;
        }
        if (src == SQLITE_DONE) /* still in use */
            src = SQLITE_OK;
    }
    for (size_t k = 0; k < KC_ARRAY_SIZE(sql); k++)
        sqlite3_finalize(q[k]);
    return src == SQLITE_OK ? 0 : kc_sqlerr(&s->db, src, "dropping include closures");
}
