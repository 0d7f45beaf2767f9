"""Queue `maintenance`: periodic housekeeping driven by beat."""

from __future__ import annotations

from shared import db
from shared.channels.deliveries import deliveries_to_redrive
from shared.config import get_settings
from shared.logging import get_logger
from shared.pipeline import debounce
from shared.recovery import sessions_to_redrive, touch_open_turns
from shared.redis_client import get_redis
from workers.base import engram_task
from workers.dispatch import enqueue_delivery, enqueue_drain, enqueue_extraction

log = get_logger(__name__)


@engram_task("maintenance")
def redrive_pending_extraction() -> int:
    """Sessions with messages nobody mined for a while (their extraction task was lost): schedule one."""
    settings = get_settings()
    if not settings.auto_memory:
        return 0
    with db.connection() as conn:
        rows = conn.execute(
            """SELECT DISTINCT session_id FROM session_messages
               WHERE extracted_at IS NULL AND created_at < now() - make_interval(secs => %s) LIMIT 200""",
            (settings.extraction_max_wait_seconds * 2,),
        ).fetchall()
    client = get_redis()
    for row in rows:
        plan = debounce.schedule(client, "extract", row["session_id"], debounce=0, max_wait=0)
        enqueue_extraction(row["session_id"], plan.token, plan.countdown)
    return len(rows)


@engram_task("maintenance")
def redrive_stalled_turns() -> int:
    settings = get_settings()
    with db.connection() as conn:
        session_ids = sessions_to_redrive(conn, get_redis(), settings.stalled_turn_seconds)
        touch_open_turns(conn, session_ids)
    for session_id in session_ids:
        enqueue_drain(session_id)
    if session_ids:
        log.info("re-enqueued stalled sessions", sessions=session_ids)
    return len(session_ids)


@engram_task("maintenance")
def redrive_stalled_deliveries() -> int:
    """Channel replies whose task was lost (or that waited out a long Retry-After, or whose worker died
    mid-send): send them again. Sending is claimed in Postgres, so a live task is never doubled."""
    with db.connection() as conn:
        delivery_ids = deliveries_to_redrive(conn, get_settings().channel_stalled_delivery_seconds)
    for delivery_id in delivery_ids:
        enqueue_delivery(delivery_id)
    if delivery_ids:
        log.info("re-enqueued stalled channel deliveries", deliveries=delivery_ids)
    return len(delivery_ids)
