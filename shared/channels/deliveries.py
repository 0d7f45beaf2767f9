"""The state of channel deliveries in Postgres: ready, claimed, progressed, sent or failed.

A turn's delivery is `waiting` until the transaction that finishes the turn makes it `pending` with the
reply (or, for a failed turn, a message saying so). A delivery task claims a pending one for the task's
longest run (a lease), records each part it posts, and ends it `sent` or `failed`; a worker that dies
mid-send leaves the lease to run out, and the sweep hands the delivery to a new task, which resumes
after the parts already posted. The sweep also re-enqueues pending deliveries whose task was lost.
"""

from __future__ import annotations

from typing import Any

from shared.infra.db import Conn

FAILED_TURN_TEXT = "Sorry, something went wrong and I couldn't answer that. Please try again in a moment."
EMPTY_REPLY_TEXT = "(I have nothing to add to that.)"
DELIVERY_STATUSES = ("waiting", "pending", "sending", "sent", "failed")


def reply_ready(conn: Conn, turn_id: int) -> int | None:
    """In the transaction that finished the turn: its delivery (if it came from a channel) becomes
    pending with the reply, or with the failure notice. Returns the delivery id to enqueue after commit."""
    row = conn.execute(
        """UPDATE channel_deliveries d
              SET status = 'pending', next_attempt_at = now(), updated_at = now(),
                  text = CASE WHEN t.status = 'done' THEN coalesce(nullif(btrim(t.reply), ''), %s) ELSE %s END
             FROM turns t
            WHERE d.turn_id = %s AND t.id = d.turn_id AND d.status = 'waiting' AND t.status IN ('done', 'failed')
        RETURNING d.id""",
        (EMPTY_REPLY_TEXT, FAILED_TURN_TEXT, turn_id),
    ).fetchone()
    return int(row["id"]) if row else None


def claim(conn: Conn, delivery_id: int, lease_seconds: float) -> dict[str, Any] | None:
    """Take a pending delivery (or one whose previous worker's lease ran out); None if it is not ours."""
    return conn.execute(
        """UPDATE channel_deliveries
              SET status = 'sending', lease_until = now() + make_interval(secs => %s), updated_at = now()
            WHERE id = %s AND text IS NOT NULL
              AND ((status = 'pending' AND next_attempt_at <= now())
                   OR (status = 'sending' AND lease_until < now()))
        RETURNING *""",
        (lease_seconds, delivery_id),
    ).fetchone()


def part_sent(conn: Conn, delivery_id: int, parts_sent: int, tries: int) -> None:
    conn.execute(
        """UPDATE channel_deliveries SET parts_sent = greatest(parts_sent, %s), attempts = attempts + %s,
               updated_at = now() WHERE id = %s""",
        (parts_sent, tries, delivery_id),
    )


def finish_sent(conn: Conn, delivery_id: int, tries: int) -> None:
    conn.execute(
        """UPDATE channel_deliveries SET status = 'sent', attempts = attempts + %s, sent_at = now(),
               lease_until = NULL, last_error = NULL, updated_at = now() WHERE id = %s""",
        (tries, delivery_id),
    )


def finish_failed(conn: Conn, delivery_id: int, tries: int, error: str) -> None:
    conn.execute(
        """UPDATE channel_deliveries SET status = 'failed', attempts = attempts + %s, last_error = %s,
               lease_until = NULL, updated_at = now() WHERE id = %s""",
        (tries, error[:1000], delivery_id),
    )


def reschedule(conn: Conn, delivery_id: int, tries: int, after_seconds: float, error: str) -> None:
    """Back to pending until the platform's Retry-After has passed (the sweep sends it then)."""
    conn.execute(
        """UPDATE channel_deliveries SET status = 'pending', attempts = attempts + %s, last_error = %s,
               lease_until = NULL, next_attempt_at = now() + make_interval(secs => %s), updated_at = now()
            WHERE id = %s""",
        (tries, error[:1000], after_seconds, delivery_id),
    )


def deliveries_to_redrive(conn: Conn, stalled_seconds: float, limit: int = 200) -> list[int]:
    """Pending deliveries due and untouched for `stalled_seconds` (their task was lost or they waited out a
    Retry-After), and sending ones whose worker's lease ran out. Their clock restarts, so each is re-driven
    once per interval."""
    rows = conn.execute(
        """UPDATE channel_deliveries SET updated_at = now()
            WHERE id IN (
                SELECT id FROM channel_deliveries
                 WHERE ((status = 'pending' AND next_attempt_at <= now())
                        OR (status = 'sending' AND lease_until < now()))
                   AND updated_at < now() - make_interval(secs => %s)
                 ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
        RETURNING id""",
        (stalled_seconds, limit),
    ).fetchall()
    return [int(row["id"]) for row in rows]


def list_deliveries(
    conn: Conn,
    tenant_id: int,
    status: str | None = None,
    limit: int = 100,
    before_id: int | None = None,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """Newest first (`limit` from `offset` on, older than `before_id` if given). The text is left out: it is the
    user's conversation, readable through their export."""
    return conn.execute(
        """SELECT d.id, c.kind, c.slug AS connection, u.external_id AS user_id, d.turn_id, d.target, d.status,
                  d.attempts, d.parts_sent, d.last_error, d.next_attempt_at, d.created_at, d.updated_at, d.sent_at
             FROM channel_deliveries d
             JOIN channel_connections c ON c.id = d.connection_id
             LEFT JOIN users u ON u.id = d.user_id
            WHERE d.tenant_id = %s AND (%s::text IS NULL OR d.status = %s) AND (%s::bigint IS NULL OR d.id < %s)
            ORDER BY d.id DESC LIMIT %s OFFSET %s""",
        (tenant_id, status, status, before_id, before_id, limit, offset),
    ).fetchall()
