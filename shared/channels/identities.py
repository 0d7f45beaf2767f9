"""Who is talking: a platform identity (connection, platform user id) → an engram user.

The first message of an unknown identity creates an engram user named `<kind>:<slug>:<platform id>`
and links it. `link_identity` points identities of several channels at one engram user, so memory
(which is per user) follows the person; sessions stay per channel conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.channels.connections import Connection
from shared.infra.db import Conn
from shared.turns.accept import ensure_user

# Platform ids are short (Slack U0123ABCD, Telegram numbers); this bounds what a link can store.
PLATFORM_ID_PATTERN = r"^[A-Za-z0-9._@-]{1,64}$"


@dataclass(frozen=True)
class Identity:
    user_id: int
    user_external_id: str
    identity_id: int
    display_name: str | None
    profile_fetched: bool


def default_external_id(connection: Connection, platform_user_id: str) -> str:
    return f"{connection.kind}:{connection.slug}:{platform_user_id}"


def find_identity(conn: Conn, connection: Connection, platform_user_id: str) -> Identity | None:
    row = conn.execute(
        """SELECT ci.id, ci.user_id, u.external_id, ci.display_name, ci.profile_fetched_at
             FROM channel_identities ci JOIN users u ON u.id = ci.user_id
            WHERE ci.connection_id = %s AND ci.platform_user_id = %s""",
        (connection.id, platform_user_id),
    ).fetchone()
    if row is None:
        return None
    return Identity(
        user_id=int(row["user_id"]),
        user_external_id=row["external_id"],
        identity_id=int(row["id"]),
        display_name=row["display_name"],
        profile_fetched=row["profile_fetched_at"] is not None,
    )


def resolve_identity(
    conn: Conn, connection: Connection, platform_user_id: str, display_name: str | None = None
) -> Identity:
    """The identity's engram user, created and linked on first sight. A display name the platform sent
    with the message (Telegram does) is kept, and given to the user when their profile has none."""
    found = find_identity(conn, connection, platform_user_id)
    if found is None:
        user_id = ensure_user(conn, connection.tenant_id, default_external_id(connection, platform_user_id))
        conn.execute(
            """INSERT INTO channel_identities (tenant_id, connection_id, platform_user_id, user_id)
               VALUES (%s, %s, %s, %s) ON CONFLICT (connection_id, platform_user_id) DO NOTHING""",
            (connection.tenant_id, connection.id, platform_user_id, user_id),
        )
        found = find_identity(conn, connection, platform_user_id)
        assert found is not None
    if display_name and not found.profile_fetched:
        record_display_name(conn, found, display_name)
    return found


def record_display_name(conn: Conn, identity: Identity, display_name: str | None) -> None:
    """Keep the platform's name for the identity (fetched once), and give it to a user without one."""
    name = (display_name or "").strip()[:200] or None
    conn.execute(
        "UPDATE channel_identities SET display_name = %s, profile_fetched_at = now() WHERE id = %s",
        (name, identity.identity_id),
    )
    if name:
        conn.execute(
            "UPDATE users SET display_name = %s, updated_at = now() WHERE id = %s AND display_name IS NULL",
            (name, identity.user_id),
        )


def link_identity(conn: Conn, connection: Connection, platform_user_id: str, user_external_id: str) -> dict[str, Any]:
    """Point the identity at the engram user `user_external_id` (created if new). What the identity's
    previous user already holds stays with that user: link identities before they are used, or move
    memories over the REST API."""
    user_id = ensure_user(conn, connection.tenant_id, user_external_id)
    previous = find_identity(conn, connection, platform_user_id)
    conn.execute(
        """INSERT INTO channel_identities (tenant_id, connection_id, platform_user_id, user_id)
           VALUES (%s, %s, %s, %s)
           ON CONFLICT (connection_id, platform_user_id) DO UPDATE SET user_id = EXCLUDED.user_id""",
        (connection.tenant_id, connection.id, platform_user_id, user_id),
    )
    return {
        "kind": connection.kind,
        "connection": connection.slug,
        "platform_user_id": platform_user_id,
        "user_id": user_external_id,
        "previous_user_id": previous.user_external_id if previous and previous.user_id != user_id else None,
    }


def list_identities(conn: Conn, tenant_id: int, user_external_id: str | None = None) -> list[dict[str, Any]]:
    return conn.execute(
        """SELECT c.kind, c.slug AS connection, ci.platform_user_id, u.external_id AS user_id, ci.display_name,
                  ci.created_at
             FROM channel_identities ci
             JOIN channel_connections c ON c.id = ci.connection_id
             JOIN users u ON u.id = ci.user_id
            WHERE ci.tenant_id = %s AND (%s::text IS NULL OR u.external_id = %s)
            ORDER BY u.external_id, c.kind, c.slug, ci.platform_user_id""",
        (tenant_id, user_external_id, user_external_id),
    ).fetchall()
