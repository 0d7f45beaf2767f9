"""Charts (admin): the page, and the JSON series it draws (/console/api/charts/...), from Postgres."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from api.console.render import page
from api.console.session import Admin
from shared import db
from shared.console import charts

router = APIRouter(prefix="/console", include_in_schema=False)
Days = Annotated[int, Query(ge=1, le=charts.MAX_DAYS)]
Hours = Annotated[int, Query(ge=1, le=charts.MAX_HOURS)]


@router.get("/charts", response_class=HTMLResponse)
def charts_page(request: Request, signed: Admin) -> HTMLResponse:
    return page(request, "charts.html", signed)


@router.get("/api/charts/cache")
def cache(signed: Admin, days: Days = 30) -> dict[str, Any]:
    with db.connection() as conn:
        return charts.cache_share_daily(conn, signed.principal.id, days)


@router.get("/api/charts/llm-calls")
def llm_calls(signed: Admin, days: Days = 30) -> dict[str, Any]:
    with db.connection() as conn:
        return charts.calls_by_purpose_daily(conn, signed.principal.id, days)


@router.get("/api/charts/turns")
def turns(signed: Admin, hours: Hours = 48) -> dict[str, Any]:
    with db.connection() as conn:
        return charts.turns_hourly(conn, signed.principal.id, hours)


@router.get("/api/charts/memories")
def memories(signed: Admin, days: Days = 30) -> dict[str, Any]:
    with db.connection() as conn:
        return charts.memories_daily(conn, signed.principal.id, days)
