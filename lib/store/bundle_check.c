/*
 * Checking a bundle before anything is read from it through the store: whose
 * file it is, which schema, that the schema holds exactly our objects,
 * SQLite's integrity check and plausible sizes (bundle.c says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/bundle_check.h"
#include "store/ingest.h"
#include "kcache/bundle.h"

static int query_int(sqlite3 *db, const char *sql, int64_t bind, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (src == SQLITE_OK) {
        if (sqlite3_bind_parameter_count(st) > 0)
            sqlite3_bind_int64(st, 1, bind);
        src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            src = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return src;
}

/*
 * The oldest bundle schema imported: schema 7 only rewrote the text of
 * schema 6's objects (schema/007_compact.sql), so a bundle of either holds
 * the same tables and columns, and each is compared with its own version's
 * objects below.
 */
#define KC_BUNDLE_OLDEST_SCHEMA 6

/*
 * SQLite's integrity_check can put several lines into one row ("*** in
 * database main ***\nPage 3: ..."): messages are one line.
 */
static void integrity_line(char *out, size_t size, const char *text)
{
    static const char banner[] = "*** in database main ***";
    if (!strncmp(text, banner, sizeof(banner) - 1))
        text += sizeof(banner) - 1;
    while (*text == '\n' || *text == ' ')
        text++;
    size_t n = 0;
    for (; *text && n + 1 < size; text++)
        out[n++] = *text == '\n' || *text == '\r' ? ' ' : *text;
    if (size)
        out[n] = '\0';
}

static int check_integrity(sqlite3 *db, char *what, size_t what_size)
{
    sqlite3_stmt *st = NULL;
    int ok = 0;
    int src = sqlite3_prepare_v2(db, "PRAGMA integrity_check(10)", -1, &st, NULL);
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(st, 0);
        ok = first && !strcmp(first, "ok") && sqlite3_step(st) == SQLITE_DONE;
        if (!ok) {
            char line[160];
            integrity_line(line, sizeof(line), first ? first : "?");
            snprintf(what, what_size, "SQLite's integrity check failed: %s", line);
        }
    } else {
        snprintf(what, what_size, "SQLite cannot check it: %s", sqlite3_errstr(src));
    }
    sqlite3_finalize(st);
    return ok;
}

/*
 * Everything about the file that the store does not check when it serves an
 * entry. Opens it read-only, with nothing in it allowed to run code.
 */
int kc_bundle_check_file(kcache_store *s, const char *path, int *has_sig,
                         uint8_t sig[KC_MAC_SIZE])
{
    char what[KC_ERRMSG_SIZE] = "";
    sqlite3 *db = NULL, *ref = NULL;
    int rc = 0;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kc_err_locking(s, KCACHE_EIO, "cannot read %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return kc_err_locking(s, KCACHE_EINVAL, "%s is not a file", path);
    if (sb.st_size == 0)
        return kc_err_locking(s, KCACHE_ECORRUPT, "%s is empty, not a kcache bundle", path);

    struct stat live;
    if (stat(kcache_store_path(s), &live) == 0 && live.st_dev == sb.st_dev &&
        live.st_ino == sb.st_ino)
        return kc_err_locking(s, KCACHE_EINVAL, "%s is the cache itself (another name for it)", path);

    /* immutable: no locks, no -journal, -wal or -shm read or made beside the user's file. */
    int src = kc_sqlite_open_immutable(&db, path);
    if (src != SQLITE_OK) {
        rc = kc_err_locking(s, KCACHE_EIO, "cannot open %s: %s", path, sqlite3_errstr(src));
        goto out;
    }
    sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    /*
     * A file in WAL mode (a copy of a live cache) keeps part of itself in a
     * -wal file and cannot be read without making a -shm beside it: a bundle
     * is one file, as kcache export writes it.
     */
    uint8_t h[20];
    sqlite3_file *f = NULL;
    if (sb.st_size >= (off_t)sizeof(h) &&
        sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) == SQLITE_OK && f &&
        f->pMethods && f->pMethods->xRead(f, h, sizeof(h), 0) == SQLITE_OK &&
        !memcmp(h, "SQLite format 3", 16) && (h[18] == 2 || h[19] == 2)) {
        rc = kc_err_locking(s, KCACHE_EINVAL,
                        "%s is in WAL mode, as a live cache is, not a bundle: make one with "
                        "kcache export; nothing imported",
                        path);
        goto out;
    }

    int64_t app = 0, version = 0, bad = 0;
    src = query_int(db, "PRAGMA application_id", 0, &app);
    if (src == SQLITE_OK)
        src = query_int(db, "PRAGMA user_version", 0, &version);
    if (src != SQLITE_OK) {
        rc = kc_err_locking(s, KCACHE_ECORRUPT, "%s is not a kcache bundle (%s); nothing imported",
                        path, sqlite3_errstr(src));
        goto out;
    }
    if (app != KC_APPLICATION_ID) {
        rc = kc_err_locking(s, KCACHE_EFOREIGN,
                        "%s is not a kcache bundle (another application's database); nothing "
                        "imported",
                        path);
        goto out;
    }
    if (version < KC_BUNDLE_OLDEST_SCHEMA || version > kc_schema_version) {
        rc = kc_err_locking(s, KCACHE_EVERSION,
                        "%s has schema %lld and this kcache reads bundles of schema %d to %d: "
                        "export it again with this version of kcache; nothing imported",
                        path, (long long)version, KC_BUNDLE_OLDEST_SCHEMA, kc_schema_version);
        goto out;
    }
    if (kc_db_schema_reference(&ref, (int)version) != SQLITE_OK) {
        rc = kc_err_locking(s, KCACHE_ENOMEM, "out of memory");
        goto out;
    }
    if (!kc_db_same_objects(db, ref, what, sizeof(what)) || !check_integrity(db, what, sizeof(what)))
        goto damaged;

    src = query_int(db,
                    "SELECT count(*) FROM entry WHERE raw_size < 0 OR raw_size > ?1"
                    " OR stored_size < 0 OR stored_size > ?1",
                    (int64_t)KCACHE_BUNDLE_MAX_ARTIFACT, &bad);
    if (src == SQLITE_OK && !bad)
        src = query_int(db,
                        "SELECT count(*) FROM input WHERE size < 0 OR size > ?1"
                        " OR length(data) > ?1",
                        (int64_t)KCACHE_BUNDLE_MAX_ARTIFACT, &bad);
    if (src == SQLITE_OK && !bad && version >= 8)
        src = query_int(db,
                        "SELECT count(*) FROM header_list WHERE size < 0 OR size > ?1"
                        " OR length(data) > ?1",
                        (int64_t)KCACHE_BUNDLE_MAX_ARTIFACT, &bad);
    if (src == SQLITE_OK && bad) {
        snprintf(what, sizeof(what), "%lld entries or inputs have impossible sizes",
                 (long long)bad);
        goto damaged;
    }
    /* The store reads inputs with a join: one that is missing would vanish unseen. */
    if (src == SQLITE_OK)
        src = query_int(db,
                        "SELECT count(*) FROM entry_input ei LEFT JOIN input i"
                        " ON i.id = ei.input_id WHERE i.id IS NULL",
                        0, &bad);
    if (src == SQLITE_OK && !bad && version >= 8)
        src = query_int(db,
                        "SELECT count(*) FROM input_list_item li LEFT JOIN input i"
                        " ON i.id = li.input_id WHERE i.id IS NULL",
                        0, &bad);
    if (src == SQLITE_OK && bad) {
        snprintf(what, sizeof(what), "%lld inputs of entries are missing", (long long)bad);
        goto damaged;
    }
    if (src != SQLITE_OK) {
        snprintf(what, sizeof(what), "%s", sqlite3_errstr(src));
        goto damaged;
    }
    /* What all of it decodes to, bounded before the first byte is decoded (ingest.c). */
    if (kc_ingest_check_sizes(db, (int)version, what, sizeof(what)))
        goto damaged;
    if ((*has_sig = kc_bundle_sig_read(db, sig)) < 0) {
        rc = kc_err_locking(s, KCACHE_ECORRUPT,
                            "%s has a signature that is not one (not 32 bytes); nothing imported",
                            path);
        goto out;
    }
    goto out;
damaged:
    rc = kc_err_locking(s, KCACHE_ECORRUPT, "%s is damaged: %s; nothing imported", path, what);
out:
    sqlite3_close(ref);
    sqlite3_close(db);
    return rc;
}
