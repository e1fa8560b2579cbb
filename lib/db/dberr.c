/*
 * The file's messages: what failed, said once in one line, and the log; and
 * the files beside the database, whose sizes the messages report. Below
 * everything else of db/ and of the store, which all report through here.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "db/db.h"

int kc_db_verr(struct kc_db *db, int code, const char *fmt, va_list ap)
{
    vsnprintf(db->errmsg, sizeof(db->errmsg), fmt, ap);
    for (char *p = db->errmsg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    kc_errmsg_note(db->msg_owner, db->errmsg);
    return code;
}

int kc_db_err(struct kc_db *db, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kc_db_verr(db, code, fmt, ap);
    va_end(ap);
    return code;
}

void kc_db_log(struct kc_db *db, int level, const char *fmt, ...)
{
    if (!db->log)
        return;
    char msg[KC_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kc_logq_add(&db->logq, level, msg);
}

/* Whether a write may have failed for RLIMIT_FSIZE: a file is within a page of the limit. */
static int near_size_limit(struct kc_db *db)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    uint64_t file_bytes, wal_bytes;
    kc_db_disk_usage(db, &file_bytes, &wal_bytes);
    uint64_t margin = 65536 + 64;
    return file_bytes + margin >= (uint64_t)rl.rlim_cur ||
           wal_bytes + margin >= (uint64_t)rl.rlim_cur;
}

int kc_sqlerr(struct kc_db *db, int rc, const char *what)
{
    const char *msg = db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(rc);
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return kc_db_err(db, KCACHE_EBUSY,
                         "%s: %s stayed locked for %u ms (another process holds it; "
                         "raise the busy timeout or find the stuck process)",
                         what, db->path, db->busy_timeout_ms);
    case SQLITE_FULL:
        return kc_db_err(db, KCACHE_EFULL, "%s: disk full writing %s: free space or lower the cap",
                         what, db->path);
    case SQLITE_READONLY:
        return kc_db_err(db, KCACHE_EIO, "%s: %s is read-only (check its directory's permissions)",
                         what, db->path);
    case SQLITE_IOERR: {
        /* SQLite reports only ENOSPC as SQLITE_FULL; the other ways to run out of room
         * come back as I/O errors, which would not tell the user what to do. */
        int sys = db->conn ? sqlite3_system_errno(db->conn) : 0;
        if (sys == 0 && rc == SQLITE_IOERR_WRITE && near_size_limit(db))
            sys = EFBIG; /* SQLite does not always keep the write's errno */
        if (sys == ENOSPC || sys == EDQUOT)
            return kc_db_err(db, KCACHE_EFULL,
                             "%s: disk full writing %s: free space or lower the "
                             "cap",
                             what, db->path);
        if (sys == EFBIG)
            return kc_db_err(db, KCACHE_EFULL,
                             "%s: %s reached the file size limit (ulimit -f): "
                             "raise the limit or lower the cap",
                             what, db->path);
        if (sys == EROFS)
            return kc_db_err(db, KCACHE_EIO,
                             "%s: %s is on a read-only file system: set KCACHE_DIR "
                             "to a writable directory",
                             what, db->path);
        return kc_db_err(db, KCACHE_EIO, "%s: %s: %s", what, db->path, msg);
    }
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return kc_db_err(db, KCACHE_EIO, "%s: %s: %s", what, db->path, msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return kc_db_err(db, KCACHE_ECORRUPT, "%s: %s is damaged: %s", what, db->path, msg);
    case SQLITE_NOMEM:
        return kc_db_err(db, KCACHE_ENOMEM, "%s: out of memory", what);
    default:
        return kc_db_err(db, KCACHE_EIO, "%s: %s: %s", what, db->path, msg);
    }
}

/* The files beside the database (db.h): their names, and their size on disk. */
int kc_db_sidecar(char *buf, size_t size, const char *path, const char *suffix)
{
    int n = snprintf(buf, size, "%s%s", path, suffix);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

void kc_db_disk_usage(struct kc_db *db, uint64_t *file_bytes, uint64_t *wal_bytes)
{
    struct stat st;
    *file_bytes = stat(db->path, &st) == 0 ? (uint64_t)st.st_size : 0;
    *wal_bytes = stat(db->wal_path, &st) == 0 ? (uint64_t)st.st_size : 0;
}
