-- Memory store: one table for every kind of knowledge, its chunks and vectors, entities, history.

CREATE TABLE IF NOT EXISTS memories (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    namespace       text NOT NULL,             -- tacit/preferences, daily/2026-11-21, entity/default, profile/…
    key             text NOT NULL,
    value           text NOT NULL,
    kind            text NOT NULL DEFAULT 'fact' CHECK (kind IN (
                        'fact', 'episode', 'preference', 'style', 'directive', 'artifact',
                        'reflection', 'summary', 'document')),
    tags            text[] NOT NULL DEFAULT '{}',
    metadata        jsonb NOT NULL DEFAULT '{}',   -- reinforced_count, first_observed, last_reinforced, supersedes…
    confidence      real NOT NULL DEFAULT 1.0 CHECK (confidence >= 0 AND confidence <= 1),
    decay_rate      real NOT NULL DEFAULT 0.01 CHECK (decay_rate >= 0),   -- 0 = protected
    access_count    integer NOT NULL DEFAULT 0,
    last_accessed_at timestamptz,
    event_time      timestamptz,                   -- when the remembered thing happened, if known
    valid_from      timestamptz NOT NULL DEFAULT now(),
    valid_until     timestamptz,                   -- NULL = active; set = superseded or deleted
    source          text NOT NULL DEFAULT 'api',   -- who wrote it: api, agent, extraction, flush, …
    source_session_id bigint REFERENCES sessions(id) ON DELETE SET NULL,
    source_message_ids bigint[] NOT NULL DEFAULT '{}',
    supersedes_id   bigint REFERENCES memories(id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- Key words weigh more than value words; hyphenated keys are split into words.
    search_tsv      tsvector GENERATED ALWAYS AS (
                        setweight(to_tsvector('english', translate(key, '-/_', '   ')), 'A')
                        || setweight(to_tsvector('english', value), 'B')) STORED
);
CREATE UNIQUE INDEX IF NOT EXISTS memories_active_key_idx ON memories (user_id, namespace, key)
    WHERE valid_until IS NULL;
CREATE INDEX IF NOT EXISTS memories_user_ns_idx ON memories (user_id, namespace text_pattern_ops)
    WHERE valid_until IS NULL;
CREATE INDEX IF NOT EXISTS memories_tsv_idx ON memories USING gin (search_tsv);
CREATE INDEX IF NOT EXISTS memories_tags_idx ON memories USING gin (tags);
CREATE INDEX IF NOT EXISTS memories_tenant_idx ON memories (tenant_id);

-- Text blocks that are embedded: chunks of a memory, or blocks of a session transcript.
-- `embedding` has no dimension here: it is fixed (and the HNSW index built) the first time an
-- embedding model is used; see shared/embeddings/space.py.
CREATE TABLE IF NOT EXISTS memory_chunks (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    memory_id       bigint REFERENCES memories(id) ON DELETE CASCADE,
    session_id      bigint REFERENCES sessions(id) ON DELETE CASCADE,
    chunk_index     integer NOT NULL DEFAULT 0,
    text            text NOT NULL,
    start_char      integer NOT NULL DEFAULT 0,
    end_char        integer NOT NULL DEFAULT 0,
    first_message_id bigint,                    -- transcript blocks: the messages they cover
    last_message_id  bigint,
    content_hash    text NOT NULL,
    embedding       vector,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (memory_id IS NOT NULL OR session_id IS NOT NULL)
);
CREATE INDEX IF NOT EXISTS memory_chunks_memory_idx ON memory_chunks (memory_id);
CREATE INDEX IF NOT EXISTS memory_chunks_user_idx ON memory_chunks (user_id);
CREATE INDEX IF NOT EXISTS memory_chunks_session_idx ON memory_chunks (session_id) WHERE memory_id IS NULL;

-- sha256(text) → vector, per model, so identical text is embedded once.
CREATE TABLE IF NOT EXISTS embedding_cache (
    model           text NOT NULL,
    dimension       integer NOT NULL,
    content_hash    text NOT NULL,
    embedding       vector NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_used_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, dimension, content_hash)
);

-- The one embedding model + dimension this database's vectors belong to.
CREATE TABLE IF NOT EXISTS embedding_space (
    id              boolean PRIMARY KEY DEFAULT true CHECK (id),
    provider        text NOT NULL,
    model           text NOT NULL,
    dimension       integer NOT NULL,
    status          text NOT NULL DEFAULT 'ready' CHECK (status IN ('ready', 'reindexing')),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS entities (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    canonical_name  text NOT NULL,
    normalized_name text NOT NULL,
    entity_type     text NOT NULL,              -- person, email, url, hashtag, mention, …
    aliases         text[] NOT NULL DEFAULT '{}',   -- normalized alternative names
    mention_count   integer NOT NULL DEFAULT 0,
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, entity_type, normalized_name)
);
CREATE INDEX IF NOT EXISTS entities_aliases_idx ON entities USING gin (aliases);

CREATE TABLE IF NOT EXISTS memory_entities (
    memory_id       bigint NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    entity_id       bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    PRIMARY KEY (memory_id, entity_id)
);
CREATE INDEX IF NOT EXISTS memory_entities_entity_idx ON memory_entities (entity_id);

-- History: every add, update, reinforce, supersede, confirm and delete, with old and new value.
CREATE TABLE IF NOT EXISTS memory_events (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id         bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    memory_id       bigint REFERENCES memories(id) ON DELETE SET NULL,
    action          text NOT NULL CHECK (action IN (
                        'add', 'update', 'reinforce', 'supersede', 'confirm', 'delete')),
    namespace       text NOT NULL,
    key             text NOT NULL,
    old_value       text,
    new_value       text,
    actor           text NOT NULL,              -- api, agent, extraction, flush, consolidation, …
    details         jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS memory_events_memory_idx ON memory_events (memory_id, id);
CREATE INDEX IF NOT EXISTS memory_events_user_idx ON memory_events (user_id, id);
