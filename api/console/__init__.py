"""The web console at /console: server-rendered pages (Jinja2 templates, htmx) over the same domain functions
and the same key scopes as the REST API. One router module per area; templates and static files (htmx and
uPlot, vendored: no CDN, no Node) ship inside this package."""

from __future__ import annotations

import inspect
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from api.console import charts, erase, keys, knowledge, memories, memory_bulk, operations, sessions, sign_in, users
from api.console.render import page
from api.console.session import ConsoleError, SignInRequired
from api.errors import error_response, validation_issues

STATIC = Path(__file__).parent / "static"


def invalid_input(exc: RequestValidationError) -> str:
    """The issues of a malformed URL or form as one sentence: which parameter, what is wrong, what was sent."""
    said = []
    for issue in validation_issues(list(exc.errors())):
        where = str(issue["loc"][-1]) if issue["loc"] else "the request"
        sent = f" (it was {issue['input']!r})" if isinstance(issue.get("input"), str | int) else ""
        said.append(f"{where}: {issue['msg']}{sent}")
    return "This request has bad input: " + "; ".join(said) + "."


def install_console(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    # memory_bulk before memories: its fixed paths (/export, /bulk-delete) before the memory id's
    for module in (sign_in, users, memory_bulk, memories, knowledge, sessions, operations, charts, keys, erase):
        app.include_router(module.router)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _exc: SignInRequired) -> Response:
        if request.url.path.startswith("/console/api/"):
            return JSONResponse({"code": "unauthorized", "detail": "sign in to the console first"}, status_code=401)
        if request.method != "GET":
            return page(request, "error.html", None, {"message": "Sign in first."}, status_code=401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/console/sign-in?next={quote(target)}", status_code=303)

    api_invalid = app.exception_handlers[RequestValidationError]  # the API's JSON body, for every other path

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        path = request.url.path
        if not path.startswith("/console/") or path.startswith("/console/api/"):
            answer = api_invalid(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        return page(request, "error.html", None, {"message": invalid_input(exc)}, status_code=422)

    @app.exception_handler(ConsoleError)
    async def _error(request: Request, exc: ConsoleError) -> Response:
        if request.url.path.startswith("/console/api/"):
            return error_response(exc.status_code, exc.detail)  # the API's code for the status
        response = page(request, "error.html", None, {"message": exc.detail}, status_code=exc.status_code)
        response.headers.update(exc.headers or {})
        return response
