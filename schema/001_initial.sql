-- kcache schema, version 1: entries, their artifacts and the counters.
--
-- Metadata and bytes live in separate tables so that listing, stats and the
-- LRU scan never page through artifact bytes. Times are milliseconds since
-- the Unix epoch. Totals are kept by triggers so that stats reads one row
-- whatever the number of entries.

CREATE TABLE entry (
    id          INTEGER PRIMARY KEY,
    key         BLOB    NOT NULL UNIQUE CHECK (length(key) = 32),
    kind        INTEGER NOT NULL CHECK (kind BETWEEN 1 AND 3),
    arch        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    raw_size    INTEGER NOT NULL CHECK (raw_size >= 0),
    stored_size INTEGER NOT NULL CHECK (stored_size >= 0),
    codec       INTEGER NOT NULL,              -- 0: raw, 1: zstd frame with checksum
    digest      BLOB    NOT NULL CHECK (length(digest) = 32), -- BLAKE2b-256 of the raw bytes
    created_at  INTEGER NOT NULL,
    accessed_at INTEGER NOT NULL,
    hits        INTEGER NOT NULL DEFAULT 0,
    compile_ns  INTEGER NOT NULL DEFAULT 0,
    toolchain   TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX entry_lru ON entry (accessed_at);

-- What inspect and a hit need besides the bytes: the compile log, the
-- name expressions with their lowered names, and the key material.
CREATE TABLE entry_info (
    id           INTEGER PRIMARY KEY,          -- entry.id
    log          TEXT    NOT NULL DEFAULT '',
    names        BLOB,
    key_material BLOB
);

-- stored_digest is BLAKE2b-256 of data as stored: a hit hashes the
-- compressed bytes (about 8x fewer than the raw ones) and still proves that
-- what it decodes is exactly what was put.
CREATE TABLE artifact (
    id            INTEGER PRIMARY KEY,         -- entry.id
    stored_digest BLOB    NOT NULL CHECK (length(stored_digest) = 32),
    data          BLOB    NOT NULL
);

CREATE TABLE totals (
    one          INTEGER PRIMARY KEY CHECK (one = 1),
    entries      INTEGER NOT NULL,
    raw_bytes    INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL
);
INSERT INTO totals VALUES (1, 0, 0, 0);

-- Named counters: hits, misses, saved_ns, evictions, corrupt,
-- store_failures, since.
CREATE TABLE counter (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

-- Hits and misses per (architecture, kind).
CREATE TABLE usage (
    arch     TEXT    NOT NULL,
    kind     INTEGER NOT NULL,
    hits     INTEGER NOT NULL DEFAULT 0,
    misses   INTEGER NOT NULL DEFAULT 0,
    saved_ns INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (arch, kind)
) WITHOUT ROWID;

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
END;
