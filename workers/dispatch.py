"""Sending tasks by name, so the gateway never imports task modules (or their dependencies)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError as BrokerUnavailable
from redis.exceptions import RedisError

from shared.embeddings.drain import DrainKind, claim_request, token_key
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.maintenance.schedule import spec_of
from shared.memory.userdata import Erasure, drop_live_state
from shared.pipeline import debounce
from shared.pipeline.triggers import plan_after_turn
from shared.queueing import fairness
from shared.queueing import task_names as names
from shared.queueing.dispatch import AcceptedWork
from shared.queueing.fairness import Admission
from shared.queueing.queues import BULK_PRIORITY
from shared.turns.rows import SessionRow, session_row
from workers.app import app

if TYPE_CHECKING:  # only for annotations
    from shared.pipeline.jobs import JobOutcome

log = get_logger(__name__)


def warm_publishers() -> int:
    """Open every broker connection the publishers may use, with the queues declared on it; how many opened.

    kombu opens a pooled connection, and declares the queue on it, when a publish first needs one: over 20 ms
    each. A burst of requests to a fresh gateway (every session's first turn after a deploy) paid that on up
    to `broker_pool_limit` publishes at once. Stops at the first failure: with the broker away, connections
    are opened on demand later, as before."""
    producers = []
    try:
        for _ in range(app.conf.broker_pool_limit or 1):
            producer = app.producer_pool.acquire(block=False)
            producers.append(producer)
            for queue in app.amqp.queues.values():
                producer.maybe_declare(queue)
    finally:
        for producer in producers:
            producer.release()
    return len(producers)


def enqueue_drain(session_id: int, priority: int | None = None) -> None:
    """Send the session's drain as it is (re-drives of running turns); new work goes through
    `send_drain_fairly`."""
    # No tenant in the message: a worker of the previous release (a rolling upgrade) knows no `tenant_id`
    # argument and would fail the task. This release's drain accepts one and otherwise reads it (one indexed
    # lookup); the next release may send it (expand, then contract: docs/operations/runbooks/upgrade.md).
    app.send_task(names.TURNS_DRAIN, kwargs={"session_id": session_id}, queue="turns", priority=priority)


def send_drain_fairly(session_id: int, tenant_id: int, *, resend_in_flight: bool = False) -> bool:
    """Send the session's drain if it gets one of its tenant's slots (shared/queueing/fairness.py); whether it was sent.
    `resend_in_flight`: also when the session holds a slot already (the stalled-turn sweep: its drain was
    found lost). Raises like `enqueue_drain` when Redis or the broker is away; a slot taken for a drain that
    could not be sent is given back."""
    client = get_redis()
    limits = fairness.limits(get_settings())
    ticket = fairness.admit(client, tenant_id, session_id, limits)
    admission = ticket.admission
    if admission is Admission.HELD or (admission is Admission.IN_FLIGHT and not resend_in_flight):
        return False
    try:
        enqueue_drain(session_id, ticket.priority)
    except BaseException:
        if admission is Admission.SEND and limits.max_sessions > 0:
            with contextlib.suppress(RedisError, OSError):
                client.zrem(fairness.slots_key(tenant_id), session_id)
        raise
    return True


def enqueue_embed_memory(memory_id: int) -> None:
    """Ask for a committed memory's embedding. Postgres knows which memories are pending, and one drain task
    embeds them in batches, so this sends a drain only when none is queued (shared/embeddings/drain.py)."""
    request_embedding_drain("memories")


def request_embedding_drain(kind: DrainKind, *, backlog: bool = False) -> None:
    """Send a drain of `kind` unless one is queued. A transcript `backlog` (an import, a catch-up: see
    shared.transcript.units.live_backlog) goes at the bulk priority: a worker takes any due memory job
    (extraction, flush, compaction, a memory's vector) before its next batch of units, which full text already
    finds. The units of conversations that keep up go at the default priority, in turn with those jobs, so a
    message is found by its meaning seconds after it was said even while the memory workers are busy."""
    client = get_redis()
    if not claim_request(client, kind):
        return
    try:
        if kind == "memories":
            app.send_task(names.EMBED_PENDING, queue="embeddings")
        elif backlog:
            app.send_task(names.EMBED_TRANSCRIPT, queue="embeddings", priority=BULK_PRIORITY)
        else:
            app.send_task(names.EMBED_TRANSCRIPT, queue="embeddings")
    except BaseException:
        client.delete(token_key(kind))  # nothing was queued: the next request must not wait for the token to expire
        raise


def enqueue_extraction(session_id: int, token: str, countdown: float) -> None:
    app.send_task(
        names.EXTRACTION_EXTRACT,
        kwargs={"session_id": session_id, "token": token},
        queue="extraction",
        countdown=countdown,
    )


def enqueue_synthesis(tenant_id: int, user_id: int) -> None:
    app.send_task(names.EXTRACTION_SYNTHESIZE, kwargs={"tenant_id": tenant_id, "user_id": user_id}, queue="extraction")


def enqueue_flush(session_id: int) -> None:
    app.send_task(names.FLUSH, kwargs={"session_id": session_id}, queue="flush")


def schedule_memory_work(session_id: int, session: SessionRow | None = None) -> None:
    """After new messages in a session (a chat turn, an ingested batch): the embedding drain for their
    transcript units, always; debounced extraction (which also compacts the session once it has reached the
    threshold), and a flush when the session has grown enough, as ENGRAM_AUTO_MEMORY says. `session`: its row
    as the caller just committed it (a turn's last transaction returns it); None = read.

    Best effort: the messages are already saved, and the pending-work sweeps catch anything lost here."""
    settings = get_settings()
    try:
        request_embedding_drain("transcript")
        if not settings.auto_memory:
            return
        plan = debounce.schedule(
            get_redis(),
            "extract",
            session_id,
            debounce=settings.extraction_debounce_seconds,
            max_wait=settings.extraction_max_wait_seconds,
            stretch=settings.extraction_debounce_stretch,
        )
        if plan.send:  # otherwise the session's pending task comes due and sends itself again for this turn
            enqueue_extraction(session_id, plan.token, plan.countdown)
        if session is None:
            with db.connection() as conn:
                session = session_row(conn.execute("SELECT * FROM sessions WHERE id = %s", (session_id,)).fetchone())
        if session is None:
            return
        # A compaction that is due is left to the extraction just scheduled: that run summarises and mines in
        # one model call (shared.pipeline.jobs.extract_and_compact), within the debounce or its cap.
        if plan_after_turn(session, settings).flush:
            enqueue_flush(session_id)
    except (RedisError, BrokerUnavailable, DatabaseUnavailable, OSError) as exc:
        log.warning("could not schedule memory work; the sweeps will", session_id=session_id, error=str(exc))


def enqueue_follow_up(outcome: JobOutcome, tenant_id: int | None = None, user_id: int | None = None) -> None:
    """What a memory job's outcome calls for: embed the memories whose text changed, and re-synthesise the
    personality directive when style observations changed (needs the owner). Every queue module that runs
    memory jobs uses this, so it lives here and not in one of them (queue modules never import each other)."""
    for memory_id in outcome.changed_memory_ids:
        enqueue_embed_memory(memory_id)
    if outcome.styles_changed and tenant_id is not None and user_id is not None:
        enqueue_synthesis(tenant_id, user_id)


def enqueue_job(
    name: str, *, as_of: str | None = None, tenant_id: int | None = None, user_id: int | None = None
) -> None:
    """A maintenance job's task (shared/maintenance/schedule.py JOBS)."""
    app.send_task(
        spec_of(name).task,
        kwargs={"as_of": as_of, "tenant_id": tenant_id, "user_id": user_id},
        queue="maintenance",
    )


def enqueue_consolidate_session(session_id: int) -> None:
    app.send_task(names.CONSOLIDATE_SESSION, kwargs={"session_id": session_id}, queue="maintenance")


def enqueue_delivery(delivery_id: int) -> None:
    app.send_task(names.CHANNELS_DELIVER, kwargs={"delivery_id": delivery_id}, queue="channels")


def dispatch_accepted(accepted: AcceptedWork) -> None:
    """After a channel event is committed: drain its turn's session, or deliver its answer, and drop the
    live streams of a user it erased. Best effort: with the broker away, the stalled-turn and
    stalled-delivery sweeps pick the work up from Postgres."""
    try:
        if accepted.session_id is not None:
            if accepted.tenant_id is None:
                enqueue_drain(accepted.session_id)
            else:
                send_drain_fairly(accepted.session_id, accepted.tenant_id)
        if accepted.delivery_id is not None:
            enqueue_delivery(accepted.delivery_id)
    except (BrokerUnavailable, RedisError, OSError) as exc:
        log.warning(
            "broker unavailable; the sweep will pick up the channel event",
            session_id=accepted.session_id,
            delivery_id=accepted.delivery_id,
            error=str(exc),
        )
    if accepted.erased_turn_ids:
        drop_live_state(get_redis(), Erasure(turn_ids=list(accepted.erased_turn_ids)))


def drain_soon(session_id: int, tenant_id: int) -> None:
    """Best effort: enqueue the drain of a session whose turn was just stored, when the session gets one of
    its tenant's slots (otherwise the turn waits in Postgres until a drain of the tenant ends and frees one).
    With the broker away the turn is still safe in Postgres, and the stalled-turn sweep enqueues it once the
    broker is back."""
    try:
        send_drain_fairly(session_id, tenant_id)
    except (BrokerUnavailable, RedisError, OSError) as exc:
        log.warning("broker unavailable; turn will be re-driven by the sweep", session_id=session_id, error=str(exc))
