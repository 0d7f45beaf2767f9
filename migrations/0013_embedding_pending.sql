-- Memories waiting for their embedding: `embedded_at` is NULL until the memory's chunks are written (in
-- the same transaction). A memory's embeddable text never changes in place (a new value is a new row), so
-- "active and not embedded" is exactly the work the embeddings queue has left; the partial index lets a
-- batch claim the oldest pending memories without scanning every active one.
ALTER TABLE memories ADD COLUMN IF NOT EXISTS embedded_at timestamptz;

UPDATE memories m SET embedded_at = now()
 WHERE m.embedded_at IS NULL AND EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id);

CREATE INDEX IF NOT EXISTS memories_embedding_pending_idx ON memories (id)
    WHERE embedded_at IS NULL AND valid_until IS NULL;
