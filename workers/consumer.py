"""The worker's broker consumer, made to ride out Redis outages and worker crashes.

1. Surviving a lost connection. On a lost broker connection Celery (5.7) first collects the
   connection (detaching its transport) and then closes it. Closing a Redis channel requeues the
   messages the worker still holds (running acks_late tasks, delayed tasks waiting for their ETA)
   through that transport, which is gone by then: kombu raises `AttributeError` ('NoneType' object
   has no attribute 'connection_errors' / 'hostname'), which is not a connection error, so the
   worker took it for a fatal error and exited — every time Redis dropped while anything was in
   flight. The same detached transport also broke the late acknowledgement of tasks that were
   running when the connection dropped.

2. Putting back what the outage stranded. The requeue on close cannot reach Redis, so the messages
   the worker held (reserved, delayed) stay in Redis's unacknowledged set until the visibility
   timeout, an hour, while the worker forgot them. After reconnecting, the worker puts those back
   on their queues itself (not the ones still running: they acknowledge when they finish).

3. Messages of a worker that died. A worker killed outright leaves the messages it held in the
   unacknowledged set, also for an hour. A worker that starts puts back every unacknowledged
   message of the queues it consumes (but its own). Every engram task is idempotent, so a message
   another live worker still holds (several workers on one queue) costs one duplicate, harmless
   run; a worker start is rare.

4. Work whose task the outage lost. A task that was running when the connection dropped (a stalled or
   restarted Redis) may have failed to send its retry, and a turn accepted meanwhile may have had its
   task refused by the broker; Postgres still has them open. After a reconnect the worker runs the
   `RECONNECT_HOOKS` (workers/turns.py re-drives the sessions with open turns) instead of leaving them
   to the stalled-turn sweep, a minute or more later.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from celery.worker import state
from celery.worker.consumer import Consumer
from redis.exceptions import RedisError

from shared.infra.logging import get_logger

log = get_logger(__name__)


def _held_tags(channel: Any) -> set[str]:
    """Delivery tags the channel has received and not yet acknowledged."""
    qos = getattr(channel, "_qos", None) if channel is not None else None
    return set(getattr(qos, "_delivered", None) or ())


def _running_tags() -> set[str]:
    return {str(request.message.delivery_tag) for request in list(state.active_requests) if request.message}


def restore_unacked(
    channel: Any, queues: set[str], only: set[str] | None = None, keep: AbstractSet[str] = frozenset()
) -> int:
    """Put unacknowledged messages routed to `queues` back on their queue (all, or those in `only`),
    except those in `keep`. engram routes each queue by its own name (see workers/app.py)."""
    client = channel.client
    restored = 0
    for raw_tag, payload in client.hgetall(channel.unacked_key).items():
        tag = raw_tag.decode() if isinstance(raw_tag, bytes) else str(raw_tag)
        if tag in keep or (only is not None and tag not in only):
            continue
        try:
            routing_key = json.loads(payload)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routing_key in queues:
            channel.qos.restore_by_tag(tag)
            restored += 1
    return restored


# Called with the queues the worker consumes, each time its broker connection is back after a loss (4. above).
RECONNECT_HOOKS: list[Callable[[set[str]], None]] = []


class ResilientConsumer(Consumer):
    _stranded: set[str] | None = None  # tags held when the connection was lost
    _lost: bool = False  # the broker connection was lost since the last on_ready

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        connection = self.connection
        transport = getattr(connection, "_transport", None)
        self._lost = True
        self._stranded = (self._stranded or set()) | _held_tags(getattr(connection, "_default_channel", None))
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError as error:
            # Raised while closing the already collected connection (1. above). Celery has already
            # dropped its reference to it, so the reconnect that follows starts from a clean slate.
            log.warning("broker connection lost with messages in flight; reconnecting", error=str(error))
        finally:
            # Tasks received on the lost connection acknowledge their messages through its transport
            # when they finish (acks_late). Give the transport its connection details back, so that
            # ack reaches Redis once it is up again (or fails with a connection error, which Celery
            # logs) instead of raising AttributeError from the event loop and ending the worker.
            if transport is not None and getattr(transport, "client", None) is None:
                transport.client = connection

    def on_ready(self) -> None:
        first_start = self.init_callback is not None
        super().on_ready()
        try:
            self._put_back(first_start)
        except (RedisError, OSError) as exc:  # best effort: the sweeps remain
            log.warning("could not put back unacknowledged messages", error=str(exc))
        if self._lost and not first_start:
            self._lost = False
            queues = set(self.app.amqp.queues.consume_from)
            for hook in RECONNECT_HOOKS:
                hook(queues)

    def _put_back(self, first_start: bool) -> None:
        channel = self.connection.default_channel
        queues = set(self.app.amqp.queues.consume_from)
        own = _held_tags(channel) | _running_tags()
        if first_start:
            restored = restore_unacked(channel, queues, keep=own)
            what = "messages left unacknowledged by a worker that stopped"
        elif self._stranded:
            restored = restore_unacked(channel, queues, only=self._stranded, keep=own)
            what = "messages held when the broker connection was lost"
        else:
            return
        self._stranded = None
        if restored:
            log.warning("put back " + what, count=restored, queues=sorted(queues))
