-- Background memory pipeline: flush watermark, compaction recovery flag, stored documents, LLM call ledger.

ALTER TABLE sessions ADD COLUMN IF NOT EXISTS last_flushed_message_id bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS recovery_pending boolean NOT NULL DEFAULT false;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS compacted_at timestamptz;

-- Large tool results moved out of the conversation at compaction; the agent reads them back by id.
CREATE TABLE IF NOT EXISTS documents (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    session_id      bigint REFERENCES sessions(id) ON DELETE CASCADE,
    source_message_id bigint UNIQUE,            -- one document per moved tool result, even if compaction re-runs
    title           text NOT NULL,
    content         text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS documents_user_idx ON documents (tenant_id, user_id);

-- Every LLM call, by purpose: what a turn, a session or a tenant costs.
CREATE TABLE IF NOT EXISTS llm_calls (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint REFERENCES users(id) ON DELETE CASCADE,
    session_id      bigint REFERENCES sessions(id) ON DELETE CASCADE,
    turn_id         bigint REFERENCES turns(id) ON DELETE CASCADE,
    purpose         text NOT NULL CHECK (purpose IN ('chat', 'extraction', 'flush', 'summary', 'synthesis', 'reflection')),
    provider        text NOT NULL,
    model           text NOT NULL,
    input_tokens    integer NOT NULL DEFAULT 0,
    output_tokens   integer NOT NULL DEFAULT 0,
    cache_read_tokens integer NOT NULL DEFAULT 0,
    cache_write_tokens integer NOT NULL DEFAULT 0,
    duration_ms     integer NOT NULL DEFAULT 0,
    ok              boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS llm_calls_session_idx ON llm_calls (session_id, purpose);
CREATE INDEX IF NOT EXISTS llm_calls_turn_idx ON llm_calls (turn_id);
CREATE INDEX IF NOT EXISTS llm_calls_tenant_time_idx ON llm_calls (tenant_id, created_at);

-- Per-message marks: exact even when messages commit out of id order (a watermark alone could skip
-- a message whose transaction committed after a later id was already mined).
ALTER TABLE session_messages ADD COLUMN IF NOT EXISTS extracted_at timestamptz;
ALTER TABLE session_messages ADD COLUMN IF NOT EXISTS embedded_at timestamptz;
CREATE INDEX IF NOT EXISTS session_messages_unextracted_idx ON session_messages (session_id, id)
    WHERE extracted_at IS NULL;
CREATE INDEX IF NOT EXISTS session_messages_unembedded_idx ON session_messages (session_id, id)
    WHERE embedded_at IS NULL AND is_compacted;
