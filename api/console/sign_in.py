"""Signing in (an API key into the cookie) and out."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console.render import page
from api.console.session import (
    CSRF_FIELD,
    KEY_COOKIE,
    NONCE_COOKIE,
    AnyPost,
    clear_cookies,
    new_nonce,
    set_cookie,
)
from shared.access.auth import authenticate
from shared.infra import db

router = APIRouter(prefix="/console", include_in_schema=False)
MAX_KEY_CHARS = 200


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console page of this site, never another site (//evil.example)."""
    if target and target.startswith("/console/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console/users"


def _form(request: Request, next_url: str, *, error: str = "", status_code: int = 200) -> Response:
    # Signing in has no session yet: its form is protected by a double-submitted nonce (a login CSRF would
    # sign the victim in as the attacker). The nonce is replaced at sign-in.
    nonce = request.cookies.get(NONCE_COOKIE) or new_nonce()
    response = page(
        request,
        "sign_in.html",
        None,
        {"next": safe_next(next_url), "error": error, "sign_in_token": nonce},
        status_code=status_code,
    )
    set_cookie(request, response, NONCE_COOKIE, nonce)
    return response


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_form(request: Request, next: str = "") -> Response:
    return _form(request, next)


@router.post("/sign-in")
def sign_in(
    request: Request,
    api_key: Annotated[str, Form(max_length=MAX_KEY_CHARS)] = "",
    next: Annotated[str, Form(max_length=2000)] = "",
    token: Annotated[str, Form(alias=CSRF_FIELD, max_length=200)] = "",
) -> Response:
    nonce = request.cookies.get(NONCE_COOKIE, "")
    if not nonce or not hmac.compare_digest(token, nonce):
        return _form(request, next, error="The form expired: sign in again.", status_code=status.HTTP_403_FORBIDDEN)
    key = api_key.strip()
    if not key:
        return _form(request, next, error="Enter an API key.", status_code=status.HTTP_400_BAD_REQUEST)
    with db.connection(autocommit=True) as conn:
        principal = authenticate(conn, key)
    if principal is None:
        return _form(
            request, next, error="This key is not valid (or was revoked).", status_code=status.HTTP_401_UNAUTHORIZED
        )
    response = RedirectResponse(safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
    set_cookie(request, response, KEY_COOKIE, key)
    set_cookie(request, response, NONCE_COOKIE, new_nonce())  # a fresh session: no token from before sign-in works
    return response


@router.post("/sign-out")
def sign_out(_signed: AnyPost) -> Response:
    response = RedirectResponse("/console/sign-in", status_code=status.HTTP_303_SEE_OTHER)
    clear_cookies(response)
    return response
