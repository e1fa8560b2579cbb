-- kcache schema, version 8: header lists stored once.
--
-- A kernel of a large header tree carries the tree twice: its key material
-- lists every header by spelling and digest (about 1,040 records, 108 KB
-- for a CuPy kernel) and `kcache compile` keeps an input row per header
-- (about 65 KB). Kernels of one program share these lists whole, so each
-- list is stored once, by the digest of its bytes, and entries refer to it
-- (lib/store/shared.c); a list goes with the last entry that refers to it,
-- in the statement that deletes that entry (lib/store/prune.c).
--
-- header_list: the run of KC_TAG_HEADER records of a key's material
-- (format/keyfmt.h), encoded as an artifact is; entry_info.key_material holds
-- the rest, and the list goes back at byte headers_at. input_list: the run
-- of header inputs of an entry, items in input_list_item (n of them); they
-- go back at seq inputs_at among the entry's own entry_input rows. NULL
-- headers_id or inputs_id: nothing shared, the row holds it all. The
-- migration (lib/db/share.c) moves the lists of the entries already stored
-- in the same transaction. What leaves the store (a bundle's entries are
-- put again, the shared tier, verify) sees each entry's whole material.
-- A kcache of schema 7 opens this file read-only, and would see an
-- entry's material without its headers: its artifact is still checked by
-- its own digest, and the import gate refuses such material anywhere else.
CREATE TABLE header_list(id INTEGER PRIMARY KEY,digest BLOB NOT NULL UNIQUE,size INTEGER NOT NULL,codec INTEGER NOT NULL,data BLOB NOT NULL);
CREATE TABLE input_list(id INTEGER PRIMARY KEY,digest BLOB NOT NULL UNIQUE,n INTEGER NOT NULL);
CREATE TABLE input_list_item(list_id INTEGER NOT NULL,seq INTEGER NOT NULL,role INTEGER NOT NULL,name TEXT NOT NULL,input_id INTEGER NOT NULL,PRIMARY KEY(list_id,seq))WITHOUT ROWID;
CREATE INDEX input_list_item_by_input ON input_list_item(input_id);
ALTER TABLE entry_info ADD COLUMN headers_id INTEGER;
ALTER TABLE entry_info ADD COLUMN headers_at INTEGER;
ALTER TABLE entry_info ADD COLUMN inputs_id INTEGER;
ALTER TABLE entry_info ADD COLUMN inputs_at INTEGER;
CREATE INDEX entry_info_by_headers ON entry_info(headers_id);
CREATE INDEX entry_info_by_inputs ON entry_info(inputs_id);
