"""Templates and the one way a console page is rendered."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.console.session import CSRF_FIELD, CSRF_HEADER, Signed

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def _query(base: dict[str, Any], **changes: Any) -> str:
    """The current query string with some parameters changed (empty ones dropped): pagination links."""
    merged = {**base, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


templates.env.filters["when"] = _when
templates.env.globals["with_query"] = _query
templates.env.globals["CSRF_FIELD"] = CSRF_FIELD
templates.env.globals["CSRF_HEADER"] = CSRF_HEADER


def page(
    request: Request, name: str, signed: Signed | None, context: dict[str, Any] | None = None, status_code: int = 200
) -> HTMLResponse:
    values: dict[str, Any] = {"signed": signed, "csrf": signed.csrf if signed else ""}
    if signed is not None:
        values["principal"] = signed.principal
    values.update(context or {})
    return templates.TemplateResponse(request, name, values, status_code=status_code)
