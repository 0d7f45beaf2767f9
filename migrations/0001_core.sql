-- Core schema: tenants, keys, users, sessions, messages, turns, inbound channel events.
-- Every statement is idempotent so a half-applied database can be migrated again.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS tenants (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS api_keys (
    id          bigserial PRIMARY KEY,
    tenant_id   bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name        text NOT NULL DEFAULT '',
    key_prefix  text NOT NULL,                 -- first characters, to tell keys apart in listings
    key_hash    text NOT NULL UNIQUE,          -- sha256 hex of the whole key; the key itself is never stored
    created_at  timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at  timestamptz
);

CREATE TABLE IF NOT EXISTS users (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    external_id     text NOT NULL,
    display_name    text,
    location        text,
    timezone        text,
    occupation      text,
    interests       jsonb NOT NULL DEFAULT '[]',
    goals           jsonb NOT NULL DEFAULT '[]',
    context         text,
    communication_style text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, external_id)
);

CREATE TABLE IF NOT EXISTS sessions (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    channel         text NOT NULL DEFAULT 'api',
    session_key     text NOT NULL,
    summary         text,
    active_task     text,
    token_count     integer NOT NULL DEFAULT 0,
    compaction_count integer NOT NULL DEFAULT 0,
    memory_flush_compaction_count integer NOT NULL DEFAULT -1,
    last_extracted_message_id bigint NOT NULL DEFAULT 0,
    last_embedded_message_id  bigint NOT NULL DEFAULT 0,
    consolidated_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, channel, session_key)
);
CREATE INDEX IF NOT EXISTS sessions_tenant_idx ON sessions (tenant_id);

CREATE TABLE IF NOT EXISTS turns (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    session_id      bigint NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    status          text NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'done', 'failed')),
    idempotency_key text,
    request_hash    text,                       -- of (session, user, text): a reused key with other content is refused
    attempts        integer NOT NULL DEFAULT 0,
    reply           text,
    error           text,
    usage           jsonb NOT NULL DEFAULT '{}',
    timings         jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS turns_idempotency_idx ON turns (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS turns_session_open_idx ON turns (session_id, id) WHERE status IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS turns_open_idx ON turns (updated_at) WHERE status IN ('queued', 'running');

CREATE TABLE IF NOT EXISTS session_messages (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    session_id      bigint NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    -- Messages are ordered by (turn_id, id): a turn's replies sort right after its user message even
    -- when later turns of the session were already queued (and their user messages written) before it ran.
    turn_id         bigint REFERENCES turns(id) ON DELETE SET NULL,
    role            text NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content         text NOT NULL DEFAULT '',
    tool_calls      jsonb,
    tool_results    jsonb,
    token_estimate  integer NOT NULL DEFAULT 0,
    is_compacted    boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    search_tsv      tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
);
CREATE INDEX IF NOT EXISTS session_messages_order_idx ON session_messages (session_id, turn_id, id);
CREATE INDEX IF NOT EXISTS session_messages_user_idx ON session_messages (user_id);
CREATE INDEX IF NOT EXISTS session_messages_tsv_idx ON session_messages USING gin (search_tsv);

CREATE TABLE IF NOT EXISTS inbound_events (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    channel         text NOT NULL,
    external_id     text NOT NULL,
    turn_id         bigint REFERENCES turns(id) ON DELETE SET NULL,
    payload         jsonb NOT NULL DEFAULT '{}',
    received_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, channel, external_id)
);
