"""Posting a delivery to its platform: split, format, send each part with retries, record the outcome.

Each part is tried up to ENGRAM_CHANNEL_SEND_ATTEMPTS times (tenacity): a 429 waits the platform's
Retry-After, a 5xx or network error waits an exponential backoff capped at
ENGRAM_CHANNEL_RETRY_MAX_WAIT_SECONDS. A Retry-After longer than that cap gives the worker back: the
delivery returns to pending until then and the sweep sends it. Anything else (bad token, unknown
channel, bot blocked) fails at once. After the last try the delivery is `failed` with the reason
(secrets redacted) for `GET /v1/admin/deliveries?status=failed`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from redis.exceptions import RedisError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from shared.adapters.slack_web_api import SlackClient
from shared.adapters.telegram_bot_api import TelegramClient
from shared.channels import deliveries
from shared.channels.connections import Connection, get_connection_by_id, set_bot_username
from shared.channels.errors import FormattingRejected, RetryableSendError, SendError
from shared.channels.formatting import split_markdown, to_markdown_v2, to_mrkdwn, utf16_len
from shared.channels.identities import find_identity, record_display_name
from shared.channels.slack import MESSAGE_CHARS as SLACK_MESSAGE_CHARS
from shared.channels.telegram import MESSAGE_UNITS as TELEGRAM_MESSAGE_UNITS
from shared.infra import db
from shared.infra.config import Settings
from shared.infra.logging import get_logger
from shared.infra.secretbox import SecretKeyError

log = get_logger(__name__)


class Platform(Protocol):
    def parts(self, text: str) -> list[str]: ...
    def send(self, target: dict[str, Any], part: str) -> None: ...
    def prepare(self, delivery: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class SlackPlatform:
    def __init__(self, connection: Connection, settings: Settings) -> None:
        self.connection = connection
        self.client = SlackClient(
            connection.secret("bot_token"), settings.slack_api_url, settings.channel_http_timeout_seconds
        )

    def parts(self, text: str) -> list[str]:
        return [to_mrkdwn(part) for part in split_markdown(text, SLACK_MESSAGE_CHARS)]

    def send(self, target: dict[str, Any], part: str) -> None:
        self.client.post_message(str(target["channel"]), part, target.get("thread_ts"))

    def prepare(self, delivery: dict[str, Any]) -> None:
        """The person's Slack display name, fetched once per identity (best effort: it must not hold up
        the reply, and a failure is tried again with the next message)."""
        platform_user = (delivery.get("target") or {}).get("user")
        if not platform_user or delivery.get("user_id") is None:
            return
        with db.connection() as conn:
            identity = find_identity(conn, self.connection, str(platform_user))
        if identity is None or identity.profile_fetched:
            return
        try:
            name = self.client.display_name(str(platform_user))
        except SendError as exc:
            log.info("could not fetch a Slack display name", error=self.connection.redact(str(exc)))
            return
        with db.connection() as conn:
            record_display_name(conn, identity, name)

    def close(self) -> None:
        pass


class TelegramPlatform:
    def __init__(self, connection: Connection, settings: Settings) -> None:
        self.connection = connection
        self.client = TelegramClient(
            connection.secret("bot_token"), settings.telegram_api_url, settings.channel_http_timeout_seconds
        )

    def parts(self, text: str) -> list[str]:
        # Split the Markdown source: Telegram's limit counts the text after entity parsing, which is
        # never longer than the source; each part is formatted when it is sent.
        return split_markdown(text, TELEGRAM_MESSAGE_UNITS, utf16_len)

    def send(self, target: dict[str, Any], part: str) -> None:
        try:
            self.client.send_message(target, to_markdown_v2(part), markdown_v2=True)
        except FormattingRejected:
            # Telegram could not parse the entities: the words matter more than the formatting.
            self.client.send_message(target, part, markdown_v2=False)

    def prepare(self, delivery: dict[str, Any]) -> None:
        """Learn the bot's @username (for mentions in groups) if nobody could when it was added."""
        if self.connection.bot_username:
            return
        try:
            username = self.client.get_me().get("username")
        except SendError:
            return
        if username:
            with db.connection() as conn:
                set_bot_username(conn, self.connection.id, str(username))

    def close(self) -> None:
        self.client.close()


def platform_for(connection: Connection, settings: Settings) -> Platform:
    if connection.kind == "slack":
        return SlackPlatform(connection, settings)
    return TelegramPlatform(connection, settings)


class DeliveryFailed(Exception):
    def __init__(self, tries: int, message: str) -> None:
        super().__init__(message)
        self.tries = tries


class Reschedule(Exception):
    def __init__(self, tries: int, after_seconds: float, message: str) -> None:
        super().__init__(message)
        self.tries = tries
        self.after_seconds = after_seconds


def send_with_retries(send: Callable[[], None], settings: Settings, sleep: Callable[[float], None]) -> int:
    """Run `send` until it succeeds; returns the number of tries. DeliveryFailed after the last try or a
    permanent error; Reschedule when the platform asks to wait longer than the longest in-task wait."""
    cap = settings.channel_retry_max_wait_seconds
    backoff = wait_exponential(multiplier=0.5, min=0.5, max=max(cap, 0.5))

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableSendError) and exc.retry_after is not None:
            return exc.retry_after
        return min(cap, float(backoff(state)))

    tries = 0
    retrying = Retrying(
        retry=retry_if_exception_type(RetryableSendError),
        stop=stop_after_attempt(settings.channel_send_attempts),
        wait=wait,
        sleep=sleep,
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                tries += 1
                try:
                    send()
                except RetryableSendError as exc:
                    if exc.retry_after is not None and exc.retry_after > cap:
                        raise Reschedule(tries, exc.retry_after, str(exc)) from None
                    raise
    except SendError as exc:
        raise DeliveryFailed(tries, str(exc)) from None
    return tries


def _sender(platform: Platform, target: dict[str, Any], part: str) -> Callable[[], None]:
    return lambda: platform.send(target, part)


_KEY_RETRY_SECONDS = 60.0


def deliver(delivery_id: int, settings: Settings, sleep: Callable[[float], None] = time.sleep) -> str:
    """Post one delivery; returns what happened: sent, failed, rescheduled or skipped (not ours to send)."""
    with db.connection() as conn:
        delivery = deliveries.claim(conn, delivery_id, lease_seconds=float(settings.turn_time_limit))
        try:
            connection = get_connection_by_id(conn, delivery["connection_id"]) if delivery else None
        except SecretKeyError as exc:
            # The operator's to fix (a wrong or missing ENGRAM_SECRET_KEY): keep the reply, try again later.
            deliveries.reschedule(conn, delivery_id, 0, _KEY_RETRY_SECONDS, str(exc))
            log.error(
                "delivery waits: its connection's secrets do not decrypt", delivery_id=delivery_id, error=str(exc)
            )
            return "rescheduled"
    if delivery is None or connection is None:
        return "skipped"
    bound = log.bind(delivery_id=delivery_id, channel=connection.kind, connection=connection.slug)
    platform = platform_for(connection, settings)
    try:
        platform.prepare(delivery)
        parts = platform.parts(delivery["text"])
        tries = 0
        for index in range(delivery["parts_sent"], len(parts)):
            used = send_with_retries(_sender(platform, delivery["target"], parts[index]), settings, sleep)
            tries += used
            with db.connection() as conn:
                deliveries.part_sent(conn, delivery_id, index + 1, used)
        with db.connection() as conn:
            deliveries.finish_sent(conn, delivery_id, 0)
        bound.info("delivery sent", parts=len(parts))
        return "sent"
    except Reschedule as wait:
        error = connection.redact(str(wait))
        with db.connection() as conn:
            deliveries.reschedule(conn, delivery_id, wait.tries, wait.after_seconds, error)
        bound.warning("platform asked to wait; delivery rescheduled", after_seconds=wait.after_seconds, error=error)
        return "rescheduled"
    except DeliveryFailed as failure:
        error = connection.redact(str(failure))
        with db.connection() as conn:
            deliveries.finish_failed(conn, delivery_id, failure.tries, error)
        bound.error("delivery failed", tries=failure.tries, error=error)
        return "failed"
    except (db.DatabaseUnavailable, RedisError):
        raise  # the task retries; the lease keeps others off meanwhile
    except Exception as exc:
        # A bug, not the platform: record it rather than let the sweep retry it every lease forever.
        error = f"internal error: {type(exc).__name__}: {connection.redact(str(exc))[:300]}"
        with db.connection() as conn:
            deliveries.finish_failed(conn, delivery_id, 0, error)
        bound.exception("delivery failed on an internal error", error=error)
        return "failed"
    finally:
        platform.close()
