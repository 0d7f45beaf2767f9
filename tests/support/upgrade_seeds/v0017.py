"""0017 encrypted channel secrets: a connection written as this release writes one (each secret a Fernet
token in `secrets_encrypted`, the plain column empty). The plain rows of 0008 are sealed by `engram migrate`
after the last migration."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.infra.secretbox import keyring
from tests.support.upgrade_seeds import World, insert

SECRETS = {"signing_secret": "slack-signing-after-0017", "bot_token": "xoxb-3333-4444-sealedtoken"}


def seed(conn: Conn, world: World) -> None:
    ring = keyring(get_settings())
    sealed = {name: ring.seal(value) for name, value in SECRETS.items()}
    world.secrets["acme-sealed"] = SECRETS
    world.ids["connection.acme-sealed"] = insert(
        conn,
        """INSERT INTO channel_connections (tenant_id, kind, slug, secrets_encrypted)
           VALUES (%s, 'slack', 'acme-sealed', %s) RETURNING id""",
        (world.ids["tenant"], Jsonb(sealed)),
    )
