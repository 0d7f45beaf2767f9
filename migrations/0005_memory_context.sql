-- Full text over a memory's context (`metadata.context`, see shared/memory/store.py): the text around
-- where the memory came from, e.g. the neighbouring turns of a conversation episode. Its words get the
-- lowest label (D) so search ranks them below the key (A) and value (B) words (search.TERM_WEIGHTS).
-- A generated column's expression cannot be changed in place before Postgres 17, so the column and
-- its index are rebuilt (one table rewrite).
ALTER TABLE memories DROP COLUMN IF EXISTS search_tsv;
ALTER TABLE memories ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', translate(key, '-/_', '   ')), 'A')
    || setweight(to_tsvector('english', value), 'B')
    || setweight(to_tsvector('english', coalesce(metadata->>'context', '')), 'D')) STORED;
CREATE INDEX IF NOT EXISTS memories_tsv_idx ON memories USING gin (search_tsv);
