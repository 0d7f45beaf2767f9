-- API key scopes and user-bound keys. Keys that existed before scopes keep full access, so an
-- upgrade locks nobody out; new keys name their scopes.

ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS scopes text[] NOT NULL
    DEFAULT ARRAY['chat', 'memory:read', 'memory:write', 'admin'];
-- A user-bound key acts for this one user of its tenant (by external id: the user may not exist yet).
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS user_external_id text;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS rotated_from bigint REFERENCES api_keys(id) ON DELETE SET NULL;
CREATE INDEX IF NOT EXISTS api_keys_tenant_idx ON api_keys (tenant_id);
