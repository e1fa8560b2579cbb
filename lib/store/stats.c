/*
 * Stats and counters: what stats reports (totals kept by the statements that
 * add and delete entries, prune.c; counters; this process's pending batch
 * and the hits logged beside the database), the named counters of the
 * layers above, and the usage list per (arch, kind) they share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

static int cmp_usage(const void *a, const void *b)
{
    const kcache_usage *x = a, *y = b;
    if (x->hits != y->hits)
        return x->hits < y->hits ? 1 : -1;
    int c = strcmp(x->arch, y->arch);
    return c ? c : (int)x->kind - (int)y->kind;
}

static int add_usage(kcache_stats *st, size_t *cap, const char *arch, int kind, uint64_t hits,
                     uint64_t misses, uint64_t saved_ns)
{
    int rc = kc_usage_merge(&st->usage, &st->n_usage, cap, arch, kind, hits, misses, saved_ns);
    if (rc)
        return rc;
    st->hits += hits;
    st->misses += misses;
    st->saved_ns += saved_ns;
    return 0;
}

static int add_reason(kcache_stats *st, const char *reason, uint64_t count)
{
    kcache_reason_count *grown =
        kc_realloc(st->uncacheable_reasons, (st->n_uncacheable + 1) * sizeof(*grown));
    if (!grown)
        return KCACHE_ENOMEM;
    st->uncacheable_reasons = grown;
    kcache_reason_count *r = &grown[st->n_uncacheable++];
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    r->count = count;
    st->uncacheable += count;
    return 0;
}

static int cmp_reason(const void *a, const void *b)
{
    const kcache_reason_count *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return strcmp(x->reason, y->reason);
}

static int read_stats(kcache_store *s, kcache_stats *st)
{
    sqlite3_stmt *q;
    size_t cap = 0;
    int rc, src;
    /* One read transaction, so the three queries see one state. */
    if ((rc = kc_db_exec(&s->db, "BEGIN", "reading stats")))
        return rc;
    if ((rc = kc_db_stmt(&s->db, &q, KC_STMT_TOTALS)))
        goto out;
    if ((src = sqlite3_step(q)) == SQLITE_ROW) {
        st->entries = (uint64_t)sqlite3_column_int64(q, 0);
        st->raw_bytes = (uint64_t)sqlite3_column_int64(q, 1);
        st->stored_bytes = (uint64_t)sqlite3_column_int64(q, 2);
    } else if (src != SQLITE_DONE) {
        rc = kc_sqlerr(&s->db, src, "reading stats");
    }
    sqlite3_reset(q);
    if (rc || (rc = kc_db_stmt(&s->db, &q, KC_STMT_COUNTERS)))
        goto out;
    while ((src = sqlite3_step(q)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        uint64_t v = (uint64_t)sqlite3_column_int64(q, 1);
        if (!name)
            continue;
        if (!strcmp(name, "evictions"))
            st->evictions = v;
        else if (!strcmp(name, "corrupt"))
            st->corrupt = v;
        else if (!strcmp(name, "store_failures"))
            st->store_failures = v;
        else if (!strcmp(name, "since"))
            st->since = (int64_t)v;
        else if (!strncmp(name, "uncacheable.", 12) && v && (rc = add_reason(st, name + 12, v)))
            break;
    }
    sqlite3_reset(q);
    if (!rc && src != SQLITE_DONE)
        rc = kc_sqlerr(&s->db, src, "reading stats");
    if (rc || (rc = kc_db_stmt(&s->db, &q, KC_STMT_USAGE)))
        goto out;
    while ((src = sqlite3_step(q)) == SQLITE_ROW) {
        const char *arch = (const char *)sqlite3_column_text(q, 0);
        if ((rc = add_usage(st, &cap, arch ? arch : "", sqlite3_column_int(q, 1),
                            (uint64_t)sqlite3_column_int64(q, 2),
                            (uint64_t)sqlite3_column_int64(q, 3),
                            (uint64_t)sqlite3_column_int64(q, 4))))
            break;
    }
    sqlite3_reset(q);
    if (!rc && src != SQLITE_DONE)
        rc = kc_sqlerr(&s->db, src, "reading stats");
    /* This handle's counts not yet written, and the hits waiting in PATH-hits (hitlog.c). */
    kcache_usage *logged = NULL;
    size_t n_logged = 0, cap_logged = 0;
    if (!rc)
        rc = kc_hitlog_usage(s, &logged, &n_logged, &cap_logged);
    for (size_t i = 0; !rc && i < s->n_usage + n_logged; i++) {
        const kcache_usage *u = i < s->n_usage ? &s->usage[i] : &logged[i - s->n_usage];
        rc = add_usage(st, &cap, u->arch, u->kind, u->hits, u->misses, u->saved_ns);
    }
    free(logged);
    st->corrupt += s->pending_corrupt;
    st->store_failures += s->pending_failures + kc_spill_peek(&s->db);
out:
    sqlite3_exec(s->db.conn, "COMMIT", NULL, NULL, NULL);
    return rc == KCACHE_ENOMEM ? kc_err(s, rc, "out of memory") : rc;
}

/* read_stats from nothing, so that a retry after recovery does not add twice. */
static int read_stats_fresh(kcache_store *s, kcache_stats *st)
{
    free(st->usage);
    free(st->uncacheable_reasons);
    memset(st, 0, sizeof(*st));
    st->version = KCACHE_STATS_VERSION;
    return read_stats(s, st);
}

KCACHE_API int kcache_store_stats(kcache_stats **out, kcache_store *store)
{
    if (!store || !out)
        return store ? kc_err(store, KCACHE_EINVAL, "kcache_store_stats: out is NULL")
                     : KCACHE_EINVAL;
    *out = NULL;
    kcache_stats *st = kc_calloc(1, sizeof(*st));
    if (!st)
        return kc_err(store, KCACHE_ENOMEM, "out of memory");
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, read_stats_fresh(store, st));
    if (!rc) {
        kc_db_disk_usage(&store->db, &st->file_bytes, &st->wal_bytes);
        st->max_size = store->max_size;
        st->schema_version = store->db.schema_version;
    }
    kc_unlock(store);
    if (rc) {
        kcache_stats_free(st);
        return rc;
    }
    if (st->n_usage > 1) /* usage is NULL when empty, which qsort may not be given */
        qsort(st->usage, st->n_usage, sizeof(*st->usage), cmp_usage);
    if (st->n_uncacheable > 1)
        qsort(st->uncacheable_reasons, st->n_uncacheable, sizeof(*st->uncacheable_reasons),
              cmp_reason);
    *out = st;
    return 0;
}

KCACHE_API void kcache_stats_free(kcache_stats *stats)
{
    if (!stats)
        return;
    free(stats->usage);
    free(stats->uncacheable_reasons);
    free(stats);
}

KCACHE_API int kcache_store_zero_stats(kcache_store *store)
{
    if (!store)
        return KCACHE_EINVAL;
    char sql[160];
    snprintf(sql, sizeof(sql),
             "DELETE FROM usage; UPDATE counter SET value = 0 WHERE name <> 'since';"
             " INSERT OR REPLACE INTO counter VALUES ('since', %lld)",
             (long long)kc_now_ms());
    pthread_mutex_lock(&store->lock);
    /* The hits logged beside the database first: zeroed with the rest, not counted after. */
    int rc = kc_flush_locked(store, 1);
    if (!rc)
        rc = kc_db_write_sql(&store->db, sql, "zeroing stats");
    if (!rc) {
        store->n_usage = 0;
        store->pending_corrupt = store->pending_failures = 0;
        kc_spill_take_begin(&store->db); /* and the failures kept beside it */
        kc_spill_take_end(&store->db, 1);
        store->n_counters = 0;
    }
    kc_unlock(store);
    return rc;
}

/*
 * The named counters' entry points: a count queued with the hits (written by
 * the next flush, hitlog.c), and a counter read back with what is still
 * pending. The rows are written by kc_counter_write() below.
 */
void kc_store_count(kcache_store *store, const char *name, uint64_t delta)
{
    if (!store || !delta || strlen(name) >= sizeof(store->counters[0].name))
        return;
    pthread_mutex_lock(&store->lock);
    /* out of memory: one count lost, nothing else */
    (void)kc_counter_merge(&store->counters, &store->n_counters, &store->cap_counters, name, delta);
    kc_maybe_flush_locked(store);
    kc_unlock(store);
}

int kc_counter_merge(struct kc_counter_delta **v, size_t *n, size_t *cap, const char *name,
                     uint64_t delta)
{
    for (size_t i = 0; i < *n; i++) {
        if (!strcmp((*v)[i].name, name)) {
            (*v)[i].value += delta;
            return 0;
        }
    }
    struct kc_counter_delta *grown = kc_grow(*v, cap, *n, sizeof(*grown), 8);
    if (!grown)
        return KCACHE_ENOMEM;
    *v = grown;
    struct kc_counter_delta *c = &grown[(*n)++];
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->value = delta;
    return 0;
}

static int read_counter(kcache_store *s, const char *name, uint64_t *out)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st, KC_STMT_COUNTER_GET);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    *out = src == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return src == SQLITE_ROW || src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "reading counters");
}

KCACHE_API int kcache_store_counter(uint64_t *out, kcache_store *store, const char *name)
{
    KC_CHECK_ARG(store, out && name);
    *out = 0;
    pthread_mutex_lock(&store->lock);
    uint64_t v = 0;
    int rc;
    KC_WITH_RECOVERY(store, rc, read_counter(store, name, &v));
    if (!rc)
        *out = v + kc_counter_pending(store, name) + kc_hitlog_counter(store, name);
    kc_unlock(store);
    return rc;
}

/*
 * Named counters for the layers above the store (the shared tier's hits,
 * pushes, errors...): kept in the generic `counter` table, so a new counter
 * needs no schema change, and batched with the hits so that counting never
 * takes the write lock on its own.
 */
int kc_counter_write(kcache_store *s, const char *name, uint64_t value)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st, KC_STMT_COUNTER_ADD);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)value);
    rc = sqlite3_step(st);
    return rc == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, rc, "recording counters");
}

int kc_counters_write(kcache_store *s)
{
    int rc;
    for (size_t i = 0; i < s->n_counters; i++)
        if ((rc = kc_counter_write(s, s->counters[i].name, s->counters[i].value)))
            return rc;
    return 0;
}

uint64_t kc_counter_pending(const kcache_store *s, const char *name)
{
    for (size_t i = 0; i < s->n_counters; i++)
        if (!strcmp(s->counters[i].name, name))
            return s->counters[i].value;
    return 0;
}

/* The usage list: hits, misses and time saved per (arch, kind). Stats reports
 * one, the pending batch keeps one and the hit log adds its records to one
 * (hitlog.c). */
int kc_usage_merge(kcache_usage **v, size_t *n, size_t *cap, const char *arch, int kind,
                   uint64_t hits, uint64_t misses, uint64_t saved_ns)
{
    kcache_usage *u = NULL;
    for (size_t i = 0; i < *n; i++)
        if ((int)(*v)[i].kind == kind && strcmp((*v)[i].arch, arch) == 0)
            u = &(*v)[i];
    if (!u) {
        kcache_usage *grown = kc_grow(*v, cap, *n, sizeof(*grown), 8);
        if (!grown)
            return KCACHE_ENOMEM;
        *v = grown;
        u = &grown[(*n)++];
        memset(u, 0, sizeof(*u));
        snprintf(u->arch, sizeof(u->arch), "%s", arch);
        u->kind = (kcache_kind)kind;
    }
    u->hits += hits;
    u->misses += misses;
    u->saved_ns += saved_ns;
    return 0;
}
