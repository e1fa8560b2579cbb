/*
 * Named counters for the layers above the store (the shared tier's hits,
 * pushes, errors...): kept in the generic `counter` table, so a new counter
 * needs no schema change, and batched with the hits so that counting never
 * takes the write lock on its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/storeint.h"

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
