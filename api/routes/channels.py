"""Slack and Telegram webhooks: verify, deduplicate, store, enqueue — nothing else, and fast.

Slack gives up on a request after 3 seconds and retries it; Telegram retries too. The work here is one
lookup, a signature check, one transaction and one publish; the turn and the reply run on workers.
A request that fails verification is 401 before anything is read into the database.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request, status
from starlette.concurrency import run_in_threadpool

from api.errors import ApiError
from shared.channels import slack, telegram
from shared.channels.connections import SLUG_PATTERN, Connection, get_connection
from shared.channels.inbound import Accepted
from shared.channels.receive import receive_slack_event, receive_telegram_update
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.logging import get_logger
from shared.queueing.dispatch import get_dispatcher

router = APIRouter(prefix="/v1/channels", tags=["channels"])
log = get_logger(__name__)

Slug = Annotated[str, Path(pattern=SLUG_PATTERN, description="The connection's name")]
WEBHOOK_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "The body is not a JSON object"},
    401: {"description": "Signature / secret token missing, wrong or stale; nothing was stored"},
    404: {"description": "No connection of this name"},
    503: {"description": "Database unavailable; the platform retries"},
}


def _connection(kind: str, slug: str) -> Connection:
    with db.connection() as conn:
        connection = get_connection(conn, kind, slug)
    if connection is None:
        raise ApiError(status.HTTP_404_NOT_FOUND, f"no {kind} connection {slug!r}")
    return connection


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(status.HTTP_400_BAD_REQUEST, "the body is not valid JSON") from exc
    if not isinstance(payload, dict):
        raise ApiError(status.HTTP_400_BAD_REQUEST, "the body must be a JSON object")
    return payload


def _dispatch(accepted: Accepted | None) -> None:
    if accepted is None or accepted.duplicate:
        return
    get_dispatcher().dispatch_accepted(accepted)


@router.post("/slack/{slug}/events", responses=WEBHOOK_ERRORS)
async def slack_events(
    slug: Slug,
    request: Request,
    x_slack_request_timestamp: Annotated[str | None, Header()] = None,
    x_slack_signature: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Slack Events API: `url_verification` is answered with its challenge; direct messages and mentions
    become turns whose replies are posted in the conversation (once, however often Slack retries)."""
    body = await request.body()
    connection = await run_in_threadpool(_connection, "slack", slug)
    if not slack.verify_signature(
        connection.secret("signing_secret"), x_slack_request_timestamp, x_slack_signature, body
    ):
        raise ApiError(status.HTTP_401_UNAUTHORIZED, "invalid or stale Slack signature")
    payload = _json_object(body)
    if payload.get("type") == "url_verification":
        return {"challenge": str(payload.get("challenge") or "")}
    accepted = await run_in_threadpool(receive_slack_event, connection, payload, get_settings())
    await run_in_threadpool(_dispatch, accepted)
    return {"ok": True}


@router.post("/telegram/{slug}/webhook", responses=WEBHOOK_ERRORS)
async def telegram_webhook(
    slug: Slug,
    request: Request,
    x_telegram_bot_api_secret_token: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Telegram Bot API webhook (set it with `engram channels telegram set-webhook URL`): private messages
    and group messages addressed to the bot become turns; /start, /memory and /forget are answered."""
    body = await request.body()
    connection = await run_in_threadpool(_connection, "telegram", slug)
    if not telegram.secret_matches(connection.secret("webhook_secret"), x_telegram_bot_api_secret_token):
        raise ApiError(status.HTTP_401_UNAUTHORIZED, "missing or wrong X-Telegram-Bot-Api-Secret-Token")
    update = _json_object(body)
    accepted = await run_in_threadpool(receive_telegram_update, connection, update, get_settings())
    await run_in_threadpool(_dispatch, accepted)
    return {"ok": True}
