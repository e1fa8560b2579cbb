-- kcache schema, version 3: leases for single-flight compiles.
--
-- When several processes miss the same key at once, the first takes a lease
-- and compiles; the others wait for its entry. The owner's pid and host tell
-- a dead owner (its lease is taken over at once); the heartbeat tells a stuck
-- or unreachable one (taken over once it is stale).
CREATE TABLE lease (
    key       BLOB    PRIMARY KEY CHECK (length(key) = 32),
    pid       INTEGER NOT NULL,
    host      TEXT    NOT NULL,
    heartbeat INTEGER NOT NULL
) WITHOUT ROWID;
