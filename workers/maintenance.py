"""Queue `maintenance`: periodic housekeeping driven by beat."""

from __future__ import annotations

from shared import db
from shared.config import get_settings
from shared.logging import get_logger
from shared.recovery import sessions_to_redrive, touch_open_turns
from shared.redis_client import get_redis
from workers.base import engram_task
from workers.dispatch import enqueue_drain

log = get_logger(__name__)


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
