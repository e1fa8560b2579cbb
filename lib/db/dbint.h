/* What the files of db/ share and nothing above it sees. */
#ifndef KC_DBINT_H
#define KC_DBINT_H

#include "db/db.h"

/* identify.c: what the file at the path is. */
enum kc_file_kind { KC_NEW, KC_OURS, KC_FOREIGN, KC_DAMAGED };
/* From the header alone, without SQLite writing anything. */
enum kc_file_kind kc_db_peek(struct kc_db *db);
/* Through the open connection; reads only. */
enum kc_file_kind kc_db_classify(struct kc_db *db, int64_t *version, int *sqlite_rc);
int kc_db_foreign_error(struct kc_db *db);
/* Whether the file read alone (no WAL, no -shm) is sound although its connection said damaged. */
int kc_db_file_itself_sound(struct kc_db *db);
/* Whether the file and its WAL, read together afresh, are damaged: the WAL is another file's. */
int kc_db_wal_foreign(struct kc_db *db);

/*
 * Waiting out another process's lock by hand, for at most `ms` (conn.c).
 * SQLite calls the busy handler only where waiting cannot deadlock: a
 * connection that has read and now wants to write (BEGIN IMMEDIATE racing a
 * writer, or a switch to WAL) is answered SQLITE_BUSY at once, and the caller
 * tries again here. kc_db_wait_more() sleeps a little longer each time and
 * returns 0 once the time is up.
 */
struct kc_db_wait {
    uint64_t deadline_ns;
    unsigned pause_us;
};
void kc_db_wait_init(struct kc_db_wait *w, unsigned ms);
int kc_db_wait_more(struct kc_db_wait *w);

/* share.c: moves the lists the entries of a file share into schema 8's tables (SQLite's code). */
int kc_share_migrate(sqlite3 *conn);

/* steps.c: runs schema step `step` (version step to step + 1); SQLite's code. */
int kc_schema_step(sqlite3 *conn, int step);
/*
 * Rewrites objects' text with `sql` (UPDATEs of sqlite_schema) as step
 * `step`, under the guards steps.c describes; kc_schema_step() passes the
 * step's own SQL, the tests a wrong one, to see the guard undo it.
 */
int kc_schema_rewrite(sqlite3 *conn, int step, const char *sql);

/* db.c: one attempt at opening; *damaged when the file should be set aside. */
int kc_db_open_once(struct kc_db *db, int *damaged);

/* recovery.c: moves the file this connection opened (and its WAL) aside. */
int kc_db_quarantine(struct kc_db *db, const char *why, int force);

#endif
