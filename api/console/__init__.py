"""The web console at /console: server-rendered pages (Jinja2 templates, htmx) over the same domain functions
and the same key scopes as the REST API. One router module per area; templates and static files (htmx and
uPlot, vendored: no CDN, no Node) ship inside this package."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from api.console import charts, erase, keys, memories, operations, sessions, sign_in, users
from api.console.render import page
from api.console.session import ConsoleError, SignInRequired
from api.errors import error_response

STATIC = Path(__file__).parent / "static"


def install_console(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    for module in (sign_in, users, memories, sessions, operations, charts, keys, erase):
        app.include_router(module.router)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _exc: SignInRequired) -> Response:
        if request.url.path.startswith("/console/api/"):
            return JSONResponse({"code": "unauthorized", "detail": "sign in to the console first"}, status_code=401)
        if request.method != "GET":
            return page(request, "error.html", None, {"message": "Sign in first."}, status_code=401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/console/sign-in?next={quote(target)}", status_code=303)

    @app.exception_handler(ConsoleError)
    async def _error(request: Request, exc: ConsoleError) -> Response:
        if request.url.path.startswith("/console/api/"):
            return error_response(exc.status_code, exc.detail)  # the API's code for the status
        response = page(request, "error.html", None, {"message": exc.detail}, status_code=exc.status_code)
        response.headers.update(exc.headers or {})
        return response
