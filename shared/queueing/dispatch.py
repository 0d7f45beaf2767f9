"""How the gateway sends work to the workers without importing them.

api/ may import shared/, never workers/ (the import-linter contracts in pyproject.toml). What the gateway
needs of the queues is this protocol; workers/dispatcher.py implements it with Celery, and the process that
builds the gateway (its composition root, ops/gateway.py) hands that implementation to `api.app.create_app`,
which installs it here for the routes (`get_dispatcher`). One per process, like the database pool.

Every operation is a thin call: the behaviour (best effort, what a broker outage logs, what the sweeps pick
up later) is the implementation's, and is documented there.
"""

from __future__ import annotations

from typing import Protocol

from shared.turns.rows import SessionRow


class AcceptedWork(Protocol):
    """What a committed channel event leaves to do (shared.channels.inbound.Accepted). Described here rather
    than imported, so that the domain modules that send work (memory writes) and the channels, which use
    those modules, do not import each other through this one."""

    @property
    def session_id(self) -> int | None: ...

    @property
    def tenant_id(self) -> int | None: ...

    @property
    def delivery_id(self) -> int | None: ...

    @property
    def erased_turn_ids(self) -> tuple[int, ...]: ...


class Dispatcher(Protocol):
    def prepare(self) -> None:
        """Load what sending needs, at the gateway's start; raises when it cannot be (the broker not configured),
        and the gateway does not start."""
        ...

    def warm_publishers(self) -> int:
        """Open the broker connections publishes will use, before serving; how many opened."""
        ...

    def install_publish_tracing(self) -> None:
        """Carry the trace context in the messages this process sends (tracing on)."""
        ...

    def drain_soon(self, session_id: int, tenant_id: int) -> None:
        """Best effort: run the session's stored turns (when the tenant's fair share allows: a drain of its
        ending later sends them otherwise)."""
        ...

    def schedule_memory_work(self, session_id: int, session: SessionRow | None = None) -> None:
        """Best effort, after new messages in a session: embeddings, extraction, flush or compaction."""
        ...

    def enqueue_embed_memory(self, memory_id: int) -> None:
        """A committed memory's embedding (raises when the broker is away: callers log and go on)."""
        ...

    def dispatch_accepted(self, accepted: AcceptedWork) -> None:
        """Best effort, after a channel event is committed: its turn's drain or its answer's delivery."""
        ...

    def enqueue_job(self, name: str, *, tenant_id: int, user_id: int) -> None:
        """A maintenance job's run for one user, now (raises when the broker is away)."""
        ...


class NoDispatcher(RuntimeError):
    """Work was sent before a dispatcher was installed (a gateway built without its composition root)."""


_dispatcher: Dispatcher | None = None


def set_dispatcher(dispatcher: Dispatcher) -> None:
    global _dispatcher
    _dispatcher = dispatcher


def get_dispatcher() -> Dispatcher:
    if _dispatcher is None:
        raise NoDispatcher("no dispatcher installed: build the gateway with ops.gateway.create_app")
    return _dispatcher
