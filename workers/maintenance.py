"""Queue `maintenance`: periodic housekeeping driven by beat."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from celery import Task
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.channels.deliveries import deliveries_to_redrive
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.locks import is_locked
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.llm.types import LLMError
from shared.maintenance import jobs as maintenance_jobs
from shared.maintenance.consolidation import consolidate_session as consolidate_one
from shared.maintenance.consolidation import sessions_to_queue
from shared.maintenance.runs import RunSuperseded, UserRef, lock_name, scope_user, unfinished_runs
from shared.maintenance.schedule import enabled
from shared.pipeline import debounce
from shared.queueing.fairness import tenant_of_sessions
from shared.queueing.recovery import sessions_to_redrive, touch_open_turns
from workers.base import alone_on_session, engram_task
from workers.dispatch import (
    enqueue_consolidate_session,
    enqueue_delivery,
    enqueue_embed_memory,
    enqueue_extraction,
    enqueue_job,
    send_drain_fairly,
)

log = get_logger(__name__)


@engram_task("maintenance")
def redrive_pending_extraction() -> int:
    """Sessions with messages nobody mined for a while and no extraction task in the broker (it was lost, and
    its claim expired): schedule one. A session whose task is only late (a backlog) is left to that task."""
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
    sent = 0
    for row in rows:
        if debounce.has_pending(client, "extract", row["session_id"]):
            continue
        # Forced: a claim set since the check above belongs to a task that runs or stands down.
        plan = debounce.schedule(client, "extract", row["session_id"], debounce=0, max_wait=0, force=True)
        enqueue_extraction(row["session_id"], plan.token, plan.countdown)
        sent += 1
    return sent


@engram_task("maintenance")
def redrive_stalled_turns() -> int:
    settings = get_settings()
    with db.connection() as conn:
        session_ids = sessions_to_redrive(conn, get_redis(), settings.stalled_turn_seconds)
        touch_open_turns(conn, session_ids)
        tenants = tenant_of_sessions(conn, session_ids)
    # Through the tenant's slots: a tenant's backlog waiting for them looks stalled too, and must not be sent
    # all at once. A session that holds a slot is sent again: nobody drains it (no session lock), so its
    # drain was lost.
    sent = [
        sid for sid in session_ids if sid in tenants and send_drain_fairly(sid, tenants[sid], resend_in_flight=True)
    ]
    if sent:
        log.info("re-enqueued stalled sessions", sessions=sent)
    return len(sent)


# ------------------------------------------------------------------------------------ maintenance jobs
# Thin wrappers: each runs one slice of its job (shared/maintenance/), then sends itself again with the
# run's clock when the slice ran out, so a long job never meets the task time limit and a killed one
# resumes from its cursor. Beat sends them without arguments (the clock is now).

_JOB_RETRY: dict[str, Any] = {
    "autoretry_for": (DatabaseUnavailable, LLMError, RedisConnectionError, RedisTimeoutError, RunSuperseded),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "max_retries": 8,
}
# A run another process holds: look again once its lock can have expired, this many times at most
# (the resume sweep is the safety net after that).
MAX_BUSY_RECHECKS = 10


def _run_job(task: Task, name: str, as_of: str | None, tenant_id: int | None, user_id: int | None) -> str:
    settings = get_settings()
    if as_of is None and not enabled(settings, name):
        return f"{name} is disabled (ENGRAM_JOB_{name.replace('-', '_').upper()}_ENABLED)"
    user = UserRef(tenant_id, user_id) if tenant_id is not None and user_id is not None else None
    clock = datetime.fromisoformat(as_of) if as_of else None
    result = maintenance_jobs.run(name, settings, as_of=clock, user=user, slice_seconds=settings.job_slice_seconds)
    for memory_id in result.to_embed:
        enqueue_embed_memory(memory_id)
    if result.status == "paused":
        assert result.as_of is not None
        enqueue_job(name, as_of=result.as_of.isoformat(), tenant_id=tenant_id, user_id=user_id)
    elif result.status == "busy" and task.request.retries < MAX_BUSY_RECHECKS:
        raise task.retry(countdown=settings.session_lock_ttl_seconds + 1, max_retries=MAX_BUSY_RECHECKS)
    log.info("job slice done", job=name, **{k: v for k, v in result.as_json().items() if k != "job"})
    return json.dumps(result.as_json(), default=str)


@engram_task("maintenance", **_JOB_RETRY)
def decay(as_of: str | None = None, tenant_id: int | None = None, user_id: int | None = None) -> str:
    return _run_job(decay, "decay", as_of, tenant_id, user_id)


@engram_task("maintenance", **_JOB_RETRY)
def cache_eviction(as_of: str | None = None, tenant_id: int | None = None, user_id: int | None = None) -> str:
    return _run_job(cache_eviction, "cache-eviction", as_of, tenant_id, user_id)


@engram_task("maintenance", **_JOB_RETRY)
def reflection(as_of: str | None = None, tenant_id: int | None = None, user_id: int | None = None) -> str:
    return _run_job(reflection, "reflection", as_of, tenant_id, user_id)


@engram_task("maintenance", **_JOB_RETRY)
def consolidation(as_of: str | None = None, tenant_id: int | None = None, user_id: int | None = None) -> str:
    return _run_job(consolidation, "consolidation", as_of, tenant_id, user_id)


@engram_task("maintenance", **_JOB_RETRY)
def enrichment(as_of: str | None = None, tenant_id: int | None = None, user_id: int | None = None) -> str:
    return _run_job(enrichment, "enrichment", as_of, tenant_id, user_id)


@engram_task("maintenance", **_JOB_RETRY)
def consolidate_session(session_id: int) -> str:
    """A user started a new session: consolidate one of their earlier ones now rather than at night."""
    settings = get_settings()
    outcome = alone_on_session(
        "consolidate", session_id, lambda: consolidate_one(session_id, settings, as_of=datetime.now(UTC))
    )
    if outcome is None:
        return "another consolidation of this session is running"
    for memory_id in outcome.to_embed:
        enqueue_embed_memory(memory_id)
    return outcome.stopped or ("consolidated" if outcome.consolidated else "nothing to do")


@engram_task("maintenance")
def queue_consolidations() -> int:
    """Beat: sessions of users who have since started a new one go to consolidation (once per 10 min).
    Not with ENGRAM_AUTO_MEMORY=false: then nothing mines conversations on its own (the nightly job still
    runs when it is enabled, and a manual run does)."""
    settings = get_settings()
    if not settings.job_consolidation_enabled or not settings.auto_memory:
        return 0
    with db.connection() as conn:
        session_ids = sessions_to_queue(conn)
    client = get_redis()
    queued = 0
    for session_id in session_ids:
        if client.set(f"engram:consolidation:queued:{session_id}", 1, nx=True, ex=600):
            enqueue_consolidate_session(session_id)
            queued += 1
    return queued


@engram_task("maintenance")
def resume_job_runs() -> int:
    """Beat: runs left unfinished (their worker died and the message was lost, or they failed) and held
    by nobody are sent again; they resume from their cursor with their own clock."""
    with db.connection() as conn:
        rows = unfinished_runs(conn)
    client = get_redis()
    resumed = 0
    for row in rows:
        if is_locked(client, lock_name(row["job"], row["period"], row["scope"])):
            continue
        user = scope_user(row["scope"])
        enqueue_job(
            row["job"],
            as_of=row["as_of"].isoformat(),
            tenant_id=user.tenant_id if user else None,
            user_id=user.user_id if user else None,
        )
        resumed += 1
    if resumed:
        log.info("resumed unfinished job runs", runs=resumed)
    return resumed


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
