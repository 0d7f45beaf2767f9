"""Liveness and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.schemas import Readiness
from shared import db
from shared.logging import get_logger
from shared.redis_client import get_redis

log = get_logger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _check_postgres() -> str:
    with db.get_pool().connection(timeout=3) as conn:
        conn.execute("SELECT 1")
    return "ok"


def _check_redis() -> str:
    get_redis().ping()
    return "ok"


async def _run_check(name: str, check: Callable[[], str]) -> str:
    """ "ok" or a generic reason. The exception stays in the server log: its text can carry host names,
    user names or URLs, and /readyz answers anyone who can reach the gateway."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(check), timeout=5)
    except TimeoutError:
        log.warning("readiness check timed out", dependency=name)
        return "unavailable: no answer within 5 s"
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
