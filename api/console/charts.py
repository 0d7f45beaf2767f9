"""Charts (admin): the page, and the JSON series it draws (/console/api/charts/...), from Postgres."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from api.console.render import page
from api.console.session import Admin, Signed
from shared.console import charts
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import Conn

router = APIRouter(prefix="/console", include_in_schema=False)
Days = Annotated[int, Query(ge=1, le=charts.MAX_DAYS)]
Hours = Annotated[int, Query(ge=1, le=charts.MAX_HOURS)]


@router.get("/charts", response_class=HTMLResponse)
def charts_page(request: Request, signed: Admin) -> HTMLResponse:
    return page(request, "charts.html", signed)


Series = Callable[[Conn, int, int], dict[str, Any]]


def _series(signed: Signed, series: Series, span: int) -> dict[str, Any]:
    """One chart's series for the admin's tenant over the last `span` days or hours."""
    with db.connection() as conn:
        return series(conn, signed.principal.id, span)


def _daily(series: Series) -> Callable[..., dict[str, Any]]:
    def route(signed: Admin, days: Days = 30) -> dict[str, Any]:
        return _series(signed, series, days)

    return route


def _llm_calls(conn: Conn, tenant_id: int, days: int) -> dict[str, Any]:
    # The prices are read per request: the settings object is the one place they live.
    return charts.calls_by_purpose_daily(conn, tenant_id, days, get_settings().llm_prices)


# The daily charts, each a route of the same shape: GET /console/api/charts/<name>?days=N.
DAILY: dict[str, Series] = {
    "cache": charts.cache_share_daily,
    "llm-calls": _llm_calls,
    "memories": charts.memories_daily,
    "lag": charts.lag_daily,
}
for _name, _chart in DAILY.items():
    router.add_api_route(f"/api/charts/{_name}", _daily(_chart), methods=["GET"], name=f"chart_{_name}")


@router.get("/api/charts/turns")
def turns(signed: Admin, hours: Hours = 48) -> dict[str, Any]:
    return _series(signed, charts.turns_hourly, hours)
