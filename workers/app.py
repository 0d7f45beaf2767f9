"""The Celery application: queues, routing, reliability settings, beat schedule.

Reliability choices (see docs/concepts/turns.md, "Crash safety"):
- acks_late + reject_on_worker_lost: a task is acknowledged only after it finished, and a task
  whose worker process died is put back, so a kill loses nothing; tasks are idempotent, so a
  redelivery duplicates nothing.
- prefetch 1: a worker holds one long task at a time instead of hoarding messages others
  could run.
- visibility_timeout (Redis transport) longer than any countdown or time limit, otherwise a
  slow or delayed task would be redelivered while it still runs.
- Redis outages: workers retry the broker forever and survive a connection lost with messages in
  flight (workers/consumer.py); the sweeps re-drive whatever the outage held up.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab
from celery.signals import setup_logging, worker_init, worker_process_init
from kombu import Exchange, Queue

from shared.infra import db
from shared.infra.config import Settings, get_settings
from shared.infra.heap import freeze_startup_heap
from shared.infra.logging import configure_logging, get_logger
from shared.infra.redis_client import reset_redis, sentinel_timeouts
from shared.infra.services import resolve_redis_sentinel, resolve_redis_url
from shared.infra.tracing import configure_tracing, instrument_celery_worker
from shared.maintenance.schedule import JOBS, cron_of, enabled
from shared.queueing import task_names as names
from shared.queueing.queues import QUEUES
from workers import heartbeat as _heartbeat_signals  # noqa: F401  (liveness for the console)
from workers import metrics as _metric_signals  # noqa: F401  (task metrics, the pool's exporter)
from workers import tracing as _publish_hooks  # noqa: F401  (connects the request-id publish hook)

log = get_logger(__name__)

TASK_MODULES = [
    "workers.turns",
    "workers.maintenance",
    "workers.embeddings",
    "workers.extraction",
    "workers.flush",
    "workers.compaction",
    "workers.channels",
]


# Beat wakes at least this often: it extends its leader lock then (so the lock timeout must exceed it) and
# a standby retries taking the lock at this interval.
BEAT_MAX_LOOP_SECONDS = 5
# The sweeps beat sends every ENGRAM_SWEEP_INTERVAL_SECONDS: each picks up from Postgres work whose task was
# lost. index-missing-memories is cheap too (one indexed query, deduplicated by the drain token).
SWEEPS = {
    "redrive-stalled-turns": names.REDRIVE_STALLED_TURNS,
    "redrive-pending-extraction": names.REDRIVE_PENDING_EXTRACTION,
    "redrive-stalled-deliveries": names.REDRIVE_STALLED_DELIVERIES,
    "index-missing-memories": names.INDEX_MISSING_MEMORIES,
}


def maintenance_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Beat entries of the enabled maintenance jobs (cron in ENGRAM_JOBS_TIMEZONE) and the resume sweep."""
    entries: dict[str, dict[str, Any]] = {}
    for name, spec in JOBS.items():
        if not enabled(settings, name):
            continue
        minute, hour, day_of_month, month_of_year, day_of_week = cron_of(settings, name).split()
        entries[f"job-{name}"] = {
            "task": spec.task,
            "schedule": crontab(
                minute=minute,
                hour=hour,
                day_of_month=day_of_month,
                month_of_year=month_of_year,
                day_of_week=day_of_week,
            ),
        }
    if enabled(settings, "consolidation"):
        entries["queue-consolidations"] = {
            "task": names.QUEUE_CONSOLIDATIONS,
            "schedule": timedelta(seconds=settings.sweep_interval_seconds),
            "options": {"expires": settings.sweep_interval_seconds},
        }
    entries["resume-job-runs"] = {
        "task": names.RESUME_JOB_RUNS,
        "schedule": timedelta(seconds=max(settings.sweep_interval_seconds, 60)),
        "options": {"expires": 60},
    }
    return entries


def redis_conf(settings: Settings) -> dict[str, Any]:
    """Where the broker and beat's leader lock are: the single server's URL, or (ENGRAM_REDIS_SENTINELS)
    kombu's Sentinel transport and RedBeat's Sentinel client, which ask the sentinels for the primary and
    follow a failover."""
    transport_options: dict[str, Any] = {
        "visibility_timeout": settings.broker_visibility_timeout,
        "socket_connect_timeout": settings.redis_connect_timeout_seconds,
        "socket_timeout": settings.redis_socket_timeout_seconds,
        "health_check_interval": settings.redis_health_check_interval_seconds,
    }
    target = resolve_redis_sentinel(settings)
    if target is None:
        url = resolve_redis_url(settings)
        return {"broker_url": url, "broker_transport_options": transport_options, "redbeat_redis_url": url}
    return {
        "broker_url": target.broker_url,
        "broker_transport_options": {
            **transport_options,
            "master_name": target.service,
            "sentinel_kwargs": sentinel_timeouts(settings),
        },
        # RedBeat takes the sentinels from its options; the URL only says "redis-sentinel" (and its banner shows it).
        "redbeat_redis_url": "redis-sentinel://{}:{}/0".format(*target.sentinels[0]),
        "redbeat_redis_options": {
            "sentinels": list(target.sentinels),
            "service_name": target.service,
            "socket_timeout": settings.redis_socket_timeout_seconds,
            "sentinel_kwargs": sentinel_timeouts(settings),
        },
    }


def create_celery() -> Celery:
    settings = get_settings()
    # One module per queue; workers import them at start (the gateway only sends tasks by name).
    app = Celery("engram", include=TASK_MODULES)
    app.conf.update(
        **redis_conf(settings),
        broker_connection_retry_on_startup=True,
        # Ride out a Redis outage of any length (the default gives up after 100 tries and exits).
        broker_connection_max_retries=None,
        worker_consumer="workers.consumer:ResilientConsumer",
        # Postgres holds every outcome; Celery result storage would be a second, weaker copy.
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Debounced extraction sends a delayed task per turn; most are superseded. Capping how many ETA
        # tasks a worker holds keeps a burst from piling them up in its memory (the rest wait in Redis).
        worker_eta_task_limit=settings.eta_task_limit,
        task_default_queue="maintenance",
        task_queues=[Queue(name, Exchange(name), routing_key=name) for name in QUEUES],
        task_routes={names.task_name(name, "*"): {"queue": name} for name in QUEUES},
        task_soft_time_limit=settings.turn_soft_time_limit,
        task_time_limit=settings.turn_time_limit,
        # A publish with Redis down must fail fast: the gateway has already stored the turn and
        # the stalled-turn sweep re-enqueues it once Redis is back.
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
        worker_hijack_root_logger=False,
        # Off unless asked for: each event is a Redis PUBLISH (about 8 per turn, one on the gateway's accept
        # path). Flower broadcasts `enable_events` every 5 s while it runs, so its task views still fill;
        # only the "sent" state needs the setting, because publishers send that one.
        worker_send_task_events=settings.celery_task_events,
        task_send_sent_event=settings.celery_task_events,
        # Schedules (the maintenance jobs' crontabs) are read in this zone; messages stay in UTC.
        timezone=settings.jobs_timezone,
        # Beat with a leader lock in Redis: several beat processes may run (one per machine, for
        # availability); only the holder of the lock sends, and a standby takes over within the lock
        # timeout when it dies. Every job run is also keyed by (job, period) in job_runs, so a
        # duplicate fire is a no-op anyway.
        beat_scheduler="workers.beat:Scheduler",  # RedBeat that survives a Redis outage
        redbeat_key_prefix="redbeat:engram",
        redbeat_lock_timeout=settings.beat_lock_timeout_seconds,
        beat_max_loop_interval=BEAT_MAX_LOOP_SECONDS,
        beat_schedule={
            **maintenance_schedule(settings),
            **{
                name: {
                    "task": task,
                    "schedule": timedelta(seconds=settings.sweep_interval_seconds),
                    "options": {"expires": settings.sweep_interval_seconds},
                }
                for name, task in SWEEPS.items()
            },
        },
    )
    if settings.beat_lock_timeout_seconds <= 2 * BEAT_MAX_LOOP_SECONDS:
        raise ValueError(f"ENGRAM_BEAT_LOCK_TIMEOUT_SECONDS must exceed {2 * BEAT_MAX_LOOP_SECONDS}")
    if settings.job_slice_seconds >= settings.turn_soft_time_limit:
        raise ValueError(
            "ENGRAM_JOB_SLICE_SECONDS must be below ENGRAM_TURN_SOFT_TIME_LIMIT (a slice ends between pages)"
        )
    if settings.turn_time_limit >= settings.broker_visibility_timeout:
        raise ValueError("ENGRAM_BROKER_VISIBILITY_TIMEOUT must exceed ENGRAM_TURN_TIME_LIMIT")
    return app


app = create_celery()


@setup_logging.connect
def _configure_logging(**_: object) -> None:
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)


# Tasks publish follow-up work (embeddings, extraction, retries). Unlike the gateway, which must
# answer at once, a task can wait out a Redis restart (a second or two under `engram up`); a publish
# that gave up after a second lost that work until a sweep found it (for embeddings: 15 minutes).
WORKER_PUBLISH_RETRY_POLICY = {"max_retries": 12, "interval_start": 0.5, "interval_step": 0.5, "interval_max": 2}


@worker_init.connect
def _worker_broker_settings(**_: object) -> None:
    # Only workers: the gateway must publish fast, and Flower recognises the broker by its scheme.
    app.conf.task_publish_retry_policy = WORKER_PUBLISH_RETRY_POLICY
    vars(app.amqp).pop("send_task_message", None)  # the sender caches the policy when first built
    # Redis (or Redis through Sentinel); a killed task's message requeued first.
    sentinel = resolve_redis_sentinel(get_settings()) is not None
    app.conf.broker_transport = "workers.broker:SentinelTransport" if sentinel else "workers.broker:Transport"


@worker_init.connect
def _freeze_startup_heap(**_: object) -> None:
    # In the parent, before the pool forks: the children inherit the frozen heap (shared/infra/heap.py).
    log.info("startup heap frozen", objects=freeze_startup_heap())


@worker_process_init.connect
def _fresh_connections_after_fork(**_: object) -> None:
    # Sockets inherited from the parent must not be shared by children: start over.
    db.forget_pool()
    reset_redis()
    # Tracing starts in each pool process: the exporter's thread would not survive the fork.
    if configure_tracing("worker"):
        instrument_celery_worker()
