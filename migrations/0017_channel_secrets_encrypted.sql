-- Channel secrets at rest: `secrets_encrypted` maps each secret's name (signing_secret, bot_token,
-- webhook_secret) to a Fernet token made with ENGRAM_SECRET_KEY or the data dir's generated key file
-- (shared/secretbox.py). SQL has no key, so this migration cannot encrypt: the rows it finds keep their
-- plain `secrets` until `engram up` / `engram migrate` / `engram secrets rotate` encrypt them in code and
-- empty that column (shared/channels/connections.py seal_plain_secrets). Code reads a row's plain secrets
-- while they are there, so nothing stops working in between.
ALTER TABLE channel_connections ADD COLUMN IF NOT EXISTS secrets_encrypted jsonb NOT NULL DEFAULT '{}';
