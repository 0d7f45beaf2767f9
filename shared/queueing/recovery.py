"""Finding turns whose delivery was lost.

Postgres is the truth: a turn stays queued or running there until a worker finishes it. If its
task message was lost (Redis was down when the gateway enqueued it, Redis restarted without the
message, a worker died holding it) the sweep finds the session and enqueues a drain again. The
drain is idempotent, so a sweep racing a live worker costs one no-op task.
"""

from __future__ import annotations

import redis

from shared.infra.db import Conn
from shared.infra.locks import is_locked, session_lock_name


def stalled_sessions(conn: Conn, older_than_seconds: float, limit: int = 500) -> list[int]:
    rows = conn.execute(
        """SELECT DISTINCT session_id FROM turns
           WHERE status IN ('queued', 'running') AND updated_at < now() - make_interval(secs => %s)
           LIMIT %s""",
        (older_than_seconds, limit),
    ).fetchall()
    return [int(row["session_id"]) for row in rows]


def sessions_to_redrive(conn: Conn, client: redis.Redis, older_than_seconds: float) -> list[int]:
    """Stalled sessions that no worker is draining right now (no live session lock)."""
    return [sid for sid in stalled_sessions(conn, older_than_seconds) if not is_locked(client, session_lock_name(sid))]


def touch_open_turns(conn: Conn, session_ids: list[int]) -> None:
    """Restart the stall clock so one stalled session is re-driven once per interval, not every sweep."""
    if session_ids:
        conn.execute(
            "UPDATE turns SET updated_at = now() WHERE session_id = ANY(%s) AND status IN ('queued', 'running')",
            (session_ids,),
        )
