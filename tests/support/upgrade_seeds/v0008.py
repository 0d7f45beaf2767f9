"""0008 channels: a Slack and a Telegram connection with their secrets in plain text (as they were stored
until 0017), an identity, an inbound event and a sent delivery."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert

SECRETS = {
    "acme-slack": {"signing_secret": "slack-signing-8f3a1c0e5d", "bot_token": "xoxb-1111-2222-upgradetoken"},
    "acme-tg": {"bot_token": "123456789:AAupgradeTelegramToken_xyz", "webhook_secret": "tg-webhook-77c1e0"},
}


def seed(conn: Conn, world: World) -> None:
    tenant, alice, turn = world.ids["tenant"], world.ids["alice"], world.ids["turn"]
    for slug, secrets in SECRETS.items():
        kind = "slack" if slug.endswith("slack") else "telegram"
        world.secrets[slug] = secrets
        world.ids[f"connection.{slug}"] = insert(
            conn,
            "INSERT INTO channel_connections (tenant_id, kind, slug, secrets) VALUES (%s, %s, %s, %s) RETURNING id",
            (tenant, kind, slug, Jsonb(secrets)),
        )
    slack = world.ids["connection.acme-slack"]
    conn.execute(
        """INSERT INTO channel_identities (tenant_id, connection_id, platform_user_id, user_id, display_name)
           VALUES (%s, %s, 'U042', %s, 'alice.s')""",
        (tenant, slack, alice),
    )
    event = insert(
        conn,
        """INSERT INTO inbound_events (tenant_id, channel, external_id, connection_id, user_id, payload)
           VALUES (%s, 'slack', 'Ev-second', %s, %s, '{"type": "message"}') RETURNING id""",
        (tenant, slack, alice),
    )
    conn.execute(
        """INSERT INTO channel_deliveries (tenant_id, connection_id, user_id, inbound_event_id, turn_id, target, text,
                                          status, attempts, parts_sent, sent_at)
           VALUES (%s, %s, %s, %s, %s, %s, 'It is 9 in Kyoto.', 'sent', 1, 1, now())""",
        (tenant, slack, alice, event, turn, Jsonb({"channel": "C1", "thread_ts": "1.2"})),
    )
