"""Queue names, worker pools and the broker lists of a queue: what senders, workers and deployments agree on
(importable without building the Celery app)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations
    import redis

QUEUES = ("turns", "extraction", "flush", "compaction", "embeddings", "maintenance", "channels")
# Served by the `worker-turns` process group; everything else by `worker-background`.
INTERACTIVE_QUEUES = ("turns", "channels")
BACKGROUND_QUEUES = tuple(q for q in QUEUES if q not in INTERACTIVE_QUEUES)

# Worker pools of a cluster deployment (docker-compose.yml, ops/k8s): one per queue group, so a burst of
# memory work cannot delay turns, and embeddings (CPU-bound with local models) scale on their own.
POOLS: dict[str, tuple[str, ...]] = {
    "turns": INTERACTIVE_QUEUES,
    "memory": ("extraction", "flush", "compaction"),
    "embeddings": ("embeddings",),
    "maintenance": ("maintenance",),
}

# Bulk work (the transcript units' vectors: every stored message through the embedding model) is sent with the
# lowest message priority. kombu's Redis transport keeps such messages in a list of their own
# ("embeddings\x06\x169") and a worker's BRPOP lists every queue's default-priority list first, so the same
# process takes a due extraction, flush, compaction or memory embedding before the next batch of units, without
# a process of its own (a worker with a local embedder costs ~0.5 GB). With Redis, 0 is the highest.
BULK_PRIORITY = 9
# Queues that receive bulk-priority messages: autoscalers must watch their bulk list too (ops/k8s/base/keda.yaml).
BULK_QUEUES = ("embeddings",)
# The Redis lists of a queue: kombu's default priority steps (0, 3, 6, 9); step 0 is the queue's own name. A
# depth counts every list, so a message sent with another priority is never missed.
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (0, 3, 6, 9)


def _list_name(queue: str, step: int) -> str:
    return queue if step == 0 else f"{queue}{_PRIORITY_SEP}{step}"


def broker_keys(queue: str) -> tuple[str, ...]:
    """Every Redis list that holds `queue`'s waiting messages (what a depth must add up)."""
    return tuple(_list_name(queue, step) for step in _PRIORITY_STEPS)


def bulk_key(queue: str) -> str:
    """The Redis list of `queue`'s bulk-priority (BULK_PRIORITY) messages."""
    return _list_name(queue, BULK_PRIORITY)


def queue_depths(client: redis.Redis, queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting per queue, every priority list counted, in one round trip."""
    names = list(queues)
    pipe = client.pipeline(transaction=False)
    for queue in names:
        for key in broker_keys(queue):
            pipe.llen(key)
    lengths = iter(pipe.execute())
    return {queue: sum(int(next(lengths)) for _ in broker_keys(queue)) for queue in names}
