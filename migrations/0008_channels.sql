-- Chat channels (Slack, Telegram): a tenant's bot connections, the platform identities that map to
-- engram users, and the replies to deliver. Every statement is idempotent.

-- A bot of one tenant on one platform. The webhook URL names it by (kind, slug), without the tenant,
-- so a slug is unique per platform. `secrets` holds the signing secret / bot token / webhook secret:
-- it is read only by the code that verifies and sends, never returned, logged or put in an error.
CREATE TABLE IF NOT EXISTS channel_connections (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    kind            text NOT NULL CHECK (kind IN ('slack', 'telegram')),
    slug            text NOT NULL,
    secrets         jsonb NOT NULL DEFAULT '{}',
    bot_username    text,                       -- Telegram: the bot's @name, to see mentions in groups
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, slug)
);
CREATE INDEX IF NOT EXISTS channel_connections_tenant_idx ON channel_connections (tenant_id);

-- (connection, platform user) → engram user. Linking two identities to one user makes memory follow
-- the person across channels; sessions stay per channel conversation.
CREATE TABLE IF NOT EXISTS channel_identities (
    id                  bigserial PRIMARY KEY,
    tenant_id           bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    connection_id       bigint NOT NULL REFERENCES channel_connections(id) ON DELETE CASCADE,
    platform_user_id    text NOT NULL,
    user_id             bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    display_name        text,                   -- fetched from the platform once, then kept
    profile_fetched_at  timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (connection_id, platform_user_id)
);
CREATE INDEX IF NOT EXISTS channel_identities_user_idx ON channel_identities (user_id);

-- Platform events are deduplicated per connection: Slack event ids and Telegram update ids are only
-- unique per app / bot, so the former (tenant, channel, external id) key could merge two bots' events.
ALTER TABLE inbound_events ADD COLUMN IF NOT EXISTS connection_id bigint
    REFERENCES channel_connections(id) ON DELETE CASCADE;
ALTER TABLE inbound_events ADD COLUMN IF NOT EXISTS user_id bigint REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE inbound_events DROP CONSTRAINT IF EXISTS inbound_events_tenant_id_channel_external_id_key;
CREATE UNIQUE INDEX IF NOT EXISTS inbound_events_connection_event_idx ON inbound_events (connection_id, external_id);
CREATE INDEX IF NOT EXISTS inbound_events_turn_idx ON inbound_events (turn_id);
CREATE INDEX IF NOT EXISTS inbound_events_user_idx ON inbound_events (user_id);

-- One answer to post on a platform: a turn's reply (created `waiting` with the inbound event, made
-- `pending` in the transaction that finishes the turn) or a command's answer (created `pending`).
-- `parts_sent` lets a retried delivery resume after the parts already posted.
CREATE TABLE IF NOT EXISTS channel_deliveries (
    id                  bigserial PRIMARY KEY,
    tenant_id           bigint NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    connection_id       bigint NOT NULL REFERENCES channel_connections(id) ON DELETE CASCADE,
    -- NULL only for the answer to an erasure (/forget), sent after the user is gone.
    user_id             bigint REFERENCES users(id) ON DELETE CASCADE,
    inbound_event_id    bigint REFERENCES inbound_events(id) ON DELETE SET NULL,
    turn_id             bigint UNIQUE REFERENCES turns(id) ON DELETE CASCADE,
    target              jsonb NOT NULL,         -- where to post (Slack channel + thread, Telegram chat + reply)
    text                text,
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('waiting', 'pending', 'sending', 'sent', 'failed')),
    attempts            integer NOT NULL DEFAULT 0,
    parts_sent          integer NOT NULL DEFAULT 0,
    last_error          text,
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    lease_until         timestamptz,            -- a `sending` delivery belongs to its worker until then
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz
);
CREATE INDEX IF NOT EXISTS channel_deliveries_open_idx ON channel_deliveries (next_attempt_at)
    WHERE status IN ('pending', 'sending');
CREATE INDEX IF NOT EXISTS channel_deliveries_tenant_idx ON channel_deliveries (tenant_id, status, id);
CREATE INDEX IF NOT EXISTS channel_deliveries_user_idx ON channel_deliveries (user_id);
