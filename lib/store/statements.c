/* The SQL of the store's named statements (storeint.h), prepared once per connection. */
#include "store/storeint.h"

const char *const kc_stmt_sql[KC_STMT_COUNT] = {
    /*
     * Prepared by every hit process. Each bare column makes SQLite work out
     * its declared type and origin table for the result's metadata; the
     * unary + makes the columns expressions, which it skips: 0.27 M -> 0.23 M
     * instructions to prepare, the same rows.
     */
    [KC_STMT_GET] =
        "SELECT +e.id, +e.kind, +e.arch, +e.name, +e.raw_size, +e.stored_size, +e.codec,"
        " +e.digest, +e.created_at, +e.accessed_at, +e.hits, +e.compile_ns, +e.toolchain,"
        " +i.log, +i.names, +i.key_material, +a.stored_digest, +a.data,"
        /* The key as the row has it, read through the rowid: e.key itself
         * would be read from the very index entry that led here. */
        " (SELECT k.key FROM entry k WHERE k.id = e.id),"
        /* The shared lists (shared.c): the header list to put back into the key material,
         * the number of items the input list must give. */
        " +i.headers_id, +i.headers_at, +h.size, +h.codec, +h.data, +h.digest,"
        " +i.inputs_id, (SELECT l.n FROM input_list l WHERE l.id = i.inputs_id)"
        " FROM entry e LEFT JOIN entry_info i ON i.id = e.id LEFT JOIN artifact a ON a.id = e.id"
        " LEFT JOIN header_list h ON h.id = i.headers_id"
        " WHERE e.key = ?1",
    /* An entry's own inputs and those of its shared list, in their order; the last column
     * says which. */
    [KC_STMT_GET_INPUTS] =
        "SELECT ei.role, ei.name, i.size, i.codec, i.digest, i.data, ei.seq, 0"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id WHERE ei.entry_id = ?1"
        " UNION ALL SELECT li.role, li.name, i.size, i.codec, i.digest, i.data,"
        " f.inputs_at + li.seq, 1 FROM entry_info f JOIN input_list_item li"
        " ON li.list_id = f.inputs_id JOIN input i ON i.id = li.input_id WHERE f.id = ?1"
        " ORDER BY 7",
    [KC_STMT_DELETE] = "DELETE FROM entry WHERE key = ?1",
    [KC_STMT_INSERT_ENTRY] =
        "INSERT INTO entry (key, kind, arch, name, raw_size, stored_size, codec, digest,"
        " created_at, accessed_at, hits, compile_ns, toolchain)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 0, ?10, ?11)",
    [KC_STMT_INSERT_INFO] =
        "INSERT INTO entry_info (id, log, names, key_material, headers_id, headers_at, inputs_id,"
        " inputs_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [KC_STMT_INSERT_ARTIFACT] =
        "INSERT INTO artifact (id, stored_digest, data) VALUES (?1, ?2, ?3)",
    [KC_STMT_FIND_INPUT] = "SELECT id FROM input WHERE digest = ?1",
    [KC_STMT_INSERT_INPUT] =
        "INSERT INTO input (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    [KC_STMT_INSERT_ENTRY_INPUT] =
        "INSERT INTO entry_input (entry_id, seq, role, name, input_id) VALUES (?1, ?2, ?3, ?4, ?5)",
    [KC_STMT_TOUCH] =
        "UPDATE entry SET accessed_at = max(accessed_at, ?2), hits = hits + ?3 WHERE key = ?1",
    [KC_STMT_USAGE_ADD] =
        "INSERT INTO usage (arch, kind, hits, misses, saved_ns) VALUES (?1, ?2, ?3, ?4, ?5)"
        " ON CONFLICT (arch, kind) DO UPDATE SET hits = hits + excluded.hits,"
        " misses = misses + excluded.misses, saved_ns = saved_ns + excluded.saved_ns",
    [KC_STMT_COUNTER_ADD] =
        "INSERT INTO counter (name, value) VALUES (?1, ?2)"
        " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    [KC_STMT_FIND_PREFIX] = "SELECT key FROM entry WHERE key >= ?1 AND key < ?2 LIMIT 2",
#define KC_LIST_SELECT                                                                             \
    "SELECT id, key, kind, arch, name, raw_size, stored_size, digest, created_at, accessed_at,"    \
    " hits, compile_ns, toolchain FROM entry"                                                      \
    " WHERE (?1 IS NULL OR arch = ?1) AND (?2 = 0 OR kind = ?2)"                                   \
    " AND (?3 = 0 OR accessed_at < ?3) AND (?4 = 0 OR created_at >= ?4)"
    [KC_STMT_LIST_ACCESSED] = KC_LIST_SELECT " ORDER BY accessed_at DESC, id LIMIT ?5",
    [KC_STMT_LIST_CREATED] = KC_LIST_SELECT " ORDER BY created_at DESC, id LIMIT ?5",
    [KC_STMT_LIST_SIZE] = KC_LIST_SELECT " ORDER BY raw_size DESC, id LIMIT ?5",
    [KC_STMT_LIST_HITS] = KC_LIST_SELECT " ORDER BY hits DESC, id LIMIT ?5",
    [KC_STMT_LIST_LRU] = KC_LIST_SELECT " ORDER BY accessed_at ASC, id LIMIT ?5",
#undef KC_LIST_SELECT
    [KC_STMT_LRU_BATCH] =
        "SELECT id, stored_size, accessed_at FROM entry ORDER BY accessed_at, id LIMIT ?1",
    [KC_STMT_TOTALS] = "SELECT entries, raw_bytes, stored_bytes FROM totals",
    [KC_STMT_COUNTERS] = "SELECT name, value FROM counter",
    [KC_STMT_COUNTER_GET] = "SELECT value FROM counter WHERE name = ?1",
    [KC_STMT_USAGE] = "SELECT arch, kind, hits, misses, saved_ns FROM usage",
    [KC_STMT_MANIFEST_GET] =
        "SELECT m.key, m.recorded_at, c.codec, c.raw_size, c.data, c.id, c.parts FROM manifest m"
        " JOIN closure c ON c.id = m.closure_id WHERE m.base = ?1"
        " ORDER BY m.created_at DESC LIMIT ?2",
    /* A file of schema 8 opened to read: every closure whole. */
    [KC_STMT_MANIFEST_GET_V8] =
        "SELECT m.key, m.recorded_at, c.codec, c.raw_size, c.data, c.id, NULL FROM manifest m"
        " JOIN closure c ON c.id = m.closure_id WHERE m.base = ?1"
        " ORDER BY m.created_at DESC LIMIT ?2",
    /* A delete, then an insert: a REPLACE would not fire manifest_removed. */
    [KC_STMT_MANIFEST_DELETE] = "DELETE FROM manifest WHERE base = ?1 AND key = ?2",
    [KC_STMT_MANIFEST_PUT] =
        "INSERT INTO manifest (base, key, closure_id, recorded_at, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5)",
    [KC_STMT_MANIFEST_TRIM] =
        "DELETE FROM manifest WHERE base = ?1 AND key NOT IN"
        " (SELECT key FROM manifest WHERE base = ?1 ORDER BY created_at DESC LIMIT ?2)",
    [KC_STMT_CLOSURE_FIND] = "SELECT id FROM closure WHERE digest = ?1",
    [KC_STMT_CLOSURE_PUT_PARTS] =
        "INSERT INTO closure (digest, raw_size, codec, data, parts) VALUES (?1, ?2, 0, x'', ?3)",
    [KC_STMT_CLOSURE_PART_PUT] =
        "INSERT INTO closure_part (closure_id, seq, chunk_id) VALUES (?1, ?2, ?3)",
    [KC_STMT_CLOSURE_PARTS] =
        "SELECT k.codec, k.size, k.data FROM closure_part p JOIN closure_chunk k"
        " ON k.id = p.chunk_id WHERE p.closure_id = ?1 ORDER BY p.seq",
    [KC_STMT_CHUNK_FIND] = "SELECT id FROM closure_chunk WHERE digest = ?1",
    [KC_STMT_CHUNK_PUT] =
        "INSERT INTO closure_chunk (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    /* A file of schema 6 or 7 opened to read (a bundle, a read-only cache): nothing shared. */
    [KC_STMT_GET_V7] =
        "SELECT +e.id, +e.kind, +e.arch, +e.name, +e.raw_size, +e.stored_size, +e.codec,"
        " +e.digest, +e.created_at, +e.accessed_at, +e.hits, +e.compile_ns, +e.toolchain,"
        " +i.log, +i.names, +i.key_material, +a.stored_digest, +a.data,"
        " (SELECT k.key FROM entry k WHERE k.id = e.id), NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
        " NULL"
        " FROM entry e LEFT JOIN entry_info i ON i.id = e.id LEFT JOIN artifact a ON a.id = e.id"
        " WHERE e.key = ?1",
    [KC_STMT_GET_INPUTS_V7] =
        "SELECT ei.role, ei.name, i.size, i.codec, i.digest, i.data, ei.seq, 0"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id"
        " WHERE ei.entry_id = ?1 ORDER BY ei.seq",
    [KC_STMT_HEADERS_FIND] = "SELECT id FROM header_list WHERE digest = ?1",
    [KC_STMT_HEADERS_PUT] =
        "INSERT INTO header_list (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    [KC_STMT_INPUTS_FIND] = "SELECT id FROM input_list WHERE digest = ?1",
    [KC_STMT_INPUTS_PUT] = "INSERT INTO input_list (digest, n) VALUES (?1, ?2)",
    [KC_STMT_INPUTS_PUT_ITEM] =
        "INSERT INTO input_list_item (list_id, seq, role, name, input_id)"
        " VALUES (?1, ?2, ?3, ?4, ?5)",
};
