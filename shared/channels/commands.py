"""Telegram updates in: commands answered directly (/start, /memory, /forget), everything else a turn.

/forget asks first: it answers with a six-digit code, and only `/forget <code>` erases. The code is an
HMAC of the bot token, the person and a ten-minute window (the current or the previous window is
accepted), so nothing needs storing between the two messages and a code cannot be guessed or reused
next hour. Erasure is the one the REST API runs (`erase_user`): every row of the person, including
their identity links on every channel, in the same transaction that records the update.
/memory and /forget only answer in private chats: in a group they would show or erase in public.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

from shared.channels.connections import Connection
from shared.channels.identities import Identity, resolve_identity
from shared.channels.inbound import (
    Accepted,
    InboundMessage,
    attach_user,
    plan_answer,
    record_event,
    submit_channel_turn,
)
from shared.channels.telegram import TelegramMessage
from shared.infra.db import Conn
from shared.memory.reads import list_memories
from shared.memory.store import Scope
from shared.memory.userdata import erase_user

FORGET_WINDOW_SECONDS = 600
MEMORY_LIST_LIMIT = 50

GREETING = (
    "Hi{name}! I'm an assistant with a memory: what you tell me (your preferences, plans, the people and "
    "things you mention) I keep, so next week you don't have to say it again.\n\n"
    "- /memory shows what I remember about you\n"
    "- /forget erases everything I know about you (I'll ask you to confirm first)\n\n"
    "Just write to me to start."
)
PRIVATE_ONLY = "Send me /{command} in a private chat: here everyone in the group would see it."
FORGET_PROMPT = (
    "This erases everything I know about you: memories, conversations, your profile, on every channel "
    "linked to you. It cannot be undone.\n\nTo confirm, send: /forget {code}\n\n(The code works for ten minutes.)"
)
FORGET_WRONG_CODE = "That code doesn't match (or it expired). Send /forget to get a new one."
FORGOTTEN = "Done: I've erased everything I knew about you. If you write again, I start from scratch."
NOTHING_KNOWN = "I don't remember anything about you yet. Tell me about yourself and I'll keep it in mind."


def forget_code(connection: Connection, platform_user_id: str, window: int) -> str:
    digest = hmac.new(
        connection.secret("bot_token").encode(),
        f"forget:{connection.id}:{platform_user_id}:{window}".encode(),
        hashlib.sha256,
    ).digest()
    return f"{int.from_bytes(digest[:8], 'big') % 1_000_000:06d}"


def forget_code_valid(connection: Connection, platform_user_id: str, code: str, now: float) -> bool:
    window = int(now // FORGET_WINDOW_SECONDS)
    return any(
        hmac.compare_digest(code.strip(), forget_code(connection, platform_user_id, w)) for w in (window, window - 1)
    )


def memory_listing(conn: Conn, identity: Identity, tenant_id: int) -> str:
    rows = list_memories(conn, Scope(tenant_id, identity.user_id), limit=MEMORY_LIST_LIMIT + 1)
    if not rows:
        return NOTHING_KNOWN
    lines = [f"- **{row['key']}** ({row['namespace']}): {row['value']}" for row in rows[:MEMORY_LIST_LIMIT]]
    more = f"\n\n…and more: the newest {MEMORY_LIST_LIMIT} are shown." if len(rows) > MEMORY_LIST_LIMIT else ""
    return "Here is what I remember about you, newest first:\n\n" + "\n".join(lines) + more


def accept_update(
    conn: Conn,
    connection: Connection,
    message: TelegramMessage,
    payload: dict[str, Any],
    *,
    max_turn_chars: int,
    now: float | None = None,
) -> Accepted:
    """Store the update once (by update_id) and queue its turn, or answer its command."""
    forgetting = message.command == "forget"
    # An erasure request keeps nothing of the person with its dedupe row: it outlives their data.
    event_row = record_event(conn, connection, str(message.update_id), {} if forgetting else payload)
    if event_row is None:
        return Accepted(duplicate=True)
    identity = resolve_identity(conn, connection, message.user_id, message.display_name)
    target = message.target()
    if message.command is None:
        inbound = InboundMessage(
            event_id=str(message.update_id),
            platform_user_id=message.user_id,
            conversation=message.conversation,
            text=message.text,
            target=target,
            display_name=message.display_name,
            payload=payload,
        )
        return submit_channel_turn(conn, connection, identity, event_row, inbound, max_turn_chars=max_turn_chars)
    if not forgetting:
        attach_user(conn, event_row, identity.user_id)
    if message.command == "start":
        name = f", {message.display_name.split(' ')[0]}" if message.display_name else ""
        text = GREETING.format(name=name)
    elif not message.private:
        text = PRIVATE_ONLY.format(command=message.command)
    elif message.command == "memory":
        text = memory_listing(conn, identity, connection.tenant_id)
    elif not message.argument:
        window = int((now if now is not None else time.time()) // FORGET_WINDOW_SECONDS)
        text = FORGET_PROMPT.format(code=forget_code(connection, message.user_id, window))
    elif not forget_code_valid(connection, message.user_id, message.argument, now if now is not None else time.time()):
        text = FORGET_WRONG_CODE
    else:
        erasure = erase_user(conn, Scope(connection.tenant_id, identity.user_id))
        delivery = plan_answer(conn, connection, None, event_row, target, FORGOTTEN)
        return Accepted(delivery_id=delivery, erased_turn_ids=tuple(erasure.turn_ids))
    return Accepted(delivery_id=plan_answer(conn, connection, identity.user_id, event_row, target, text))
