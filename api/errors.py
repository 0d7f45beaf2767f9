"""Every error the gateway answers, in one shape: `{"code": <stable reason>, "detail": <text or issues>}`.

`detail` is what FastAPI has always sent (a sentence, or the list of validation issues); `code` is
the machine-readable reason a client can branch on. The handlers here are the only place error
bodies are made, and `document_errors` writes the same shape into the OpenAPI schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from shared.infra import db
from shared.infra.logging import get_logger
from shared.infra.secretbox import SecretKeyError
from shared.infra.services import ServiceNotConfigured
from shared.text import printable

log = get_logger(__name__)

# The default code of each status; a route can name a more specific one with `ApiError(code=...)`.
STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    503: "service_unavailable",
}
# Every code an error body can carry and its status: STATUS_CODES' defaults and the specific codes routes name.
# README's "Error codes" table lists the same codes; tests/unit/test_error_codes.py checks both against the
# codes the source raises, so a new code cannot go undocumented.
ERROR_CODES: dict[str, int] = {
    **{code: status for status, code in STATUS_CODES.items()},
    "missing_user": 400,
    "invalid_messages": 400,
    "tool_name_taken": 400,
    "missing_scope": 403,
    "wrong_user": 403,
    "memory_rejected": 422,
    "unknown_preset": 422,
    "token_budget_exceeded": 429,
    "turn_failed": 500,
    "database_unavailable": 503,
    "dependency_timeout": 503,
    "service_not_configured": 503,
    "secret_key": 503,
    "timeout": 504,
}
# A 422 or 400 body echoes the offending input; never more than this of it (a 10 MB value came back
# whole once), and at most this many issues per response.
MAX_ECHO_CHARS = 200
MAX_ISSUES = 20


def code_for(status_code: int) -> str:
    if status_code in STATUS_CODES:
        return STATUS_CODES[status_code]
    try:
        return HTTPStatus(status_code).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "client_error" if 400 <= status_code < 500 else "server_error"


class ApiError(HTTPException):
    """An HTTPException with an explicit `code` (otherwise the status's default code is used)."""

    def __init__(
        self, status_code: int, detail: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(status_code, detail, headers)
        self.code = code or code_for(status_code)


def refuse_over_budget(conn: db.Conn, tenant_id: int) -> None:
    """429 `token_budget_exceeded` (Retry-After: the next month) once the tenant's monthly token budget
    is spent: new work would spend tokens it no longer has."""
    from shared.access.quotas import seconds_until_next_month, turn_refusal

    refusal = turn_refusal(conn, tenant_id)
    if refusal is not None:
        raise ApiError(
            429,
            refusal,
            code="token_budget_exceeded",
            headers={"Retry-After": str(seconds_until_next_month())},
        )


class ValidationIssue(BaseModel):
    type: str = Field(description="pydantic's error type, e.g. string_too_long, missing, json_invalid")
    loc: list[str | int] = Field(description="Where: body/query/path/header, then field names and indexes")
    msg: str
    input: Any = Field(None, description=f"The offending input; at most {MAX_ECHO_CHARS} characters of it")
    ctx: dict[str, Any] | None = None


class ErrorOut(BaseModel):
    """The body of every 4xx and 5xx response."""

    code: str = Field(
        description="Stable machine-readable reason: "
        + ", ".join(f"{code} ({status})" for code, status in sorted(ERROR_CODES.items()))
        + " (more may be added; branch on the ones you handle)",
        examples=["validation_error"],
    )
    detail: str | list[ValidationIssue] = Field(
        description="A sentence saying what is wrong, or (validation_error) the list of issues"
    )


def error_response(
    status_code: int, detail: Any, code: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"code": code or code_for(status_code), "detail": _echo(detail, MAX_ECHO_CHARS * 5)}
    return JSONResponse(body, status_code=status_code, headers=headers)


def _echo(value: Any, limit: int = MAX_ECHO_CHARS) -> Any:
    """`value` made safe to send back: JSON-encodable (no lone surrogates, no NaN) and short."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        try:
            text = json.dumps(value, default=str, ensure_ascii=False, allow_nan=False)
        except ValueError:  # NaN or infinity somewhere inside
            text = json.dumps(value, default=str, ensure_ascii=False)
        if len(text) <= limit and _encodable(text):
            return json.loads(text)
        value = text
    value = printable(value)
    return value if len(value) <= limit else f"{value[:limit]}… ({len(value)} characters)"


def _encodable(text: str) -> bool:
    return printable(text) == text


# pydantic's own words for a lone surrogate in a length-limited string; said the way SafeText says it.
_UNICODE_MSG = "text is not valid Unicode: it contains a lone surrogate (an unpaired \\ud800-\\udfff escape)"


def validation_issues(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    issues = []
    for error in errors[:MAX_ISSUES]:
        issue: dict[str, Any] = {
            "type": str(error.get("type", "value_error")),
            "loc": [part if isinstance(part, int) else _echo(str(part)) for part in error.get("loc", ())],
            "msg": _echo(_UNICODE_MSG if error.get("type") == "string_unicode" else str(error.get("msg", "")), 400),
            "input": _echo(error.get("input")),
        }
        if error.get("ctx"):
            issue["ctx"] = {
                str(k): _echo(v if isinstance(v, int | float | str) else str(v)) for k, v in error["ctx"].items()
            }
        issues.append(issue)
    if len(errors) > MAX_ISSUES:
        issues.append(
            {
                "type": "too_many_errors",
                "loc": [],
                "msg": f"{len(errors) - MAX_ISSUES} more issues not shown",
                "input": None,
            }
        )
    return issues


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def explain_content_type(request: Request, errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Name the missing header when a JSON body was sent without `Content-Type: application/json`.

    FastAPI parses a body as JSON only when the header says so; otherwise the JSON text arrives as a string
    and pydantic's "Input should be a valid dictionary or object" says nothing about what to fix (curl -d
    sends form encoding, and a removed header sends none)."""
    content_type = request.headers.get("content-type", "")
    if _is_json(content_type):
        return errors
    sent = f"this request sent Content-Type: {content_type}" if content_type else "this request sent no Content-Type"
    msg = f"the body was not read as JSON: send the header Content-Type: application/json ({sent})"
    return [{**error, "msg": msg} if _unparsed_body(error) else error for error in errors]


def _unparsed_body(error: dict[str, Any]) -> bool:
    """The whole body is the issue and it arrived as text: a model expected, JSON text not parsed."""
    return tuple(error.get("loc", ())) == ("body",) and isinstance(error.get("input"), str | bytes)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        issues = validation_issues(explain_content_type(request, list(exc.errors())))
        return JSONResponse({"code": "validation_error", "detail": issues}, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI's "There was an error parsing the body" says nothing about why.
            detail = f"the request body is not UTF-8 JSON ({exc.__cause__.reason} at byte {exc.__cause__.start})"
        return error_response(exc.status_code, detail, getattr(exc, "code", None), dict(exc.headers or {}))

    @app.exception_handler(db.DatabaseUnavailable)
    async def _db_down(_request: Request, _exc: db.DatabaseUnavailable) -> JSONResponse:
        return error_response(
            503, "database unavailable; nothing was written, retry later", "database_unavailable", {"Retry-After": "5"}
        )

    @app.exception_handler(ServiceNotConfigured)
    async def _not_configured(_request: Request, exc: ServiceNotConfigured) -> JSONResponse:
        return error_response(503, str(exc), "service_not_configured")

    @app.exception_handler(SecretKeyError)
    async def _secret_key(request: Request, exc: SecretKeyError) -> JSONResponse:
        # A missing or wrong ENGRAM_SECRET_KEY: the operator's to fix, said without a traceback (no secret in it).
        log.error("stored secrets cannot be used", path=request.url.path, error=str(exc))
        return error_response(503, str(exc), "secret_key")

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises after this response, so the traceback still reaches the server log.
        log.error("unhandled error", path=request.url.path, error=type(exc).__name__)
        return error_response(500, "internal server error; the gateway log has the details", "internal_error")


# --------------------------------------------------------------------------- OpenAPI

_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
_DEFAULT_DESCRIPTIONS = {
    "400": "The body could not be read as JSON text (e.g. it is not UTF-8)",
    "401": "Missing or invalid API key",
    "403": "The API key lacks the scope this needs (`missing_scope`) or is bound to another user (`wrong_user`)",
    "413": "Request body larger than ENGRAM_MAX_REQUEST_BYTES",
    "429": "Rate limit of the key or tenant (`rate_limited`, with Retry-After) or monthly token budget exceeded",
    "422": "Invalid request: the issues are listed in `detail`",
    "503": "Database unavailable; nothing was written (`database_unavailable`), or a dependency did not answer "
    "within the request's time limit (`dependency_timeout`)",
}


def document_errors(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """An `app.openapi` that documents the error shape on every 4xx/5xx response, plus the errors
    every operation can get from the gateway itself: 401 (secured), 413 (has a body), 422 and 503."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes, tags=app.openapi_tags
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        error_schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(error_schema.pop("$defs", {}))
        components["ErrorOut"] = error_schema
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                _document_operation(path, operation)
        for unused in ("HTTPValidationError", "ValidationError"):
            if unused in components and f"#/components/schemas/{unused}" not in json.dumps(schema["paths"]):
                del components[unused]
        app.openapi_schema = schema
        return schema

    return openapi


def _document_operation(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    if operation.get("security"):
        responses.setdefault("401", {"description": _DEFAULT_DESCRIPTIONS["401"]})
        responses.setdefault("403", {"description": _DEFAULT_DESCRIPTIONS["403"]})
        responses.setdefault("429", {"description": _DEFAULT_DESCRIPTIONS["429"]})
    if "requestBody" in operation:
        responses.setdefault("400", {"description": _DEFAULT_DESCRIPTIONS["400"]})
        responses.setdefault("413", {"description": _DEFAULT_DESCRIPTIONS["413"]})
    # The OpenAI-compatible routes answer every error in OpenAI's shape, a malformed body with 400.
    openai_shaped = "openai-compatible" in operation.get("tags", ())
    if (operation.get("parameters") or "requestBody" in operation) and not openai_shaped:
        responses.setdefault("422", {"description": _DEFAULT_DESCRIPTIONS["422"]})
    if path.startswith("/v1/"):
        responses.setdefault("503", {"description": _DEFAULT_DESCRIPTIONS["503"]})
    for status_code, response in responses.items():
        if status_code[:1] not in ("4", "5"):
            continue
        content = response.get("content", {}).get("application/json", {})
        if not content or "HTTPValidationError" in json.dumps(content):
            ref = {"$ref": "#/components/schemas/OpenAIErrorOut"} if openai_shaped else _ERROR_REF
            response["content"] = {"application/json": {"schema": ref}}
