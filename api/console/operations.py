"""Operations (admin): the maintenance jobs, their runs, the queues and live workers, and a job run now."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console.render import page
from api.console.session import Admin, AdminPost, Signed
from shared import db
from shared.config import get_settings
from shared.console.operations import RunRefused, operations, run_now

router = APIRouter(prefix="/console/operations", include_in_schema=False)


def _page(request: Request, signed: Signed, *, error: str = "", queued: str = "", code: int = 200) -> HTMLResponse:
    with db.connection() as conn:
        ops = operations(conn, get_settings(), signed.principal.id)
    return page(request, "operations.html", signed, {"ops": ops, "error": error, "queued": queued}, status_code=code)


@router.get("", response_class=HTMLResponse)
def operations_page(request: Request, signed: Admin, queued: str = "") -> HTMLResponse:
    return _page(request, signed, queued=queued[:100])


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
