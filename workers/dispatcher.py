"""The Celery implementation of shared.queueing.dispatch.Dispatcher, for the gateway (ops/gateway.py installs it).

Each operation loads workers/dispatch.py (and with it the Celery app) when first called, not when the gateway
is built: the Celery app reads the settings and resolves the broker's URL when it is made. The gateway's start
loads it (`prepare`, before serving, as its lazy import did); a build for the schema alone (ops/api_doc.py)
never does. The functions are looked up on every call, so a test that replaces one of workers.dispatch's
functions is seen here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.turns.rows import SessionRow

if TYPE_CHECKING:  # only for annotations
    from shared.queueing.dispatch import AcceptedWork


class CeleryDispatcher:
    def prepare(self) -> None:
        """Builds the Celery app (ServiceNotConfigured without a Redis URL or a running embedded one)."""
        from workers import dispatch  # noqa: F401

    def warm_publishers(self) -> int:
        from workers import dispatch

        return dispatch.warm_publishers()

    def install_publish_tracing(self) -> None:
        from workers.tracing import install_publish_tracing

        install_publish_tracing()

    def drain_soon(self, session_id: int, tenant_id: int) -> None:
        from workers import dispatch

        dispatch.drain_soon(session_id, tenant_id)

    def schedule_memory_work(self, session_id: int, session: SessionRow | None = None) -> None:
        from workers import dispatch

        dispatch.schedule_memory_work(session_id, session)

    def enqueue_embed_memory(self, memory_id: int) -> None:
        from workers import dispatch

        dispatch.enqueue_embed_memory(memory_id)

    def dispatch_accepted(self, accepted: AcceptedWork) -> None:
        from workers import dispatch

        dispatch.dispatch_accepted(accepted)

    def enqueue_job(self, name: str, *, tenant_id: int, user_id: int) -> None:
        from workers import dispatch

        dispatch.enqueue_job(name, tenant_id=tenant_id, user_id=user_id)
