"""Who is signed in to the console, and the checks every console request passes.

The API key itself is the session: it lives in an HttpOnly, SameSite=Strict cookie (Secure under HTTPS), so
page scripts never see it and other sites' requests never carry it. Each request authenticates it exactly as
the API's Bearer header is (shared.access.auth.authenticate), with the same scopes, user binding and rate limits.

Every POST also carries a CSRF token: HMAC-SHA256 keyed by the API key over a random per-sign-in nonce (its
own HttpOnly cookie), sent back in a hidden form field or the X-CSRF-Token header (htmx). A request from
another site has neither the key nor the nonce, so it cannot compute the token; nothing is stored server-side.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response, status
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.deps import check_user, rate_limit
from shared.access.auth import Principal, authenticate
from shared.infra import db

KEY_COOKIE = "engram_console_key"
NONCE_COOKIE = "engram_console_nonce"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
COOKIE_PATH = "/console"


class ConsoleError(HTTPException):
    """An error the console shows as a page (not the API's JSON body)."""


class SignInRequired(Exception):
    """No signed-in key: a page request goes to the sign-in form."""


def csrf_token(api_key: str, nonce: str) -> str:
    return hmac.new(api_key.encode(), b"engram-console-csrf:" + nonce.encode(), hashlib.sha256).hexdigest()


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=COOKIE_PATH,
    )


def clear_cookies(response: Response) -> None:
    for name in (KEY_COOKIE, NONCE_COOKIE):
        response.delete_cookie(name, path=COOKIE_PATH)


@dataclass(frozen=True)
class Signed:
    """The signed-in key's principal, and the CSRF token its forms carry."""

    principal: Principal
    csrf: str

    def allows(self, scope: str) -> bool:
        return self.principal.allows(scope)


def signed_in(request: Request) -> Signed:
    key = request.cookies.get(KEY_COOKIE)
    nonce = request.cookies.get(NONCE_COOKIE)
    if not key or not nonce:
        raise SignInRequired
    with db.connection(autocommit=True) as conn:
        principal = authenticate(conn, key)
    if principal is None:  # revoked or rotated since sign-in
        raise SignInRequired
    user_id = request.path_params.get("user_id")
    if isinstance(user_id, str):
        try:
            check_user(principal, user_id)
        except StarletteHTTPException as exc:  # the API's ApiError, said as a page
            raise ConsoleError(exc.status_code, str(exc.detail)) from exc
    try:
        rate_limit(principal)
    except StarletteHTTPException as exc:
        raise ConsoleError(exc.status_code, str(exc.detail), headers=exc.headers) from exc
    return Signed(principal, csrf_token(key, nonce))


def _with_scope(signed: Signed, scope: str) -> Signed:
    if not signed.allows(scope):
        raise ConsoleError(
            status.HTTP_403_FORBIDDEN,
            f"this API key lacks the scope {scope!r} (it has: {', '.join(sorted(signed.principal.scopes))})",
        )
    return signed


def needs(scope: str) -> Any:
    async def dependency(signed: Annotated[Signed, Depends(signed_in)]) -> Signed:
        return _with_scope(signed, scope)

    return Depends(dependency)


async def _checked_post(request: Request, signed: Annotated[Signed, Depends(signed_in)]) -> Signed:
    sent = request.headers.get(CSRF_HEADER)
    if sent is None:
        form = await request.form()  # cached by Starlette: the route's Form parameters read it again
        value = form.get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    if not sent or not hmac.compare_digest(sent, signed.csrf):
        raise ConsoleError(
            status.HTTP_403_FORBIDDEN, "the form's security token is missing or wrong: reload the page and try again"
        )
    return signed


def posts(scope: str) -> Any:
    """A write: signed in, the CSRF token checked, then the scope."""

    async def dependency(signed: Annotated[Signed, Depends(_checked_post)]) -> Signed:
        return _with_scope(signed, scope)

    return Depends(dependency)


SignedIn = Annotated[Signed, Depends(signed_in)]
MemoryReader = Annotated[Signed, needs("memory:read")]
MemoryWriter = Annotated[Signed, posts("memory:write")]
ChatReader = Annotated[Signed, needs("chat")]
Admin = Annotated[Signed, needs("admin")]
AdminPost = Annotated[Signed, posts("admin")]
AnyPost = Annotated[Signed, Depends(_checked_post)]
