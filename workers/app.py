"""The Celery application: queues, routing, reliability settings, beat schedule.

Reliability choices (see README "Crash safety"):
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

from celery import Celery
from celery.signals import setup_logging, worker_init, worker_process_init
from kombu import Exchange, Queue

from shared import db
from shared.config import get_settings
from shared.logging import configure_logging
from shared.redis_client import reset_redis
from shared.services import resolve_redis_url
from workers.queues import QUEUES

TASK_MODULES = [
    "workers.turns",
    "workers.maintenance",
    "workers.embeddings",
    "workers.extraction",
    "workers.flush",
    "workers.compaction",
    "workers.channels",
]


def create_celery() -> Celery:
    settings = get_settings()
    # One module per queue; workers import them at start (the gateway only sends tasks by name).
    app = Celery("engram", include=TASK_MODULES)
    broker_url = resolve_redis_url(settings)
    app.conf.update(
        broker_url=broker_url,
        broker_connection_retry_on_startup=True,
        # Ride out a Redis outage of any length (the default gives up after 100 tries and exits).
        broker_connection_max_retries=None,
        worker_consumer="workers.consumer:ResilientConsumer",
        broker_transport_options={
            "visibility_timeout": settings.broker_visibility_timeout,
            "socket_connect_timeout": 3,
            "socket_timeout": 10,
        },
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
        task_routes={f"engram.{name}.*": {"queue": name} for name in QUEUES},
        task_soft_time_limit=settings.turn_soft_time_limit,
        task_time_limit=settings.turn_time_limit,
        # A publish with Redis down must fail fast: the gateway has already stored the turn and
        # the stalled-turn sweep re-enqueues it once Redis is back.
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
        timezone="UTC",
        beat_schedule={
            "redrive-stalled-turns": {
                "task": "engram.maintenance.redrive_stalled_turns",
                "schedule": timedelta(seconds=settings.sweep_interval_seconds),
                "options": {"expires": settings.sweep_interval_seconds},
            },
            "redrive-pending-extraction": {
                "task": "engram.maintenance.redrive_pending_extraction",
                "schedule": timedelta(seconds=settings.sweep_interval_seconds),
                "options": {"expires": settings.sweep_interval_seconds},
            },
            "redrive-stalled-deliveries": {
                "task": "engram.maintenance.redrive_stalled_deliveries",
                "schedule": timedelta(seconds=settings.sweep_interval_seconds),
                "options": {"expires": settings.sweep_interval_seconds},
            },
            "index-missing-memories": {
                "task": "engram.embeddings.index_missing_memories",
                "schedule": timedelta(minutes=5),
                "options": {"expires": 240},
            },
        },
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
    app.conf.broker_transport = "workers.broker:Transport"  # Redis; a killed task's message requeued first


@worker_process_init.connect
def _fresh_connections_after_fork(**_: object) -> None:
    # Sockets inherited from the parent must not be shared by children: start over.
    db.forget_pool()
    reset_redis()
