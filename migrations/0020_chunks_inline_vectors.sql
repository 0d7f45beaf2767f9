-- A transcript unit's row (its words, their tsvector and a 384-dim vector) is about 2.5 kB, over the 2 kB at
-- which Postgres starts moving a row's largest values out of line: the vector (pgvector's storage is
-- EXTERNAL) went to the TOAST table, and every distance the search computes on a row it found by user (the
-- exact scan of a small user's units, the similarities of the other legs' candidates) fetched it from there
-- again through the TOAST index. Rows up to a page now keep their values inline. Rows stored before this
-- keep their out-of-line vectors until rewritten (`VACUUM FULL memory_chunks` in a maintenance window, or a
-- re-index). The setting takes a lock that neither readers nor writers wait on.
ALTER TABLE memory_chunks SET (toast_tuple_target = 8160);
