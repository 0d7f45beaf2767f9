"""Liveness and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.schemas import Readiness
from shared import db
from shared.redis_client import get_redis

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


async def _run_check(check: Callable[[], str]) -> str:
    try:
        return await asyncio.wait_for(asyncio.to_thread(check), timeout=5)
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}".strip()[:300]


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz() -> JSONResponse:
    checks = dict(
        zip(
            ("postgres", "redis"),
            await asyncio.gather(_run_check(_check_postgres), _run_check(_check_redis)),
            strict=True,
        )
    )
    failing = [name for name, result in checks.items() if result != "ok"]
    body = Readiness(status="unavailable" if failing else "ready", checks=checks, failing=failing)
    return JSONResponse(body.model_dump(), status_code=503 if failing else 200)
