"""Queue `channels`: post replies and command answers to Slack and Telegram."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from shared.channels.sending import deliver as send_delivery
from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from workers.base import engram_task


@engram_task(
    "channels",
    # Postgres away: try again (the delivery is still pending or leased; platform errors are handled
    # inside, with their own retries, and end as a sent, failed or rescheduled delivery).
    autoretry_for=(DatabaseUnavailable, RedisConnectionError),
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=20,
)
def deliver(delivery_id: int) -> str:
    return send_delivery(delivery_id, get_settings())
