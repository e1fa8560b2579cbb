/*
 * Running one schema step (schema/NNN_*.sql) on a connection, and comparing
 * a file's objects with the ones the steps make.
 *
 * Most steps create or alter objects with ordinary SQL. A step that rewrites
 * objects' CREATE text in place (kc_schema_rewrites[]: schema 7 drops the
 * CHECKs and the comments, which a hit paid for in parsing) has to write
 * sqlite_schema itself, which SQLite allows only with writable_schema and
 * with defensive mode off; done wrong, such a rewrite would describe rows
 * that are not there. Two guards, so that it only ever changes words:
 *
 *   - before: the file's objects must be exactly the ones the steps before
 *     this one make (type, name, table and text, compared with an in-memory
 *     reference built from the same steps), so the step's new text, written
 *     for those objects, is only ever applied to them;
 *   - after, inside a savepoint: the layout of every table and index as
 *     SQLite reads it back (columns, types, NOT NULL, defaults, keys, hidden
 *     columns, indexes, their columns, order, collations and uniqueness, a
 *     WITHOUT ROWID table's key, root pages) must be the layout from before,
 *     byte for byte, which catches a step whose new text is itself wrong.
 *
 * Otherwise the step is undone and the file keeps the text it had: as
 * correct as the new one, only slower to parse, so a file whose objects are
 * not the ones kcache made still opens and migrates. Learnt from the
 * procedure in SQLite's documentation for schema changes ALTER TABLE cannot
 * make ("Making Other Kinds Of Table Schema Changes").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/dbint.h"
#include "db/schema.h"

/*
 * The steps' own objects at `version`, in memory. A rewrite step builds the
 * one before it to compare the file with (objects_as_made()), which ends at
 * the first step: it has no step before it.
 */
int kc_db_schema_reference(sqlite3 **out, int version)
{
    int src = kc_sqlite_open(out, ":memory:", SQLITE_OPEN_READWRITE);
    for (int v = 0; src == SQLITE_OK && v < version; v++)
        src = kc_schema_step(*out, v);
    return src;
}

static const char objects_sql[] =
    "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema"
    " WHERE name NOT IN ('sqlite_stat1', 'sqlite_stat4') ORDER BY type, name";

int kc_db_same_objects(sqlite3 *db, sqlite3 *ref, char *what, size_t what_size)
{
    sqlite3_stmt *a = NULL, *b = NULL;
    int same = 0;
    if (sqlite3_prepare_v2(db, objects_sql, -1, &a, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(ref, objects_sql, -1, &b, NULL) != SQLITE_OK) {
        snprintf(what, what_size, "its schema cannot be read");
        goto out;
    }
    for (;;) {
        int ra = sqlite3_step(a), rb = sqlite3_step(b);
        if (ra == SQLITE_DONE && rb == SQLITE_DONE) {
            same = 1;
            break;
        }
        if (ra != SQLITE_ROW) {
            snprintf(what, what_size, "%s",
                     ra == SQLITE_DONE ? "objects of the schema are missing"
                                       : "its schema cannot be read");
            break;
        }
        const char *name = (const char *)sqlite3_column_text(a, 1);
        if (rb != SQLITE_ROW) {
            snprintf(what, what_size, "it holds %s '%s', which is not kcache's",
                     (const char *)sqlite3_column_text(a, 0), name ? name : "?");
            break;
        }
        int differ = 0;
        for (int c = 0; c < 4; c++) {
            const char *x = (const char *)sqlite3_column_text(a, c);
            const char *y = (const char *)sqlite3_column_text(b, c);
            differ |= !x || !y || strcmp(x, y) != 0;
        }
        if (differ) {
            snprintf(what, what_size, "its %s '%s' is not kcache's",
                     (const char *)sqlite3_column_text(a, 0), name ? name : "?");
            break;
        }
    }
out:
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    return same;
}

/*
 * Every object's layout, one line each, in a fixed order, from pragmas that
 * SQLite 3.35 (the oldest kcache builds with) has. A WITHOUT ROWID table is
 * its primary key's b-tree, whose order (DESC, COLLATE) no other pragma
 * shows: pragma_index_xinfo of the table's own name gives it (and nothing
 * for a rowid table).
 */
static const char layout_sql[] =
    "SELECT group_concat(line, char(10)) FROM (SELECT s.type || ' ' || s.name || ' ' ||"
    " s.tbl_name || ' ' || s.rootpage || ': ' || CASE s.type WHEN 'table' THEN"
    " ifnull((SELECT group_concat(cid || ',' || name || ',' || type || ',' || \"notnull\" ||"
    "   ',' || quote(dflt_value) || ',' || pk || ',' || hidden, ';')"
    "   FROM pragma_table_xinfo(s.name)), '') ||"
    " ifnull((SELECT ' indexes ' || group_concat(name || ',' || \"unique\" || ',' || origin ||"
    "   ',' || partial, ';') FROM pragma_index_list(s.name)), '') ||"
    " ifnull((SELECT ' key ' || group_concat(seqno || ',' || cid || ',' || desc || ',' || coll ||"
    "   ',' || key, ';') FROM pragma_index_xinfo(s.name)), '')"
    " ELSE ifnull((SELECT group_concat(seqno || ',' || cid || ',' || quote(name) || ',' ||"
    "   desc || ',' || coll || ',' || key, ';') FROM pragma_index_xinfo(s.name)), '') END"
    " AS line FROM sqlite_schema s ORDER BY s.type, s.name)";

/* The layout as a string the caller frees, or NULL where it cannot be read. */
static char *read_layout(sqlite3 *conn)
{
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    if (sqlite3_prepare_v2(conn, layout_sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT)
        out = kc_strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

/* The step's UPDATEs of sqlite_schema, then the schema cookie bumped so that SQLite reads it again. */
static int write_schema_text(sqlite3 *conn, const char *sql)
{
    sqlite3_db_config(conn, SQLITE_DBCONFIG_DEFENSIVE, 0, NULL);
    int rc = sqlite3_exec(conn, "PRAGMA writable_schema = ON", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(conn, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        int64_t cookie = kc_pragma_int(conn, "PRAGMA schema_version", &rc);
        char bump[64];
        snprintf(bump, sizeof(bump), "PRAGMA schema_version = %lld", (long long)cookie + 1);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(conn, bump, NULL, NULL, NULL);
    }
    sqlite3_exec(conn, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
    sqlite3_db_config(conn, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    return rc;
}

/*
 * Whether the file's objects are the ones steps 0 .. step - 1 make. A
 * reference that cannot be built (no memory) counts as not: the file then
 * keeps its text.
 */
static int objects_as_made(sqlite3 *conn, int step)
{
    sqlite3 *ref = NULL;
    char what[160];
    int same = kc_db_schema_reference(&ref, step) == SQLITE_OK &&
               kc_db_same_objects(conn, ref, what, sizeof(what));
    sqlite3_close(ref);
    return same;
}

/*
 * A rewrite that fails, or that a guard refuses, is undone and the step goes
 * on with the old text. Only an error that ends the transaction itself (a
 * full disk, an I/O error: SQLite has rolled it all back) fails the
 * migration, with that error; so does failing to undo the rewrite.
 */
int kc_schema_rewrite(sqlite3 *conn, int step, const char *sql)
{
    if (!objects_as_made(conn, step))
        return SQLITE_OK;
    char *before = read_layout(conn);
    if (!before)
        return SQLITE_OK; /* cannot be guarded: the file keeps its text */
    int rc = sqlite3_exec(conn, "SAVEPOINT kc_rewrite", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        free(before);
        return rc;
    }
    int wrote = write_schema_text(conn, sql);
    char *after = wrote == SQLITE_OK ? read_layout(conn) : NULL;
    if (wrote != SQLITE_OK && sqlite3_get_autocommit(conn)) {
        rc = wrote; /* the transaction is gone, the savepoint with it */
    } else {
        if (!after || strcmp(before, after) != 0)
            rc = sqlite3_exec(conn, "ROLLBACK TO kc_rewrite", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(conn, "RELEASE kc_rewrite", NULL, NULL, NULL);
    }
    free(before);
    free(after);
    return rc;
}

int kc_schema_step(sqlite3 *conn, int step)
{
    if (kc_schema_rewrites[step])
        return kc_schema_rewrite(conn, step, kc_schema_steps[step]);
    int src = sqlite3_exec(conn, kc_schema_steps[step], NULL, NULL, NULL);
    /* Rows SQL alone cannot move: the lists entries share, split out of each row (share.c). */
    if (src == SQLITE_OK && step == 7)
        src = kc_share_migrate(conn);
    return src;
}
