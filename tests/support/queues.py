"""Wait until the broker has no work left: the observable event behind "nothing else happened".

A Celery message is either waiting in its queue's list or, once a worker took it (acks_late), in
kombu's `unacked` hash until its task returns — delayed (debounced, retried) tasks included. A task
publishes its follow-ups before it is acknowledged, so while work remains one of the two is non-empty.
kombu moves a message from the list to the hash in two steps, so idleness must hold for several
consecutive looks before it counts.
"""

from __future__ import annotations

import time

import redis

from shared.queueing.queues import QUEUES

_PRIORITY_SEP = "\x06\x16"  # kombu's separator for a queue's priority lists


def pending_messages(client: redis.Redis) -> int:
    pending = int(client.hlen("unacked"))  # type: ignore[arg-type]
    for queue in QUEUES:
        pending += int(client.llen(queue))  # type: ignore[arg-type]
        for key in client.scan_iter(match=f"{queue}{_PRIORITY_SEP}*", count=100):
            pending += int(client.llen(key))  # type: ignore[arg-type]
    return pending


def wait_for_idle_broker(client: redis.Redis, timeout: float = 60, looks: int = 3) -> None:
    deadline = time.monotonic() + timeout
    idle = 0
    while idle < looks:
        assert time.monotonic() < deadline, f"the broker still holds {pending_messages(client)} message(s)"
        idle = idle + 1 if pending_messages(client) == 0 else 0
        time.sleep(0.1)
