-- kcache schema, version 9: include closures stored in shared chunks.
--
-- Closures differ little: CuPy's 295 kernels on an H200 left 37 distinct
-- closures of ~190 KB each, most of them differing from another only in the
-- times of one directory (/tmp, where CuPy makes a directory a compile).
-- Stored whole they were 2.87 MB of a 5.1 MB file. So a closure is cut
-- where its content says (util/codec.h kc_chunk_size()), each chunk stored
-- once by the digest of its bytes and compressed as an artifact is, and the
-- closure row keeps its digest, its size and its chunks in order
-- (closure_part); a chunk goes with the last part that refers to it
-- (store/cascade.c). The encoding of a closure (compile/manifest.c) is
-- unchanged: the store hands back the same bytes.
--
-- parts: how many chunks hold the closure, its data then empty; NULL: a
-- closure stored whole before this version, read as before. A kcache of
-- schema 8 opens this file read-only and finds no closure in a row with
-- empty data: it resolves the includes, as for a closure it never had.
CREATE TABLE closure_chunk(id INTEGER PRIMARY KEY,digest BLOB NOT NULL UNIQUE,size INTEGER NOT NULL,codec INTEGER NOT NULL,data BLOB NOT NULL);
CREATE TABLE closure_part(closure_id INTEGER NOT NULL,seq INTEGER NOT NULL,chunk_id INTEGER NOT NULL,PRIMARY KEY(closure_id,seq))WITHOUT ROWID;
CREATE INDEX closure_part_by_chunk ON closure_part(chunk_id);
ALTER TABLE closure ADD COLUMN parts INTEGER;
