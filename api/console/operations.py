"""Operations (admin): the maintenance jobs, their runs, the queues and live workers, and a job run now."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console.filters import Filters
from api.console.render import page
from api.console.session import Admin, AdminPost, Signed
from shared.console.operations import RunRefused, operations, run_now
from shared.infra import db
from shared.infra.config import get_settings

router = APIRouter(prefix="/console/operations", include_in_schema=False)


PageNumber = Annotated[str, Query(max_length=2000)]


def _page(
    request: Request,
    signed: Signed,
    *,
    error: str = "",
    queued: str = "",
    code: int = 200,
    runs: int = 1,
    deliveries: int = 1,
    errors: dict[str, str] | None = None,
) -> HTMLResponse:
    with db.connection() as conn:
        ops = operations(conn, get_settings(), signed.principal.id, runs_page=runs, deliveries_page=deliveries)
    # Each list's page links keep the other list's page.
    query = {"runs": runs if runs > 1 else "", "deliveries": deliveries if deliveries > 1 else ""}
    context = {"ops": ops, "error": error, "queued": queued, "query": query, "errors": errors or {}}
    return page(request, "operations.html", signed, context, status_code=code)


@router.get("", response_class=HTMLResponse)
def operations_page(
    request: Request, signed: Admin, queued: str = "", runs: PageNumber = "", deliveries: PageNumber = ""
) -> HTMLResponse:
    given = Filters()
    runs_page, deliveries_page = given.page(runs, "runs"), given.page(deliveries, "deliveries")
    return _page(
        request,
        signed,
        queued=queued[:100],
        runs=runs_page,
        deliveries=deliveries_page,
        errors=given.errors,
        code=given.status_code,
    )


@router.post("/run")
def run_job_now(
    request: Request,
    signed: AdminPost,
    job: Annotated[str, Form(max_length=100)] = "",
    user_id: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    user = user_id.strip()
    if signed.principal.user_external_id is not None and user != signed.principal.user_external_id:
        return _page(request, signed, error="this key is bound to one user", code=status.HTTP_403_FORBIDDEN)
    try:
        with db.connection() as conn:
            run_now(conn, signed.principal.id, job, user)
    except RunRefused as exc:
        return _page(request, signed, error=str(exc), code=status.HTTP_422_UNPROCESSABLE_CONTENT)
    return RedirectResponse(f"/console/operations?queued={job}", status_code=status.HTTP_303_SEE_OTHER)
