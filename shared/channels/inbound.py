"""A message from a channel becomes a turn: deduplicate, map the person, submit, plan the reply.

Everything for one platform event happens in the caller's transaction: the `inbound_events` row (unique
per connection and platform event id, so a retried or duplicated delivery finds it and does nothing),
the identity link, the turn (through `shared.turns.accept.submit_turn`, the function the REST API uses) and a
`waiting` delivery for its reply. The caller enqueues the session's drain after commit; if it dies
first, the stalled-turn sweep runs the turn, and finishing the turn makes the reply deliverable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from shared.access.quotas import turn_refusal
from shared.channels.connections import Connection
from shared.channels.identities import Identity, resolve_identity
from shared.infra.db import Conn
from shared.turns.accept import submit_turn

# What the person is told instead of silence.
TOO_LONG = "That message is {length:,} characters long; I can read at most {limit:,}. Could you shorten it?"
BUDGET_SPENT = "I can't take new messages right now: this workspace's monthly usage budget is spent."


@dataclass(frozen=True)
class InboundMessage:
    event_id: str  # the platform's id for this delivery of the event (Slack event_id, Telegram update_id)
    platform_user_id: str
    conversation: str  # channel and thread within the connection: one session each
    text: str
    target: dict[str, Any]  # where the reply goes
    display_name: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)  # kept with the event (erased with the user)


@dataclass(frozen=True)
class Accepted:
    duplicate: bool = False
    session_id: int | None = None  # a turn was queued: drain this session
    tenant_id: int | None = None  # the session's tenant (its drain takes one of the tenant's slots)
    turn_id: int | None = None
    delivery_id: int | None = None  # an answer is ready now: deliver it
    erased_turn_ids: tuple[int, ...] = ()  # /forget erased a user: drop these turns' live streams after commit


def session_key(connection: Connection, conversation: str) -> str:
    return f"{connection.kind}:{connection.slug}:{conversation}"[:128]


def record_event(conn: Conn, connection: Connection, event_id: str, payload: dict[str, Any]) -> int | None:
    """The new inbound_events row's id, or None when this connection has seen the event already."""
    row = conn.execute(
        """INSERT INTO inbound_events (tenant_id, channel, connection_id, external_id, payload)
           VALUES (%s, %s, %s, %s, %s)
           ON CONFLICT (connection_id, external_id) DO NOTHING RETURNING id""",
        (connection.tenant_id, connection.kind, connection.id, event_id, Jsonb(payload)),
    ).fetchone()
    return int(row["id"]) if row else None


def attach_user(conn: Conn, event_row: int, user_id: int | None, turn_id: int | None = None) -> None:
    conn.execute(
        "UPDATE inbound_events SET user_id = %s, turn_id = coalesce(%s, turn_id) WHERE id = %s",
        (user_id, turn_id, event_row),
    )


def plan_answer(
    conn: Conn,
    connection: Connection,
    user_id: int | None,
    event_row: int | None,
    target: dict[str, Any],
    text: str,
) -> int:
    """A delivery of `text` (not a turn's reply: a command's answer or a refusal), ready to send."""
    row = conn.execute(
        """INSERT INTO channel_deliveries (tenant_id, connection_id, user_id, inbound_event_id, target, text)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
        (connection.tenant_id, connection.id, user_id, event_row, Jsonb(target), text),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def accept_message(conn: Conn, connection: Connection, message: InboundMessage, *, max_turn_chars: int) -> Accepted:
    """Store the event and queue its turn (or answer why not), once per platform event."""
    event_row = record_event(conn, connection, message.event_id, message.payload)
    if event_row is None:
        return Accepted(duplicate=True)
    identity = resolve_identity(conn, connection, message.platform_user_id, message.display_name)
    return submit_channel_turn(conn, connection, identity, event_row, message, max_turn_chars=max_turn_chars)


def submit_channel_turn(
    conn: Conn,
    connection: Connection,
    identity: Identity,
    event_row: int,
    message: InboundMessage,
    *,
    max_turn_chars: int,
) -> Accepted:
    attach_user(conn, event_row, identity.user_id)
    refusal = None
    if len(message.text) > max_turn_chars:
        refusal = TOO_LONG.format(length=len(message.text), limit=max_turn_chars)
    elif turn_refusal(conn, connection.tenant_id) is not None:
        refusal = BUDGET_SPENT
    if refusal is not None:
        delivery = plan_answer(conn, connection, identity.user_id, event_row, message.target, refusal)
        return Accepted(delivery_id=delivery)
    submitted = submit_turn(
        conn,
        tenant_id=connection.tenant_id,
        session_key=session_key(connection, message.conversation),
        user_external_id=identity.user_external_id,
        text=message.text,
        name=message.display_name or identity.display_name,
        channel=connection.kind,
    )
    turn = submitted.turn
    attach_user(conn, event_row, identity.user_id, turn["turn_id"])
    conn.execute(
        """INSERT INTO channel_deliveries
               (tenant_id, connection_id, user_id, inbound_event_id, turn_id, target, status)
           VALUES (%s, %s, %s, %s, %s, %s, 'waiting')""",
        (connection.tenant_id, connection.id, identity.user_id, event_row, turn["turn_id"], Jsonb(message.target)),
    )
    return Accepted(session_id=int(turn["session_id"]), tenant_id=connection.tenant_id, turn_id=int(turn["turn_id"]))
