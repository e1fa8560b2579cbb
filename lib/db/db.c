/*
 * One attempt at opening the file: connecting, telling what is there,
 * configuring the connection and migrating the schema.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/alone.h"
#include "db/dbint.h"
#include "db/schema.h"

/* After a checkpoint, a WAL larger than this is truncated back to it. */
#define KC_WAL_SIZE_LIMIT (4 << 20)
/* Pages of WAL after which a commit checkpoints (SQLite's default: 1000). */
#define KC_WAL_AUTOCHECKPOINT 128
/* How much of the file a connection maps (address space, not memory; kc_db_map()). */
#define KC_MMAP_SIZE (256ll << 20)

static int set_identity(struct kc_db *db)
{
    struct stat st;
    if (stat(db->path, &st) != 0)
        return kc_db_err(db, KCACHE_EIO, "cannot examine %s: %s", db->path, strerror(errno));
    db->dev = st.st_dev;
    db->ino = st.st_ino;
    return 0;
}

static int apply_steps(struct kc_db *db, int from, int to)
{
    for (int v = from; v < to; v++) {
        int src = kc_schema_step(db->conn, v);
        if (src != SQLITE_OK)
            return kc_sqlerr(db, src, "migrating the schema");
    }
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", to);
    return kc_db_exec(db, sql, "migrating the schema");
}

/*
 * Brings the file to `target` in one transaction. The version is read again
 * under the write lock: another process may have migrated it meanwhile.
 */
static int migrate(struct kc_db *db, int target)
{
    int rc = kc_db_begin_write(db);
    if (rc)
        return rc;
    int src;
    int64_t app = kc_pragma_int(db->conn, "PRAGMA application_id", &src);
    int64_t version = src ? 0 : kc_pragma_int(db->conn, "PRAGMA user_version", &src);
    int64_t objects = src ? 0 : kc_pragma_int(db->conn, "SELECT count(*) FROM sqlite_schema", &src);
    if (src) {
        rc = kc_sqlerr(db, src, "reading the schema version");
        goto fail;
    }
    if (app == 0 && version == 0 && objects == 0) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA application_id = %d", KC_APPLICATION_ID);
        if ((rc = kc_db_exec(db, sql, "creating the database")))
            goto fail;
    } else if (app != KC_APPLICATION_ID) {
        rc = kc_db_err(db, KCACHE_EFOREIGN, "%s is not a kcache database", db->path);
        goto fail;
    }
    if (version < target) {
        if ((rc = apply_steps(db, (int)version, target)))
            goto fail;
        if (version == 0) {
            char sql[96];
            snprintf(sql, sizeof(sql), "INSERT INTO counter VALUES ('since', %lld)",
                     (long long)kc_now_ms());
            if ((rc = kc_db_exec(db, sql, "creating the database")))
                goto fail;
        }
    }
    if ((rc = kc_db_commit(db)))
        return rc;
    db->schema_version = version < target ? target : (int)version;
    return 0;
fail:
    kc_db_rollback(db);
    return rc;
}

int kc_db_migrate_to(struct kc_db *db, int version)
{
    return migrate(db, version);
}

static int connect(struct kc_db *db)
{
    db->mapped = 0;
    /* NOFOLLOW: a link planted after kc_owner_check() looked is refused, not written through. */
    int flags = (db->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
                SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE |
                (db->any_owner ? 0 : SQLITE_OPEN_NOFOLLOW);
    /*
     * A bundle (any owner, read-only) is complete when it appears (written
     * aside, then renamed) and never changes: read immutable, it takes no
     * lock and makes no file beside it, so it can be read where locks do not
     * reach, a shared tier's segment on NFS or Lustre among them.
     */
    int rc = db->any_owner && db->read_only ? kc_sqlite_open_immutable(&db->conn, db->path)
                                            : kc_sqlite_open(&db->conn, db->path, flags);
    if (rc != SQLITE_OK)
        return kc_sqlerr(db, rc, "opening the cache");
    kc_db_busy(db, db->busy_timeout_ms);
    return 0;
}

/*
 * One try at switching the file to WAL if it is not yet: SQLITE_ROW with
 * *wal set or not, or SQLite's error.
 */
static int wal_once(struct kc_db *db, int *wal)
{
    sqlite3_stmt *st = NULL;
    *wal = 0;
    int src = sqlite3_prepare_v2(db->conn, "PRAGMA journal_mode", -1, &st, NULL);
    if (src == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
        strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0) {
        sqlite3_finalize(st);
        *wal = 1;
        return SQLITE_ROW;
    }
    sqlite3_finalize(st);
    st = NULL;
    src = sqlite3_prepare_v2(db->conn, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_step(st);
    const unsigned char *mode = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    *wal = mode && strcmp((const char *)mode, "wal") == 0;
    sqlite3_finalize(st);
    return src;
}

/*
 * Switches the file to WAL if it is not yet, or says why it cannot be. The
 * switch wants the file to itself, and SQLite answers SQLITE_BUSY at once
 * when another process holds it (it has read the header, and a reader's
 * wait for a writer could deadlock): many processes opening a new cache
 * together all meet here, so the wait is ours (kc_db_wait_more).
 */
static int ensure_wal(struct kc_db *db)
{
    struct kc_db_wait wait;
    kc_db_wait_init(&wait, db->busy_timeout_ms);
    int wal, src;
    while ((src = wal_once(db, &wal)) != SQLITE_ROW && (src & 0xff) == SQLITE_BUSY &&
           kc_db_wait_more(&wait))
        ;
    if (wal)
        return 0;
    return src == SQLITE_ROW || src == SQLITE_DONE
               ? kc_db_err(db, KCACHE_ENOTSUP,
                           "%s cannot use WAL mode here: set KCACHE_DIR to a local directory",
                           db->path)
               : kc_sqlerr(db, src, "switching to WAL");
}

static int configure(struct kc_db *db)
{
    int rc;
    char sql[128];
    if (!db->read_only) {
        /*
         * A hit is a whole process for the CLI, so opening and closing must
         * not write or sync when nothing changed. Pragmas that would write
         * are issued only when the file does not have the setting yet, and
         * the WAL survives a close without a checkpoint: deleting and
         * recreating it cost every hit three fsyncs. The WAL stays bounded
         * (autocheckpoint, journal_size_limit) and counts toward the cap.
         */
        int persist = 1;
        sqlite3_file_control(db->conn, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
        sqlite3_db_config(db->conn, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
        /*
         * On a new file this must precede the first table. The header tells a
         * file that has it already; the pragma would parse the schema first.
         * A header read before a WAL changed it can only be one that had the
         * setting: it is never turned off.
         */
        if (!db->incremental_vacuum &&
            kc_pragma_int(db->conn, "PRAGMA auto_vacuum", &rc) != 2 && rc == SQLITE_OK &&
            (rc = kc_db_exec(db, "PRAGMA auto_vacuum = INCREMENTAL", "configuring the database")))
            return rc;
        /*
         * A file whose header says WAL is opened in WAL mode by every
         * connection (kcache never leaves it); asking would parse the whole
         * schema. If the WAL cannot be used here, the first read says so.
         */
        if (!db->header_wal && (rc = ensure_wal(db)))
            return rc;
        /*
         * Frames not yet in the file are what a checkpoint must grow the file
         * by: held to KC_WAL_AUTOCHECKPOINT pages, a full disk's checkpoint
         * fits in the reserve (db.h) with room left for a tight prune's steps.
         */
        snprintf(sql, sizeof(sql), "PRAGMA wal_autocheckpoint = %d", KC_WAL_AUTOCHECKPOINT);
        if ((rc = kc_db_exec(db, sql, "configuring the database")))
            return rc;
        snprintf(sql, sizeof(sql), "PRAGMA journal_size_limit = %d", KC_WAL_SIZE_LIMIT);
        if ((rc = kc_db_exec(db, sql, "configuring the database")))
            return rc;
    }
    return kc_db_exec(db,
                      "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF;"
                      "PRAGMA trusted_schema = OFF",
                      "configuring the database");
}

/*
 * A connection reads through pread() until it has served an artifact, then
 * maps the file (PRAGMA mmap_size): a mapped page is read without a copy, which
 * makes the warm hits of a handle kept open markedly faster (most of all for
 * entries stored raw), but a fresh process pays for setting the mapping up and
 * tearing it down, and a page missing from the page cache is read through the
 * mapping with the device's whole read-around: 8 MiB a fault on a disk whose
 * read_ahead_kb says so, 40 MB for one cold hit (30 ms, against about 1 ms
 * through pread(), whose read-ahead grows only on sequential reads). A
 * process that makes one hit, the CLI's case, never maps; one that keeps its
 * handle maps from its second. The figures: doc/design.md, The store. Nothing
 * is written through the mapping (SQLite writes with write()). A failure only
 * leaves the connection reading through pread(), which is as correct.
 */
void kc_db_map(struct kc_db *db)
{
    if (!db->conn || db->mapped)
        return;
    db->mapped = 1;
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA mmap_size = %lld", (long long)KC_MMAP_SIZE);
    sqlite3_exec(db->conn, sql, NULL, NULL, NULL);
}

/*
 * A new cache file is made whole under a name of its own (PATH.new-PID-XXXXXX:
 * 0600 from its first byte, the header's auto_vacuum and WAL mode, the
 * schema, all checkpointed into the file) and only then linked to PATH. A
 * creation killed half-way leaves nothing at PATH: made in place, the file
 * held a schema written with a rollback journal before the switch to WAL,
 * and the hot journal a kill left made every read-only command fail ("is
 * read-only") until a writer came by. link() and not rename(): of processes
 * creating the cache at once, the first to link wins and the others open its
 * file; rename() would replace a cache another had begun to fill.
 */
#define KC_DB_NEW ".new-"

/* Removes what creations of processes no longer alive left (PATH.new-PID-*). */
static void trim_new_files(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096], prefix[600];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(prefix, sizeof(prefix), "%s" KC_DB_NEW, slash ? slash + 1 : path);
    size_t plen = strlen(prefix);
    DIR *d = opendir(*dir ? dir : "/");
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, prefix, plen) != 0)
            continue;
        char *end;
        long pid = strtol(de->d_name + plen, &end, 10);
        if (end == de->d_name + plen || *end != '-' || pid <= 0 || kill((pid_t)pid, 0) == 0 ||
            errno != ESRCH)
            continue;
        char victim[4800];
        snprintf(victim, sizeof(victim), "%s/%s", dir, de->d_name);
        unlink(victim);
    }
    closedir(d);
}

static void unlink_with_sidecars(const char *path)
{
    static const char *const sfx[] = {KC_DB_WAL, KC_DB_SHM, KC_DB_JOURNAL, ""};
    char name[4200];
    for (size_t i = 0; i < KC_ARRAY_SIZE(sfx); i++)
        if (kc_db_sidecar(name, sizeof(name), path, sfx[i]) == 0)
            unlink(name);
}

/* Makes the new file at tmp, under db's own settings; the connection is closed after. */
static int build_new_file(struct kc_db *db, char *tmp)
{
    char *path = db->path, *wal = db->wal_path, tmp_wal[4300];
    snprintf(tmp_wal, sizeof(tmp_wal), "%s" KC_DB_WAL, tmp);
    db->path = tmp;
    db->wal_path = tmp_wal;
    int rc = connect(db);
    if (!rc && !(rc = configure(db)))
        rc = migrate(db, kc_schema_version);
    kc_db_close(db); /* checkpoints: everything is in the file */
    db->path = path;
    db->wal_path = wal;
    return rc;
}

/*
 * An empty file at PATH is what an older kcache's creation killed before its
 * first table left, perhaps with a hot journal: it is replaced only when no
 * other handle has the cache open.
 */
static int clear_empty_leftover(struct kc_db *db)
{
    struct stat st;
    if (lstat(db->path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 0)
        return 0;
    if (!kc_alone_begin(db))
        return -1;
    if (lstat(db->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
        unlink_with_sidecars(db->path);
    kc_alone_end(db);
    return 0;
}

static int create_whole(struct kc_db *db)
{
    if (clear_empty_leftover(db) != 0)
        return 0; /* others have it open: it is made in place, as they do */
    trim_new_files(db->path);
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s" KC_DB_NEW "%ld-XXXXXX", db->path, (long)getpid());
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return kc_db_err(db, KCACHE_EIO,
                         "cannot create %s: %s (set KCACHE_DIR to a writable directory)",
                         db->path, strerror(errno));
    close(fd);
    int rc = build_new_file(db, tmp);
    if (!rc) {
        char journal[4200];
        snprintf(journal, sizeof(journal), "%s" KC_DB_JOURNAL, db->path);
        /* A journal without its file is no cache's: left, it would be rolled back into ours. */
        if (lstat(db->path, &(struct stat){0}) != 0)
            unlink(journal);
        if (link(tmp, db->path) != 0 && errno != EEXIST)
            rc = kc_db_err(db, KCACHE_EIO,
                           "cannot create %s: %s (set KCACHE_DIR to a writable directory)",
                           db->path, strerror(errno));
    }
    unlink_with_sidecars(tmp);
    return rc;
}

int kc_db_open_once(struct kc_db *db, int *damaged)
{
    int rc;
    *damaged = 0;
    db->incremental_vacuum = db->header_wal = 0;
    struct stat st;
    int exists = stat(db->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
    if (!exists && !db->read_only) {
        if ((rc = create_whole(db)))
            return rc;
        exists = stat(db->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
        /* Not made whole (others had an empty leftover open): made in place, empty. */
        if (!exists) {
            int fd = open(db->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd >= 0)
                close(fd);
        }
    }
    /* Connected first, so that the peek reads through this connection (recovery.c). */
    if ((rc = connect(db)) || (rc = set_identity(db)))
        return rc;
    switch (exists ? kc_db_peek(db) : KC_NEW) {
    case KC_DAMAGED:
        *damaged = 1;
        return kc_db_err(db, KCACHE_ECORRUPT, "%s is damaged: not an SQLite database", db->path);
    case KC_FOREIGN:
        return kc_db_foreign_error(db);
    case KC_NEW:
    case KC_OURS:
        break;
    }
    int64_t version;
    int src;
    switch (kc_db_classify(db, &version, &src)) {
    case KC_DAMAGED:
        *damaged = 1;
        return kc_db_err(db, KCACHE_ECORRUPT, "%s is damaged: %s", db->path,
                         src ? sqlite3_errstr(src) : "truncated");
    case KC_FOREIGN:
        if (src)
            return kc_sqlerr(db, src, "reading the cache");
        return kc_db_foreign_error(db);
    case KC_NEW:
        if (db->read_only)
            return kc_db_err(db, KCACHE_ENOTFOUND, "%s holds no cache yet", db->path);
        break;
    case KC_OURS:
        break;
    }
    db->schema_version = (int)version;
    if (version > kc_schema_version) {
        /* Serve what this build can read; refuse every write. */
        db->newer_schema = 1;
        kc_db_log(db, KCACHE_LOG_WARNING,
                  "%s was written by a newer kcache (schema %lld); reading only: upgrade kcache",
                  db->path, (long long)version);
        return kc_db_exec(db, "PRAGMA trusted_schema = OFF", "configuring the database");
    }
    /* The first pragma that parses the schema may be the one to find it damaged. */
    if ((rc = configure(db))) {
        if (rc == KCACHE_ECORRUPT)
            *damaged = 1;
        return rc;
    }
    if (!db->read_only && version < kc_schema_version) {
        rc = migrate(db, kc_schema_version);
        if (rc == KCACHE_ECORRUPT)
            *damaged = 1;
        return rc;
    }
    return 0;
}
