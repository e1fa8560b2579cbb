/* Leases for single-flight compiles (schema/003_leases.sql). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/storeint.h"

static const char *host_name(void)
{
    static char name[256];
    if (!name[0] && gethostname(name, sizeof(name) - 1) != 0)
        strcpy(name, "localhost");
    return name;
}

/*
 * A lease of another host can only be judged by its heartbeat, and a
 * heartbeat from another clock proves little (a heartbeat in the
 * future held a compile for the full 10 minutes, silently). So such a lease
 * is honoured for a bounded time per key and handle, KCACHE_OTHER_HOST_WAIT
 * milliseconds (default 30 s), and the wait is said at once through the log.
 */
#define KC_OTHER_HOST_WAIT_MS 30000u

static unsigned other_host_wait_ms(void)
{
    /* The one number parser: a value it does not take (-1, 1e99, 0x10) is the default. */
    const char *v = getenv("KCACHE_OTHER_HOST_WAIT");
    uint64_t ms;
    return v && kcache_parse_count(&ms, v, 0, 3600000) == 0 ? (unsigned)ms
                                                             : KC_OTHER_HOST_WAIT_MS;
}

/* Whether another host's live lease on key still holds for this handle. */
static int other_host_holds(kcache_store *s, const kcache_key *key, const char *host)
{
    uint64_t now = kc_mono_ns();
    unsigned bound = other_host_wait_ms();
    if (!s->other_host_since_ns || memcmp(&s->other_host_key, key, sizeof(*key)) != 0) {
        s->other_host_key = *key;
        s->other_host_since_ns = now;
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, key);
        kc_log(s, KCACHE_LOG_WARNING,
               "waiting for host '%s', which is compiling %.16s, for at most %u s "
               "(KCACHE_OTHER_HOST_WAIT, in ms)",
               host, hex, bound / 1000);
    }
    if (now - s->other_host_since_ns < (uint64_t)bound * 1000000u)
        return 1;
    kc_log(s, KCACHE_LOG_WARNING, "host '%s' did not finish within %u s: compiling here",
           host, bound / 1000);
    return 0;
}

static int owner_alive(long long pid, const char *host)
{
    if (strcmp(host, host_name()) != 0)
        return 1; /* another host: only its heartbeat can tell */
    if (pid <= 0)
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static int run(kcache_store *s, const char *sql, const kcache_key *key, int64_t now, int *changes)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db.conn, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)getpid());
        sqlite3_bind_text(st, 3, host_name(), -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, now);
        rc = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return kc_sqlerr(&s->db, rc, "recording a lease");
    if (changes)
        *changes = sqlite3_changes(s->db.conn);
    return 0;
}

static int acquire_locked(kcache_store *s, const kcache_key *key, unsigned stale_ms, int *acquired)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    int64_t now = kc_now_ms();
    sqlite3_stmt *st;
    int src = kc_step_by_key(&st, s, "SELECT pid, host, heartbeat FROM lease WHERE key = ?1", key);
    int held = 0;
    if (src == SQLITE_ROW) {
        /* Types first: reading a column may convert it. */
        int typed = sqlite3_column_type(st, 0) == SQLITE_INTEGER &&
                    sqlite3_column_type(st, 2) == SQLITE_INTEGER;
        const unsigned char *host = sqlite3_column_text(st, 1);
        long long pid = sqlite3_column_int64(st, 0);
        int64_t beat = sqlite3_column_int64(st, 2);
        /*
         * A row that breaks the schema (a NULL a lost -shm left), or whose
         * heartbeat is further ahead than a stale one is behind, is no
         * lease: it is replaced below, never waited for.
         */
        int valid = typed && host && *host && beat <= now + (int64_t)stale_ms;
        held = valid && owner_alive(pid, (const char *)host) && now - beat < (int64_t)stale_ms;
        if (held && strcmp((const char *)host, host_name()) != 0)
            held = other_host_holds(s, key, (const char *)host);
        src = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    if (src != SQLITE_DONE) {
        rc = kc_sqlerr(&s->db, src, "reading a lease");
        goto fail;
    }
    if (!held &&
        (rc = run(s,
                  "INSERT OR REPLACE INTO lease (key, pid, host, heartbeat)"
                  " VALUES (?1, ?2, ?3, ?4)",
                  key, now, NULL)))
        goto fail;
    if ((rc = kc_db_commit(&s->db)))
        return rc;
    *acquired = !held;
    return 0;
fail:
    kc_db_rollback(&s->db);
    return rc;
}

int kc_store_lease_acquire(int *acquired, kcache_store *store,
                                          const kcache_key *key, unsigned stale_ms)
{
    if (!store || !key || !acquired)
        return store ? kc_err(store, KCACHE_EINVAL, "kc_store_lease_acquire: NULL argument")
                     : KCACHE_EINVAL;
    *acquired = 0;
    pthread_mutex_lock(&store->lock);
    int rc = store->db.conn ? acquire_locked(store, key, stale_ms, acquired)
                       : kc_err(store, KCACHE_EIO, "no database");
    kc_unlock(store);
    return rc;
}

int kc_store_lease_renew(kcache_store *store, const kcache_key *key)
{
    if (!store || !key)
        return KCACHE_EINVAL;
    pthread_mutex_lock(&store->lock);
    int rc = store->db.conn ? kc_db_writable(&store->db) : kc_err(store, KCACHE_EIO, "no database");
    if (!rc)
        rc = run(store,
                 "UPDATE lease SET heartbeat = ?4 WHERE key = ?1 AND pid = ?2 AND host = ?3",
                 key, kc_now_ms(), NULL);
    kc_unlock(store);
    return rc;
}

void kc_store_lease_release(kcache_store *store, const kcache_key *key)
{
    if (!store || !key)
        return;
    pthread_mutex_lock(&store->lock);
    if (store->db.conn && kc_db_writable(&store->db) == 0)
        run(store, "DELETE FROM lease WHERE key = ?1 AND pid = ?2 AND host = ?3 AND ?4 = ?4", key,
            0, NULL);
    kc_unlock(store);
}
