"""Telegram long polling (getUpdates) for installs without a public URL: the same path as the webhook.

Each update goes through `receive_telegram_update` (dedupe by update_id, store, turn or command) and
its work is enqueued like a webhook's. Telegram forgets updates below the next `offset`; one processed
twice (a crash before the next poll) is a duplicate that the dedupe drops. getUpdates refuses to run
while a webhook is set, so polling deletes the webhook first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shared.adapters.telegram_bot_api import TelegramClient
from shared.channels.connections import Connection
from shared.channels.inbound import Accepted
from shared.channels.receive import receive_telegram_update
from shared.infra.config import Settings


@dataclass
class PollState:
    offset: int | None = None
    received: int = 0
    accepted: int = 0
    duplicates: int = 0


def poll_once(
    connection: Connection,
    client: TelegramClient,
    state: PollState,
    settings: Settings,
    dispatch: Callable[[Accepted], None],
    timeout: int = 30,
) -> int:
    """One getUpdates call (waiting up to `timeout` s for updates); returns how many updates it brought."""
    updates = client.get_updates(state.offset, timeout)
    for update in updates:
        update_id = update.get("update_id")
        if isinstance(update_id, int):
            state.offset = max(state.offset or 0, update_id + 1)
        accepted = receive_telegram_update(connection, update, settings)
        state.received += 1
        if accepted is None:
            continue
        if accepted.duplicate:
            state.duplicates += 1
            continue
        state.accepted += 1
        dispatch(accepted)
    return len(updates)
