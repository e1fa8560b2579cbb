/*
 * The SQLite file under the store: one connection to it and what that
 * connection needs (the files beside it, whose it is, whether another handle
 * has it open, setting a damaged one aside). The store keeps the entries;
 * this is everything of the file that is not an entry. The one header of
 * db/ that the layers above may include.
 *
 * A struct kc_db is not thread-safe: its owner holds a lock around every call.
 */
#ifndef KC_DB_H
#define KC_DB_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "db/schema.h"
#include "util/common.h"

/* The files SQLite and kcache make beside the database, spelled here only. */
#define KC_DB_WAL "-wal"
#define KC_DB_SHM "-shm"
#define KC_DB_LOCK "-lock"
#define KC_DB_JOURNAL "-journal"
/* Not the file's: the store's hits waiting for the next write (store/hitlog.c). */
#define KC_DB_HITS "-hits"

struct kc_db {
    sqlite3 *conn;  /* NULL when closed, or after a recovery could not reopen */
    char *path;     /* owned; set by the owner before kc_db_open() */
    char *wal_path; /* path + KC_DB_WAL, made by kc_db_open() */
    dev_t dev;      /* identity of the file this connection opened, so that */
    ino_t ino;      /* recovery never sets aside a file someone else made */
    unsigned busy_timeout_ms;
    unsigned busy_wait_ms;   /* the wait kc_db_busy() set now (conn.c) */
    uint64_t busy_since_ns;  /* when the current wait began */
    int read_only;    /* asked for */
    int no_create;    /* open only a database that exists */
    int any_owner;    /* a bundle: whoever owns the file (owner.c) */
    int lock_fd;      /* PATH-lock, held shared while open (alone.c); -1: none */
    int spill_held;   /* this flush holds the failures kept in PATH-lock */
    int newer_schema; /* the file is newer than this build: no writes */
    int incremental_vacuum; /* the file's header says auto_vacuum = INCREMENTAL (kc_db_peek) */
    int header_wal;         /* the file's header says journal_mode = WAL (kc_db_peek) */
    int schema_version;
    int replaced_damaged;      /* kc_db_open() set a damaged file aside and began anew */
    int wrote;                 /* a write transaction of this connection committed a change */
    int changes_at_begin;      /* sqlite3_total_changes() when it began */
    int mapped;                /* this connection maps the file (kc_db_map) */
    uint64_t index_damaged_ns; /* when the file was last found sound behind a damaged -shm */

    /* The owner's statements, prepared once per connection (kc_db_stmt()). */
    const char *const *stmt_sql;
    sqlite3_stmt **stmts;
    size_t n_stmts;

    kcache_log_fn log;
    void *log_userdata;
    kc_logq logq; /* said under the owner's lock, delivered once it is released */
    const void *msg_owner; /* the handle a thread's last message is noted on */
    char errmsg[KC_ERRMSG_SIZE];
};

/* Sets db's message (one line) and notes it for this thread; returns code. */
int kc_db_err(struct kc_db *db, int code, const char *fmt, ...) KC_PRINTF(3, 4);
int kc_db_verr(struct kc_db *db, int code, const char *fmt, va_list ap) KC_PRINTF(3, 0);
/*
 * Queues a message for the log callback (none: dropped). The owner calls it
 * under its lock and delivers db->logq once the lock is released
 * (util/common.h: kc_logq), so the callback may call the owner again.
 */
void kc_db_log(struct kc_db *db, int level, const char *fmt, ...) KC_PRINTF(3, 4);
/* Maps an SQLite result to a status and sets a message naming what failed. */
int kc_sqlerr(struct kc_db *db, int sqlite_rc, const char *what);

/* path + suffix (KC_DB_WAL...) into buf; 0, or -1 when it does not fit. */
int kc_db_sidecar(char *buf, size_t size, const char *path, const char *suffix);
/* Bytes of the database file and of its WAL on disk. */
void kc_db_disk_usage(struct kc_db *db, uint64_t *file_bytes, uint64_t *wal_bytes);

/*
 * Opens db->path (made, with its directory, unless read-only or no_create),
 * configured and migrated to this build's schema. A damaged file is set aside
 * and a new one begun (db->replaced_damaged). lock_fd must be -1 before.
 */
int kc_db_open(struct kc_db *db);
/*
 * Empties the WAL into the file when this connection wrote to it, or when it
 * is past KC_WAL_KEEP, if nobody else is using it (never waits): the next
 * process to open the file then has nothing to replay. kc_db_close() does it;
 * a process that keeps its connection until exit calls it itself.
 */
void kc_db_settle(struct kc_db *db);
/*
 * Called once an artifact has been served: the connection's later reads go
 * through a mapping of the file (db.c says why not its first).
 */
void kc_db_map(struct kc_db *db);
/* Closes the connection (statements finalized); the handle can be reopened. */
void kc_db_close(struct kc_db *db);
/* kc_db_close(), the lock file, and path: what kc_db_open() and the owner gave. */
void kc_db_free(struct kc_db *db);

/* Opens a connection that nothing in the file can make run code; SQLite's code. */
int kc_sqlite_open(sqlite3 **out, const char *path, int flags);
/* Read-only, no locks, no file made beside path (immutable=1); SQLite's code. */
int kc_sqlite_open_immutable(sqlite3 **out, const char *path);
/*
 * How long a statement of this connection waits for another process's lock
 * (0: not at all), polling every 2 ms at most (conn.c). SQLite's own busy
 * timeout sleeps up to 100 ms between tries: on a busy cache a waiter kept
 * waking while some other writer held the lock and missed every gap between
 * holds, and failed after 5 s although no hold lasted half a second.
 */
void kc_db_busy(struct kc_db *db, unsigned ms);
/* A PRAGMA or SELECT of one integer on db; *rc_out is SQLite's result. */
int64_t kc_pragma_int(sqlite3 *db, const char *sql, int *rc_out);

/* Statement `which` of db->stmt_sql, prepared on first use, reset and unbound. */
int kc_db_stmt(struct kc_db *db, sqlite3_stmt **out, int which);
int kc_db_exec(struct kc_db *db, const char *sql, const char *what);
/* kc_db_exec() in a write transaction of its own. */
int kc_db_write_sql(struct kc_db *db, const char *sql, const char *what);
/* 0, or KCACHE_EVERSION / KCACHE_EREADONLY with a message. */
int kc_db_writable(struct kc_db *db);
int kc_db_begin_write(struct kc_db *db);
/* Checkpoints and truncates the WAL, waiting at most wait_ms for others (conn.c); SQLite's code. */
int kc_db_checkpoint(struct kc_db *db, unsigned wait_ms);
int kc_db_commit(struct kc_db *db);
void kc_db_rollback(struct kc_db *db);
/* Migrates an open handle's file to `version` (tests build older files with it). */
/*
 * Appends one input of a shared input list to b, as the list's digest
 * covers it (share.c): role, name and the digest of the input's bytes.
 */
int kc_share_input_record(kc_buf *b, int role, const char *name, size_t name_n,
                          const uint8_t digest[32]);
int kc_db_migrate_to(struct kc_db *db, int version);
/* Our schema's objects at `version`, built in memory from schema/ itself (a bundle is
 * compared with it). SQLite's code; *out is closed by the caller. */
int kc_db_schema_reference(sqlite3 **out, int version);
/*
 * Whether db holds exactly ref's objects (type, name, table, text; SQLite's
 * statistics tables aside). If not, what[] says the first that differs.
 */
int kc_db_same_objects(sqlite3 *db, sqlite3 *ref, char *what, size_t what_size);

/* recovery.c */
/* SQLite's quick_check: 1 sound, 0 damaged, -1 could not tell; why says what it found. */
int kc_db_quick_check(struct kc_db *db, char *why, size_t why_size);
/* The full check, which also sees an index that disagrees with its table: 1, 0 or -1 as
 * kc_db_quick_check(). */
int kc_db_integrity_check(struct kc_db *db);
/* Sets the file aside after SQLite reported it corrupt and starts a new one. */
int kc_db_recover(struct kc_db *db, const char *why);
/*
 * Sets the file aside whatever it holds and starts a new one at once (kcache
 * clear of a damaged cache: the user asked for it empty). Other processes
 * keep the old file until they reopen.
 */
int kc_db_replace(struct kc_db *db, const char *why);
/*
 * Removes the file, its WAL and -shm, and starts a new one (kcache clear on
 * a disk with no room for the deletes: removing needs none). Other processes
 * keep the old file until they reopen.
 */
int kc_db_start_over(struct kc_db *db);
/* Turns a failure SQLite reported as something else (disk full) into
 * KCACHE_ECORRUPT when the file turns out to be damaged; else returns rc. */
int kc_db_classify_failure(struct kc_db *db, int rc);

/*
 * alone.c: the space PATH-lock holds for a prune on a full disk, given up by
 * kc_db_reserve_release() (1 when it freed some). What it must cover,
 * measured on a full 6 MiB tmpfs: the checkpoint of the frames the WAL holds
 * (the file grows by at most KC_WAL_AUTOCHECKPOINT pages, db.c: 512 KiB),
 * then one step of a tight prune (store/prune.c): 73 KiB for 32 evicted
 * entries of 64 KiB, 209 KiB for 64 pages handed back. A small file needs
 * less: a checkpoint and a prune write no more pages than the file and its
 * WAL hold. So the reserve is a quarter of them when the handle opens,
 * within [KC_DB_RESERVE_MIN, KC_DB_RESERVE]: a fixed 1 MiB was 30% of the
 * cache directory of CuPy's 295 kernels.
 */
#define KC_DB_RESERVE (UINT64_C(1) << 20)
#define KC_DB_RESERVE_MIN (UINT64_C(256) << 10)
int kc_db_reserve_release(struct kc_db *db);

/* alone.c: store failures kept in PATH-lock when the database had no room. */
void kc_spill_add(struct kc_db *db, uint64_t n);
uint64_t kc_spill_peek(struct kc_db *db);
/* Takes the kept count for a flush (0 when another holds it); end zeroes it if taken. */
uint64_t kc_spill_take_begin(struct kc_db *db);
void kc_spill_take_end(struct kc_db *db, int taken);

#endif
