"""/docs (Swagger UI) and /redoc served with their JavaScript and CSS from the gateway itself.

FastAPI's default pages load them from a CDN, so a gateway without network (engram runs offline) showed a
blank page. The files come from the `fastapi-offline` package (a maintained copy of swagger-ui-dist and
redoc's standalone bundle), served under ASSETS_URL; this is FastAPI's documented "self-hosting
JavaScript and CSS for docs", with the app built with `docs_url=None, redoc_url=None`.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"


def install_docs(app: FastAPI) -> None:
    """Swagger UI at /docs and ReDoc at /redoc, every asset from ASSETS_URL on this gateway."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")

    def assets(request: Request) -> str:
        return f"{request.scope.get('root_path', '')}{ASSETS_URL}"

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root, base = request.scope.get("root_path", ""), assets(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
            swagger_js_url=f"{base}/swagger-ui-bundle.js",
            swagger_css_url=f"{base}/swagger-ui.css",
            swagger_favicon_url=f"{base}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root, base = request.scope.get("root_path", ""), assets(request)
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{base}/redoc.standalone.js",
            redoc_favicon_url=f"{base}/favicon.png",
            with_google_fonts=False,  # fonts from Google's CDN: the page falls back to the browser's own
        )
