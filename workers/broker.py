"""The Redis transport, with one change: a message whose worker died goes back to the head of its
queue.

With `task_reject_on_worker_lost`, the task of a killed pool process is rejected with requeue. kombu's
Redis transport pushes such a message to the tail, behind everything sent since; under load the
interrupted turn (whose client is waiting) then queued a second time, for as long as the whole
backlog took. It was taken from the head, so it goes back there. A message that keeps killing its
worker is not retried forever: the turn is failed after a few attempts (shared/agent/turn_runner.py).
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual


class QoS(kombu_redis.QoS):
    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            # leftmost=False: the end the consumer pops from (publishes push to the other end).
            self.restore_by_tag(delivery_tag, leftmost=False)
            virtual.QoS.ack(self, delivery_tag)  # forget it here, as kombu's reject does
            return
        super().reject(delivery_tag, requeue=False)


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(kombu_redis.SentinelChannel):
    QoS = QoS


class SentinelTransport(kombu_redis.SentinelTransport):
    """The same, reaching the primary through Redis Sentinel (ENGRAM_REDIS_SENTINELS)."""

    Channel = SentinelChannel
