-- Message ingest: conversations engram does not run arrive as batches of messages. A batch is a row
-- of `turns` with kind 'ingest' (born 'done': there is nothing to run), so its messages take their
-- place in the session's (turn_id, id) order like a chat turn's, and its Idempotency-Key shares the
-- turns' unique index. A message may carry its own idempotency key (imports), unique per session.

ALTER TABLE turns ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'chat';
DO $$
BEGIN
    ALTER TABLE turns ADD CONSTRAINT turns_kind_check CHECK (kind IN ('chat', 'ingest'));
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
-- An ingest batch: the client's metadata and the message ids answered (replayed as they were).
ALTER TABLE turns ADD COLUMN IF NOT EXISTS details jsonb NOT NULL DEFAULT '{}';

-- The speaker's or tool's name an outside conversation gave the message, if any.
ALTER TABLE session_messages ADD COLUMN IF NOT EXISTS name text;
ALTER TABLE session_messages ADD COLUMN IF NOT EXISTS idempotency_key text;
CREATE UNIQUE INDEX IF NOT EXISTS session_messages_idempotency_idx ON session_messages (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
