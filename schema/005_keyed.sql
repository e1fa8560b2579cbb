-- kcache schema, version 5: entries keyed by a caller.
--
-- Besides the compiles kcache keys itself, a caller (cuda.core's program
-- cache, Triton, a user's tool) stores bytes under its own key in a
-- namespace: kind 4 ("data"), with the namespace in arch, so that the LRU,
-- the cap, the checks, the per-(arch, kind) usage rows, the filters, export,
-- import and the remote hold for them unchanged (lib/store/keyed.c says
-- why). SQLite cannot change a CHECK in place, so the entry table is rebuilt
-- with the same ids; its artifacts, infos and inputs stay where they are.
DROP TRIGGER entry_added;
DROP TRIGGER entry_removed;
DROP TRIGGER entry_manifests_removed;

CREATE TABLE entry_v5 (
    id          INTEGER PRIMARY KEY,
    key         BLOB    NOT NULL UNIQUE CHECK (length(key) = 32),
    kind        INTEGER NOT NULL CHECK (kind BETWEEN 1 AND 4),
    arch        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    raw_size    INTEGER NOT NULL CHECK (raw_size >= 0),
    stored_size INTEGER NOT NULL CHECK (stored_size >= 0),
    codec       INTEGER NOT NULL,
    digest      BLOB    NOT NULL CHECK (length(digest) = 32),
    created_at  INTEGER NOT NULL,
    accessed_at INTEGER NOT NULL,
    hits        INTEGER NOT NULL DEFAULT 0,
    compile_ns  INTEGER NOT NULL DEFAULT 0,
    toolchain   TEXT    NOT NULL DEFAULT ''
);
INSERT INTO entry_v5 (id, key, kind, arch, name, raw_size, stored_size, codec, digest,
                      created_at, accessed_at, hits, compile_ns, toolchain)
    SELECT id, key, kind, arch, name, raw_size, stored_size, codec, digest,
           created_at, accessed_at, hits, compile_ns, toolchain FROM entry;
DROP TABLE entry;
ALTER TABLE entry_v5 RENAME TO entry;

CREATE INDEX entry_lru ON entry (accessed_at);
-- A namespace's entries (len() of a program cache, stats, ls and prune by namespace).
CREATE INDEX entry_by_arch ON entry (kind, arch);

CREATE TRIGGER entry_added AFTER INSERT ON entry BEGIN
    UPDATE totals SET entries = entries + 1,
                      raw_bytes = raw_bytes + NEW.raw_size,
                      stored_bytes = stored_bytes + NEW.stored_size;
END;

CREATE TRIGGER entry_removed AFTER DELETE ON entry BEGIN
    UPDATE totals SET entries = entries - 1,
                      raw_bytes = raw_bytes - OLD.raw_size,
                      stored_bytes = stored_bytes - OLD.stored_size;
    DELETE FROM artifact WHERE id = OLD.id;
    DELETE FROM entry_info WHERE id = OLD.id;
    DELETE FROM entry_input WHERE entry_id = OLD.id;
END;

CREATE TRIGGER entry_manifests_removed AFTER DELETE ON entry BEGIN
    DELETE FROM manifest WHERE key = OLD.key;
END;
