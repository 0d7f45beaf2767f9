"""The HTTP gateway: routes only; the domain lives in shared/.

Built by its composition root (ops/gateway.py), which hands it the dispatcher that reaches the queues:
api/ imports shared/, never workers/."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from api.body_limit import BodySizeLimit
from api.console import install_console
from api.deps import MetricsKey
from api.docs import install_docs
from api.errors import document_errors, install_error_handlers
from api.mcp_server import McpEndpoint
from api.metrics import EngramCollector, RequestMetrics
from api.request_context import RequestContext
from api.request_limit import RequestLimits, RequestTimeLimit
from api.routes import admin, channel_admin, channels, context, health, ingest, memories, profiles, sessions, turns
from api.routes import openai as openai_routes
from shared.channels.connections import check_stored_secrets
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.heap import freeze_startup_heap
from shared.infra.logging import configure_logging, get_logger
from shared.infra.migrate import SchemaTooNew, check_schema_known
from shared.infra.redis_client import close_shared_async_redis
from shared.infra.secretbox import SecretKeyError
from shared.infra.services import ServiceNotConfigured
from shared.infra.tracing import configure_tracing, instrument_fastapi
from shared.memory.service import warm_query_embedder
from shared.queueing.dispatch import Dispatcher, get_dispatcher, set_dispatcher

log = get_logger(__name__)

# How long the start waits for the pool's connections (Postgres away: start anyway, answer 503).
POOL_WARM_TIMEOUT_SECONDS = 5.0
# And for the broker's (Redis away: start anyway; turns are stored and the sweep enqueues them later).
BROKER_WARM_TIMEOUT_SECONDS = 3.0


async def _warm_database() -> None:
    try:
        if not await asyncio.to_thread(db.warm_pool, POOL_WARM_TIMEOUT_SECONDS):
            log.warning("database connections not all open at start; the pool keeps trying")
    except Exception as exc:  # no database configured or reachable: start anyway; requests say why (503)
        log.warning("could not open database connections at start", error=f"{type(exc).__name__}: {exc}")
        return
    await asyncio.to_thread(_check_schema)


def _check_schema() -> None:
    """A schema a newer engram migrated may have moved what this code reads and writes: do not serve on it.
    Nor without the keys to the stored channel secrets: every Slack or Telegram webhook would be refused.
    (Postgres away: start anyway, as above; the check is for a database that answers.)"""
    try:
        with db.connection() as conn:
            check_schema_known(conn)
            check_stored_secrets(conn, get_settings())
    except (SchemaTooNew, SecretKeyError):
        raise
    except Exception as exc:
        log.warning("could not check the database schema at start", error=f"{type(exc).__name__}: {exc}")


async def _warm_broker() -> None:
    dispatcher = get_dispatcher()
    dispatcher.prepare()  # the broker not configured: the gateway does not start
    try:
        # On a timeout the thread goes on in the background and gives its producers back when it ends.
        await asyncio.wait_for(asyncio.to_thread(dispatcher.warm_publishers), BROKER_WARM_TIMEOUT_SECONDS)
    except Exception as exc:  # the broker away: publishes connect on demand, as before
        log.warning("could not open broker connections at start", error=f"{type(exc).__name__}: {exc}")


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    # The first search must not pay for loading the embedding model (seconds), and no request may be
    # served while it loads: importing torch holds the GIL for seconds at a time, which stalled every
    # request of a gateway that loaded it in a background thread while serving (accept and /healthz
    # p99 of hundreds of ms, ops/bench/turns.py). So it loads off the loop but before the port opens;
    # Kubernetes' startupProbe and `engram up` wait for it.
    await asyncio.to_thread(warm_query_embedder)
    # Every request checks out a connection and a turn's accept publishes a task: open them all now, not
    # one by one under a burst.
    await asyncio.gather(_warm_database(), _warm_broker())
    # Last, so what the warm-ups loaded is frozen too (shared/infra/heap.py says why); still before the port opens.
    log.info("startup heap frozen", objects=freeze_startup_heap())
    yield
    if isinstance(getattr(_app.state, "mcp", None), McpEndpoint):
        await _app.state.mcp.close()
    await close_shared_async_redis()
    db.close_pool()


def create_app(dispatcher: Dispatcher) -> FastAPI:
    """The gateway, sending its work through `dispatcher` (installed for the process: shared/queueing/dispatch.py)."""
    set_dispatcher(dispatcher)
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    app = FastAPI(
        title="engram",
        version="0.1.0",
        description="Durable, automatic memory for chat agents. Authenticate with `Authorization: Bearer <api key>`.",
        lifespan=lifespan,
        docs_url=None,  # api/docs.py serves /docs and /redoc without a CDN
        redoc_url=None,
    )
    install_docs(app)

    # Every error body is {"code", "detail"} (api/errors.py), and the OpenAPI schema says so.
    install_error_handlers(app)
    app.openapi = document_errors(app)  # type: ignore[method-assign]
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    # Inside the metrics and the request id, so a request answered by its limit is counted and logged as one.
    app.add_middleware(
        RequestTimeLimit,
        limits=RequestLimits(
            settings.request_time_limit_seconds, settings.max_wait_seconds, settings.chat_completions_wait_seconds
        ),
    )
    registry = CollectorRegistry()
    registry.register(EngramCollector(settings.metrics_sql_interval_seconds))
    app.add_middleware(RequestMetrics, registry=registry)
    app.add_middleware(RequestContext)  # outermost: every line of the request carries its id
    if configure_tracing("gateway", settings):
        instrument_fastapi(app)
        dispatcher.install_publish_tracing()

    # Aggregates over every tenant: only for keys with the `metrics` (or `admin`) scope.
    @app.get("/metrics", include_in_schema=False)
    def metrics(_principal: MetricsKey) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(health.router)
    app.include_router(turns.router)
    app.include_router(sessions.router)
    app.include_router(memories.router)
    app.include_router(profiles.router)
    app.include_router(admin.router)
    app.include_router(ingest.router)
    app.include_router(context.router)
    app.include_router(channels.router)
    app.include_router(channel_admin.router)
    _sync_env_channels()
    app.include_router(openai_routes.router)
    # MCP over streamable HTTP (the official SDK), authenticated like every /v1 route.
    app.state.mcp = McpEndpoint()
    app.add_route("/mcp", app.state.mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    install_console(app)  # the web console at /console (api/console/)
    return app


def _sync_env_channels() -> None:
    """The environment shortcut (ENGRAM_SLACK_* / ENGRAM_TELEGRAM_*): create or update the default tenant's
    `default` connections now. A failure is logged, not fatal: the gateway serves everything else."""
    from shared.channels.connections import ConnectionInvalid
    from shared.channels.setup import sync_env_connections
    from shared.infra.secretbox import SecretKeyError

    try:
        sync_env_connections(get_settings())
    except ConnectionInvalid as exc:
        log.error("channel settings in the environment are invalid", error=str(exc))
    except (db.DatabaseUnavailable, ServiceNotConfigured, SecretKeyError) as exc:
        log.error("could not store the channel connections from the environment", error=str(exc))
