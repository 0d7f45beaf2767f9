-- "What You Know" frozen per session epoch (shared/context/epoch.py): the memories a session's static
-- prompt lists until the epoch is rebuilt, so a memory written mid-session does not rewrite the cached
-- prompt prefix. One row per session; every worker reads the same one.
CREATE TABLE IF NOT EXISTS session_prompt_epochs (
    session_id       bigint PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    tenant_id        bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id          bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    memory_ids       bigint[] NOT NULL,
    knowledge_digest text NOT NULL,      -- of the rendered list: an edited frozen memory forces a rebuild
    base_digest      text NOT NULL,      -- of the rest of the static prompt: a profile change forces one
    compaction_count integer NOT NULL,   -- the session's at build time: a compaction forces one
    reason           text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS session_prompt_epochs_user ON session_prompt_epochs (tenant_id, user_id);
