"""One platform event in, in one transaction: what the webhooks and the Telegram poller both call.

They verify the request first (signature / secret token); then this reads the event, and stores and
queues it through `shared.channels.inbound` (or answers a command). The caller enqueues the work after
commit (`workers.dispatch.dispatch_accepted`), and drops the live streams of an erased user.
"""

from __future__ import annotations

from typing import Any

from shared.channels import slack, telegram
from shared.channels.commands import accept_update
from shared.channels.connections import Connection
from shared.channels.inbound import Accepted, InboundMessage, accept_message
from shared.infra import db
from shared.infra.config import Settings


def receive_slack_event(connection: Connection, payload: dict[str, Any], settings: Settings) -> Accepted | None:
    """None when the event is not one engram answers (bot messages, edits, channel chatter…)."""
    message = slack.read_event(payload)
    if message is None:
        return None
    target: dict[str, Any] = {"channel": message.channel, "user": message.user}
    if message.reply_thread_ts:
        target["thread_ts"] = message.reply_thread_ts
    inbound = InboundMessage(
        event_id=message.event_id,
        platform_user_id=message.user,
        conversation=f"{message.channel}:{message.thread}",
        text=message.text,
        target=target,
        payload={"event": payload.get("event"), "team_id": payload.get("team_id")},
    )
    with db.connection() as conn:
        return accept_message(conn, connection, inbound, max_turn_chars=settings.max_turn_chars)


def receive_telegram_update(connection: Connection, update: dict[str, Any], settings: Settings) -> Accepted | None:
    message = telegram.read_update(update, connection.telegram_bot_id, connection.bot_username)
    if message is None:
        return None
    with db.connection() as conn:
        return accept_update(conn, connection, message, update, max_turn_chars=settings.max_turn_chars)
