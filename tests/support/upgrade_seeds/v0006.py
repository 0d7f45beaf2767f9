"""0006 key scopes: a read-only key bound to one user (the key from 0001 gets every scope but metrics)."""

from __future__ import annotations

from shared.access.auth import hash_key
from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert

KEY = "egm_upgrade-test-read-only-key-for-alice"


def seed(conn: Conn, world: World) -> None:
    world.keys["alice_read"] = KEY
    world.ids["key.alice_read"] = insert(
        conn,
        """INSERT INTO api_keys (tenant_id, name, key_prefix, key_hash, scopes, user_external_id)
           VALUES (%s, 'alice-read', %s, %s, ARRAY['memory:read'], 'alice') RETURNING id""",
        (world.ids["tenant"], KEY[:10], hash_key(KEY)),
    )
