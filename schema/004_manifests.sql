-- kcache schema, version 4: remembered include closures (manifests).
--
-- A hit on a large header tree must not re-read the tree. Under a base key
-- (every input but the headers, plus where headers are searched) kcache
-- keeps the closure of a compile: every path it looked at, with the file's
-- identity (device, inode, size, mtime, ctime) and digest, or that nothing
-- was there, and the key the compile had. A later request checks the closure
-- with stat() and hashes only what changed (lib/compile/manifest.c). Several closures
-- per base key: a header's edit and its revert both stay served.
--
-- Closures name local paths and inodes, so they stay on this machine: export
-- and import carry entries only, and a closure is rebuilt by the first
-- compile that resolves its includes.
-- The same closure is shared: every kernel CuPy compiles against one preamble
-- reads the same files (about 57 KiB compressed each for CuPy's tree), so a
-- closure is stored once, by the digest of its bytes, and goes with its last
-- reference. When it was read (what "too recent to trust" is judged against)
-- belongs to each use, not to the shared bytes.
CREATE TABLE closure (
    id       INTEGER PRIMARY KEY,
    digest   BLOB    NOT NULL UNIQUE CHECK (length(digest) = 32),
    codec    INTEGER NOT NULL,                 -- as entry.codec: mostly paths
    raw_size INTEGER NOT NULL CHECK (raw_size >= 0),
    data     BLOB    NOT NULL
);

CREATE TABLE manifest (
    base        BLOB    NOT NULL CHECK (length(base) = 32),
    key         BLOB    NOT NULL CHECK (length(key) = 32),
    closure_id  INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,              -- ns since the epoch: when the files were read
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (base, key)
) WITHOUT ROWID;

CREATE INDEX manifest_by_key ON manifest (key);
CREATE INDEX manifest_by_closure ON manifest (closure_id);

-- A closure leads to an entry: it goes with it.
CREATE TRIGGER entry_manifests_removed AFTER DELETE ON entry BEGIN
    DELETE FROM manifest WHERE key = OLD.key;
END;

CREATE TRIGGER manifest_removed AFTER DELETE ON manifest
WHEN NOT EXISTS (SELECT 1 FROM manifest WHERE closure_id = OLD.closure_id)
BEGIN
    DELETE FROM closure WHERE id = OLD.closure_id;
END;
