-- kcache schema, version 6: no triggers.
--
-- SQLite parses every object of the schema when a connection first reads,
-- and a hit is often a whole process: the five triggers were half of that
-- parse (0.54 M of the 2.52 M instructions of a `kcache compile` hit). The
-- statements that delete entries now say what goes with them, and keep the
-- totals, themselves (lib/store/prune.c); a put adds to the totals. The
-- tables and the totals are as version 5 left them. A kcache of version 5
-- or older opens this file read-only ("written by a newer kcache"), so no
-- build that relies on the triggers ever writes it.
DROP TRIGGER entry_added;
DROP TRIGGER entry_removed;
DROP TRIGGER entry_input_removed;
DROP TRIGGER entry_manifests_removed;
DROP TRIGGER manifest_removed;
