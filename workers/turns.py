"""Queue `turns`: run a session's queued turns, then schedule the memory work they call for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery.signals import worker_ready
from kombu.exceptions import OperationalError as BrokerUnavailable
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.agent import LockLost, drain_session, sessions_with_running_turns
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.queueing import fairness
from shared.queueing.diagnostics import answer_ping
from shared.queueing.recovery import sessions_to_redrive
from shared.runtime import turn_deps
from shared.turns.rows import SessionRow
from workers.base import engram_task
from workers.consumer import RECONNECT_HOOKS
from workers.dispatch import enqueue_delivery, enqueue_drain, enqueue_embed_memory, schedule_memory_work

log = get_logger(__name__)

# How many times one drain task looks again at a session another worker holds (each look comes
# when that worker's lock can have expired). Past this the stalled-turn sweep is the safety net.
MAX_LOCK_RECHECKS = 20
# How long a drain waits in its process for a Redis that does not answer, and its longest pause between looks.
REDIS_PATIENCE_SECONDS = 90.0
REDIS_PATIENCE_MAX_PAUSE_SECONDS = 2.0


def after_turn(session_id: int, turn_id: int, session: SessionRow | None) -> None:
    """The memory work a turn calls for: the same scheduling as for ingested messages (the session row the
    turn committed spares it a read)."""
    schedule_memory_work(session_id, session)


@engram_task(
    "turns",
    # Postgres or Redis briefly away: try again with backoff; the turn row keeps its place. The backoff stays
    # short (a person waits for the reply): with Celery's jitter a retry lands at most this long after the
    # dependency is back; 60 tries cover minutes of outage, and the stalled-turn sweep covers longer ones.
    autoretry_for=(DatabaseUnavailable, RedisConnectionError, RedisTimeoutError, LockLost),
    retry_backoff=1,
    retry_backoff_max=8,
    max_retries=60,
)
def drain(session_id: int, tenant_id: int | None = None) -> int:
    settings = get_settings()
    limits = fairness.limits(settings)
    if tenant_id is None:  # a message of an older gateway, or a re-drive that knew only the session
        with db.connection() as conn:
            tenant_id = fairness.tenant_of_sessions(conn, [session_id]).get(session_id)
    fair = tenant_id is not None and limits.max_sessions > 0
    if fair:
        assert tenant_id is not None
        fairness.renew(get_redis(), tenant_id, session_id, limits)
    # With a bound per tenant, a drain runs a few turns and hands the session back (`finish` below), so a
    # tenant's long session holds a worker no longer than another tenant's turn should wait.
    outcome = _drain_waiting_for_redis(session_id, settings.drain_max_turns if fair else None)
    if outcome.recheck_in is not None:
        # Another worker holds the session and turns are open. If it is alive it drains them; if it
        # died, its lock expires by `recheck_in` and this task, retried then, resumes the turns.
        rechecks = drain.request.retries
        if rechecks < MAX_LOCK_RECHECKS:
            raise drain.retry(countdown=outcome.recheck_in, max_retries=MAX_LOCK_RECHECKS)
        log.warning("session still held by another worker; leaving it to the sweep", session_id=session_id)
    if fair:
        assert tenant_id is not None
        hand_on(tenant_id, session_id, limits)
    return outcome.processed


def hand_on(tenant_id: int, session_id: int, limits: fairness.FairnessLimits) -> None:
    """Free the drain's slot and send the drains of the tenant's sessions that waited longest. A worker that
    dies before sending them leaves slots that expire with their lease; the stalled-turn sweep then sends
    the sessions again (their turns are queued in Postgres)."""
    with db.connection() as conn:
        admitted = fairness.finish(conn, get_redis(), tenant_id, session_id, limits)
    for waiting, priority in admitted:
        enqueue_drain(waiting, priority)


def _drain_waiting_for_redis(session_id: int, max_turns: int | None) -> Any:
    """`drain_session`, tried again in this process while Redis does not answer (up to REDIS_PATIENCE_SECONDS).

    A Redis that stopped answering fails the drain at its session lock, before any work; Celery's retry would
    have to send the retry through that same Redis, and a retry that cannot be sent drops the message (the
    turn then waited a minute and more for the stalled-turn sweep). Waiting here, the turn goes on within
    seconds of Redis answering again. Past the patience, the error goes to Celery's retry as before."""
    deadline = time.monotonic() + REDIS_PATIENCE_SECONDS
    pause = 0.5
    while True:
        try:
            return drain_session(session_id, turn_deps(embed_later, after_turn, deliver_later), max_turns)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("Redis not answering; the drain waits for it", session_id=session_id, error=str(exc))
            time.sleep(pause)
            pause = min(pause * 2, REDIS_PATIENCE_MAX_PAUSE_SECONDS)


def embed_later(memory_id: int) -> None:
    """Best effort: a memory a tool wrote is embedded by the index sweep if the broker is away now."""
    _best_effort(enqueue_embed_memory, memory_id, "could not enqueue embedding; the index sweep will", "memory_id")


def deliver_later(delivery_id: int) -> None:
    """Best effort: a channel reply whose task cannot be sent now is posted by the stalled-delivery sweep."""
    _best_effort(enqueue_delivery, delivery_id, "could not enqueue a channel delivery; the sweep will", "delivery_id")


def _best_effort(enqueue: Callable[[int], None], row_id: int, failed: str, id_name: str) -> None:
    """Send a task; with the broker away, log `failed` and leave the work to its sweep (the row is committed)."""
    try:
        enqueue(row_id)
    except (RedisError, BrokerUnavailable, OSError) as exc:
        log.warning(failed, **{id_name: row_id}, error=str(exc))


def _redrive_after_reconnect(queues: set[str]) -> None:
    """After the broker connection came back: drain every session with an open turn that no worker holds. A
    task running when Redis stalled or restarted may have lost its retry, and a turn accepted meanwhile its
    task; both would otherwise wait for the stalled-turn sweep. Drains are idempotent: one for a session
    whose task is still queued costs a look."""
    if "turns" not in queues:
        return
    _redrive(
        lambda conn: sessions_to_redrive(conn, get_redis(), older_than_seconds=0),
        "could not re-drive open turns after reconnecting; the sweep will",
        "re-drove sessions with open turns after the broker came back",
    )


RECONNECT_HOOKS.append(_redrive_after_reconnect)


@worker_ready.connect
def _redrive_after_start(sender: Any = None, **_: object) -> None:
    """A worker that starts (or restarts after one was killed) re-drives every session with a turn
    marked running. A killed worker's messages are put back at start (workers/consumer.py); this
    also covers one whose message was lost otherwise, which would wait for the stalled-turn sweep.
    Drains are idempotent; a session running elsewhere costs a look or two."""
    if sender is None or "turns" not in sender.app.amqp.queues.consume_from:
        return
    _redrive(
        sessions_with_running_turns,
        "could not re-drive open turns at start; the sweep will",
        "re-drove sessions with running turns at worker start",
    )


def _redrive(find: Callable[[db.Conn], list[int]], failed: str, done: str) -> None:
    """Drain every session `find` names; with Postgres, Redis or the broker away, log `failed` and leave them to
    the stalled-turn sweep."""
    try:
        with db.connection() as conn:
            session_ids = find(conn)
        for session_id in session_ids:
            enqueue_drain(session_id)
    except (DatabaseUnavailable, RedisError, BrokerUnavailable, OSError) as exc:
        log.warning(failed, error=str(exc))
        return
    if session_ids:
        log.info(done, sessions=len(session_ids))


@engram_task("turns")
def ping(reply_to: str) -> None:
    """No-op round trip on the turns queue (the benchmark's floor; a consumer probe)."""
    answer_ping(reply_to)
