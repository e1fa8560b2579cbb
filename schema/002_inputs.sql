-- kcache schema, version 2: the inputs of each compile, kept deduplicated.
--
-- verify --recompile rebuilds an entry from these and compares the bytes;
-- inspect --source shows them. A header shared by a thousand entries is
-- stored once. An input row goes when its last reference goes.

CREATE TABLE input (
    id     INTEGER PRIMARY KEY,
    digest BLOB    NOT NULL UNIQUE CHECK (length(digest) = 32),
    size   INTEGER NOT NULL,
    codec  INTEGER NOT NULL,                   -- as entry.codec
    data   BLOB    NOT NULL
);

CREATE TABLE entry_input (
    entry_id INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    role     INTEGER NOT NULL,                 -- 1 source, 2 header, 3 link input
    name     TEXT    NOT NULL,
    input_id INTEGER NOT NULL,
    PRIMARY KEY (entry_id, seq)
) WITHOUT ROWID;

CREATE INDEX entry_input_by_input ON entry_input (input_id);

CREATE TRIGGER entry_input_removed AFTER DELETE ON entry_input
WHEN NOT EXISTS (SELECT 1 FROM entry_input WHERE input_id = OLD.input_id)
BEGIN
    DELETE FROM input WHERE id = OLD.input_id;
END;

DROP TRIGGER entry_removed;
CREATE TRIGGER entry_removed AFTER DELETE ON entry BEGIN
    UPDATE totals SET entries = entries - 1,
                      raw_bytes = raw_bytes - OLD.raw_size,
                      stored_bytes = stored_bytes - OLD.stored_size;
    DELETE FROM artifact WHERE id = OLD.id;
    DELETE FROM entry_info WHERE id = OLD.id;
    DELETE FROM entry_input WHERE entry_id = OLD.id;
END;
