"""The HTTP gateway: routes only; the domain lives in shared/."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from api.metrics import EngramCollector
from api.routes import health, memories, profiles, sessions, turns
from shared import db
from shared.config import get_settings
from shared.logging import configure_logging
from shared.services import ServiceNotConfigured


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    yield
    db.close_pool()


def create_app() -> FastAPI:
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    app = FastAPI(
        title="engram",
        version="0.1.0",
        description="Durable, automatic memory for chat agents. Authenticate with `Authorization: Bearer <api key>`.",
        lifespan=lifespan,
    )

    @app.exception_handler(db.DatabaseUnavailable)
    async def _db_down(_request: Request, exc: db.DatabaseUnavailable) -> JSONResponse:
        return JSONResponse(
            {"detail": "database unavailable; nothing was written, retry later"},
            status_code=503,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(ServiceNotConfigured)
    async def _not_configured(_request: Request, exc: ServiceNotConfigured) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    registry = CollectorRegistry()
    registry.register(EngramCollector())

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(health.router)
    app.include_router(turns.router)
    app.include_router(sessions.router)
    app.include_router(memories.router)
    app.include_router(profiles.router)
    return app
