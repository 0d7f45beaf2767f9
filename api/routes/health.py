"""Liveness and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.schemas import Readiness
from shared import db
from shared.redis_client import get_redis

router = APIRouter(tags=["health"])

CHECK_TIMEOUT_SECONDS = 2.0
# One small executor per dependency: checks stuck on a dead Postgres must not queue the Redis check
# behind them (the shared default executor did, and /readyz then blamed Redis as well).
_EXECUTORS = {
    name: ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"readyz-{name}") for name in ("postgres", "redis")
}


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _check_postgres() -> str:
    with db.connection(timeout=CHECK_TIMEOUT_SECONDS) as conn:
        conn.execute("SELECT 1")
    return "ok"


def _check_redis() -> str:
    get_redis().ping()
    return "ok"


async def _run_check(name: str, check: Callable[[], str]) -> str:
    try:
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(_EXECUTORS[name], check), timeout=CHECK_TIMEOUT_SECONDS + 1)
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}".strip()[:300]


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz() -> JSONResponse:
    checks = dict(
        zip(
            ("postgres", "redis"),
            await asyncio.gather(_run_check("postgres", _check_postgres), _run_check("redis", _check_redis)),
            strict=True,
        )
    )
    failing = [name for name, result in checks.items() if result != "ok"]
    body = Readiness(status="unavailable" if failing else "ready", checks=checks, failing=failing)
    return JSONResponse(body.model_dump(), status_code=503 if failing else 200)
