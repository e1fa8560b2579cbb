/*
 * Running one schema step (schema/NNN_*.sql) on a connection.
 *
 * Most steps create or alter objects with ordinary SQL. A step that rewrites
 * objects' CREATE text in place (kc_schema_rewrites[]: schema 7 drops the
 * CHECKs and the comments, which a hit paid for in parsing) has to write
 * sqlite_schema itself, which SQLite allows only with writable_schema and
 * with defensive mode off; done wrong, such a rewrite would describe rows
 * that are not there. So it runs inside a savepoint under a guard: the
 * layout of every table and index as SQLite reads it back after the rewrite
 * (columns, types, NOT NULL, defaults, keys, hidden columns, rowid or not,
 * indexes, their columns and uniqueness, root pages, and a WITHOUT ROWID
 * table's key order and collations) must be the layout from
 * before, byte for byte, or the step is undone and the file keeps the text
 * it had. The old text is as correct as the new one, only slower to parse,
 * so a file the guard refuses (one whose objects are not the ones kcache
 * made) still opens and migrates. Learnt from the procedure in SQLite's
 * documentation for schema changes ALTER TABLE cannot make ("Making Other
 * Kinds Of Table Schema Changes").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/dbint.h"
#include "db/schema.h"

/*
 * Every object's layout, one line each, in a fixed order. A WITHOUT ROWID
 * table is its primary key's b-tree, whose order (DESC, COLLATE) no other
 * pragma shows: pragma_index_xinfo of the table's own name gives it (and
 * nothing for a rowid table). pragma_table_list
 * needs SQLite 3.37; an older one fails here, and the rewrite is skipped.
 */
static const char layout_sql[] =
    "SELECT group_concat(line, char(10)) FROM (SELECT s.type || ' ' || s.name || ' ' ||"
    " s.tbl_name || ' ' || s.rootpage || ': ' || CASE s.type WHEN 'table' THEN"
    " ifnull((SELECT group_concat(cid || ',' || name || ',' || type || ',' || \"notnull\" ||"
    "   ',' || quote(dflt_value) || ',' || pk || ',' || hidden, ';')"
    "   FROM pragma_table_xinfo(s.name)), '') ||"
    " ifnull((SELECT ' ncol ' || ncol || ' wr ' || wr || ' strict ' || strict"
    "   FROM pragma_table_list(s.name)), '') ||"
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
 * A rewrite that fails, or that the guard refuses, is undone and the step
 * goes on with the old text: only failing to undo it fails the migration
 * (which then rolls back as a whole).
 */
static int rewrite_step(sqlite3 *conn, const char *sql)
{
    char *before = read_layout(conn);
    if (!before)
        return SQLITE_OK; /* cannot be guarded: the file keeps its text */
    int rc = sqlite3_exec(conn, "SAVEPOINT kc_rewrite", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        free(before);
        return rc;
    }
    char *after = write_schema_text(conn, sql) == SQLITE_OK ? read_layout(conn) : NULL;
    if (!after || strcmp(before, after) != 0)
        rc = sqlite3_exec(conn, "ROLLBACK TO kc_rewrite", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(conn, "RELEASE kc_rewrite", NULL, NULL, NULL);
    free(before);
    free(after);
    return rc;
}

int kc_schema_step(sqlite3 *conn, int step)
{
    if (kc_schema_rewrites[step])
        return rewrite_step(conn, kc_schema_steps[step]);
    return sqlite3_exec(conn, kc_schema_steps[step], NULL, NULL, NULL);
}
