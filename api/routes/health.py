"""Liveness and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.schemas.health import Readiness
from shared.infra import db
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis

log = get_logger(__name__)

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
    """ "ok" or a generic reason. The exception stays in the server log: its text can carry host names,
    user names or URLs, and /readyz answers anyone who can reach the gateway."""
    try:
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(_EXECUTORS[name], check), timeout=CHECK_TIMEOUT_SECONDS + 1)
    except TimeoutError:
        log.warning("readiness check timed out", dependency=name)
        return f"unavailable: no answer within {CHECK_TIMEOUT_SECONDS + 1:g} s"
    except Exception as exc:
        log.warning("readiness check failed", dependency=name, error=f"{type(exc).__name__}: {exc}")
        return "unavailable"


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz() -> JSONResponse:
    names = ("postgres", "redis")
    results = await asyncio.gather(_run_check("postgres", _check_postgres), _run_check("redis", _check_redis))
    checks = dict(zip(names, results, strict=True))
    failing = [name for name, result in checks.items() if result != "ok"]
    body = Readiness(status="unavailable" if failing else "ready", checks=checks, failing=failing)
    return JSONResponse(body.model_dump(), status_code=503 if failing else 200)
