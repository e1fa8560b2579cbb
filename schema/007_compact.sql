-- kcache schema, version 7: the same tables, their definitions written short.
--
-- Every connection parses every object's CREATE text on its first read, and
-- most kcache processes are a single hit. The CHECK constraints, the comments
-- and the column alignment were a fifth of that parse: rewritten without
-- them, a process's first hit runs 0.10 M fewer instructions and takes 10%
-- less time (benchmarks/profile_first_hit). The CHECKs guarded nothing the
-- code relies on: every reader checks the sizes it reads (a hostile file is
-- written without them anyway), and kcache's own writes never broke them.
--
-- Only the text changes: columns, their order, types, defaults, NOT NULL,
-- keys, UNIQUE and WITHOUT ROWID are exactly as before, so no row is copied.
-- A step that updates sqlite_schema runs with writable_schema and under two
-- guards (lib/db/steps.c): the file's objects must be exactly schema 6's,
-- and every table's and index's layout read back must equal the one from
-- before; otherwise the step is undone and the file keeps its old text,
-- which is as correct, only slower to parse. A kcache of schema 6 opens this
-- file read-only, as any kcache opens a newer schema's file; one that had it
-- open before the migration goes on reading and writing it unharmed, since
-- no table changed.
UPDATE sqlite_schema SET sql = 'CREATE TABLE entry(id INTEGER PRIMARY KEY,key BLOB NOT NULL UNIQUE,kind INTEGER NOT NULL,arch TEXT NOT NULL,name TEXT NOT NULL,raw_size INTEGER NOT NULL,stored_size INTEGER NOT NULL,codec INTEGER NOT NULL,digest BLOB NOT NULL,created_at INTEGER NOT NULL,accessed_at INTEGER NOT NULL,hits INTEGER NOT NULL DEFAULT 0,compile_ns INTEGER NOT NULL DEFAULT 0,toolchain TEXT NOT NULL DEFAULT '''')' WHERE type = 'table' AND name = 'entry';
UPDATE sqlite_schema SET sql = 'CREATE INDEX entry_lru ON entry(accessed_at)' WHERE type = 'index' AND name = 'entry_lru';
UPDATE sqlite_schema SET sql = 'CREATE INDEX entry_by_arch ON entry(kind,arch)' WHERE type = 'index' AND name = 'entry_by_arch';
UPDATE sqlite_schema SET sql = 'CREATE TABLE entry_info(id INTEGER PRIMARY KEY,log TEXT NOT NULL DEFAULT '''',names BLOB,key_material BLOB)' WHERE type = 'table' AND name = 'entry_info';
UPDATE sqlite_schema SET sql = 'CREATE TABLE artifact(id INTEGER PRIMARY KEY,stored_digest BLOB NOT NULL,data BLOB NOT NULL)' WHERE type = 'table' AND name = 'artifact';
UPDATE sqlite_schema SET sql = 'CREATE TABLE totals(one INTEGER PRIMARY KEY,entries INTEGER NOT NULL,raw_bytes INTEGER NOT NULL,stored_bytes INTEGER NOT NULL)' WHERE type = 'table' AND name = 'totals';
UPDATE sqlite_schema SET sql = 'CREATE TABLE counter(name TEXT PRIMARY KEY,value INTEGER NOT NULL)WITHOUT ROWID' WHERE type = 'table' AND name = 'counter';
UPDATE sqlite_schema SET sql = 'CREATE TABLE usage(arch TEXT NOT NULL,kind INTEGER NOT NULL,hits INTEGER NOT NULL DEFAULT 0,misses INTEGER NOT NULL DEFAULT 0,saved_ns INTEGER NOT NULL DEFAULT 0,PRIMARY KEY(arch,kind))WITHOUT ROWID' WHERE type = 'table' AND name = 'usage';
UPDATE sqlite_schema SET sql = 'CREATE TABLE input(id INTEGER PRIMARY KEY,digest BLOB NOT NULL UNIQUE,size INTEGER NOT NULL,codec INTEGER NOT NULL,data BLOB NOT NULL)' WHERE type = 'table' AND name = 'input';
UPDATE sqlite_schema SET sql = 'CREATE TABLE entry_input(entry_id INTEGER NOT NULL,seq INTEGER NOT NULL,role INTEGER NOT NULL,name TEXT NOT NULL,input_id INTEGER NOT NULL,PRIMARY KEY(entry_id,seq))WITHOUT ROWID' WHERE type = 'table' AND name = 'entry_input';
UPDATE sqlite_schema SET sql = 'CREATE INDEX entry_input_by_input ON entry_input(input_id)' WHERE type = 'index' AND name = 'entry_input_by_input';
UPDATE sqlite_schema SET sql = 'CREATE TABLE lease(key BLOB PRIMARY KEY,pid INTEGER NOT NULL,host TEXT NOT NULL,heartbeat INTEGER NOT NULL)WITHOUT ROWID' WHERE type = 'table' AND name = 'lease';
UPDATE sqlite_schema SET sql = 'CREATE TABLE closure(id INTEGER PRIMARY KEY,digest BLOB NOT NULL UNIQUE,codec INTEGER NOT NULL,raw_size INTEGER NOT NULL,data BLOB NOT NULL)' WHERE type = 'table' AND name = 'closure';
UPDATE sqlite_schema SET sql = 'CREATE TABLE manifest(base BLOB NOT NULL,key BLOB NOT NULL,closure_id INTEGER NOT NULL,recorded_at INTEGER NOT NULL,created_at INTEGER NOT NULL,PRIMARY KEY(base,key))WITHOUT ROWID' WHERE type = 'table' AND name = 'manifest';
UPDATE sqlite_schema SET sql = 'CREATE INDEX manifest_by_key ON manifest(key)' WHERE type = 'index' AND name = 'manifest_by_key';
UPDATE sqlite_schema SET sql = 'CREATE INDEX manifest_by_closure ON manifest(closure_id)' WHERE type = 'index' AND name = 'manifest_by_closure';
