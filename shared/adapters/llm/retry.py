"""Retry policy shared by the LLM providers.

Both SDKs are built with `max_retries=0` so that this module is the only place that decides when a
call is repeated: rate limits (429), server errors (5xx), timeouts and connection failures are
retried; every other 4xx is a caller bug or a configuration problem and fails at once. Whatever is
left over becomes an `LLMError` whose message can be shown to a user.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import anthropic
import httpx2
import openai
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from shared.llm.types import DeltaCallback, LLMError

T = TypeVar("T")

# Both SDKs run on httpx2, and the Anthropic SDK lets transport errors that happen while a stream is
# being read (a dropped connection, a read timeout) escape unwrapped, so those count as SDK errors too.
_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    anthropic.APIConnectionError,
    openai.APIConnectionError,
    httpx2.TransportError,
)
_TIMEOUT_ERRORS: tuple[type[Exception], ...] = (
    anthropic.APITimeoutError,
    openai.APITimeoutError,
    httpx2.TimeoutException,
)
# Anything else (including exceptions from the caller's delta callback) is a bug and propagates as is.
SDK_ERRORS: tuple[type[Exception], ...] = (anthropic.AnthropicError, openai.OpenAIError, *_CONNECTION_ERRORS)
_STATUS_ERRORS: tuple[type[Exception], ...] = (anthropic.APIStatusError, openai.APIStatusError)

# Anthropic reports failures that happen after the 200 header as an SSE `error` event; the SDK turns
# them into an APIStatusError carrying the original 200. Map the error type to the status the same
# failure gets before streaming starts, so it is classified the same way.
_STREAM_ERROR_STATUS = {"overloaded_error": 529, "api_error": 500, "rate_limit_error": 429}


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # total calls, including the first
    max_wait: float = 30.0  # cap on any single wait, including a server's Retry-After
    base_wait: float = 0.5  # first backoff step when the server gives no Retry-After
    # Injectable so tests can record the waits instead of measuring wall-clock time.
    sleep: Callable[[float], None] = time.sleep


DEFAULT_RETRY_POLICY = RetryPolicy()


class DeltaTracker:
    """Forwards text fragments to the caller's callback and remembers whether any went out.

    Once a fragment has been shown, repeating the request would show the start of the reply twice,
    so a failed stream may only be retried while `delivered` is False.
    """

    def __init__(self, on_delta: DeltaCallback | None) -> None:
        self._on_delta = on_delta
        self.delivered = False

    def __call__(self, text: str) -> None:
        if not text:
            return
        self.delivered = True
        if self._on_delta is not None:
            self._on_delta(text)


def call_with_retries(
    fn: Callable[[], T],
    *,
    provider: str,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    replay_safe: Callable[[], bool] | None = None,
) -> T:
    """Call `fn`, retrying transient SDK errors; SDK errors that remain are raised as `LLMError`.

    `replay_safe` is asked after each failure; returning False (e.g. output was already streamed to
    the user) stops retrying even if the error itself is transient.
    """
    attempts_made = 0

    def attempt() -> T:
        nonlocal attempts_made
        attempts_made += 1
        return fn()

    def should_retry(exc: BaseException) -> bool:
        return is_retryable(exc) and (replay_safe is None or replay_safe())

    retrying = Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=_wait_strategy(policy),
        retry=retry_if_exception(should_retry),
        sleep=policy.sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except SDK_ERRORS as exc:
        partial = replay_safe is not None and not replay_safe()
        raise to_llm_error(exc, provider=provider, attempts=attempts_made, partial=partial) from exc


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, _CONNECTION_ERRORS):  # includes timeouts
        return True
    status = effective_status(exc)
    return status is not None and (status == 429 or status >= 500)


def effective_status(exc: BaseException) -> int | None:
    """The HTTP status that describes `exc`, or None for errors without one."""
    if not isinstance(exc, _STATUS_ERRORS):
        return None
    status: int = getattr(exc, "status_code", 0)
    if status < 400:  # an error event inside a 200 stream
        kind, _ = _error_fields(exc)
        return _STREAM_ERROR_STATUS.get(kind or "")
    return status


def retry_after_seconds(headers: Mapping[str, str] | None, *, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait, from `retry-after-ms` or `retry-after` (seconds or date)."""
    if not headers:
        return None
    millis = _to_float(headers.get("retry-after-ms"))
    if millis is not None:
        return max(millis / 1000.0, 0.0)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    seconds = _to_float(raw)
    if seconds is not None:
        return max(seconds, 0.0)
    return _seconds_until_http_date(raw, now or datetime.now(UTC))


def to_llm_error(exc: BaseException, *, provider: str, attempts: int = 1, partial: bool = False) -> LLMError:
    retryable = is_retryable(exc)
    message = _describe(exc, provider)
    if partial:
        message = f"{message} (the reply was cut off after part of it was streamed)"
    elif retryable and attempts > 1:
        message = f"{message} (gave up after {attempts} attempts)"
    return LLMError(message, retryable=retryable, status=effective_status(exc))


def _wait_strategy(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    # Spelled as a sum because `wait_exponential_jitter` changed its arguments across tenacity versions.
    backoff = wait_exponential(multiplier=policy.base_wait) + wait_random(0, policy.base_wait)

    def wait(retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        hinted = retry_after_seconds(_headers_of(exc))
        if hinted is not None:
            # A Retry-After longer than the cap is still shortened: a caller waiting on a chat reply
            # is better served by one more early attempt than by an unbounded stall.
            return min(hinted, policy.max_wait)
        return min(backoff(retry_state), policy.max_wait)

    return wait


def _headers_of(exc: BaseException | None) -> Mapping[str, str] | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers if isinstance(headers, Mapping) else None


def _describe(exc: BaseException, provider: str) -> str:
    if isinstance(exc, _TIMEOUT_ERRORS):
        return f"{provider} request timed out"
    if isinstance(exc, _CONNECTION_ERRORS):
        cause = exc.__cause__ or exc.__context__
        detail = f": {cause}" if cause is not None and str(cause) else ""
        return f"{provider} connection failed{detail}"
    if isinstance(exc, _STATUS_ERRORS):
        return _describe_status_error(exc, provider)
    return f"{provider} error: {getattr(exc, 'message', None) or exc}"


def _describe_status_error(exc: BaseException, provider: str) -> str:
    kind, detail = _error_fields(exc)
    status: int = getattr(exc, "status_code", 0)
    head = f"{provider} returned {status}" if status >= 400 else f"{provider} stream error"
    if kind:
        head = f"{head} {kind}"
    return f"{head}: {detail or getattr(exc, 'message', '') or 'no details'}"


def _error_fields(exc: BaseException) -> tuple[str | None, str | None]:
    """(type, message) from an error body; Anthropic nests them under "error", OpenAI's SDK unwraps."""
    body: Any = getattr(exc, "body", None)
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]
    if not isinstance(body, Mapping):
        return None, body if isinstance(body, str) and body else None
    kind = body.get("type") or body.get("code")
    message = body.get("message")
    return (str(kind) if kind else None), (str(message) if message else None)


def _to_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _seconds_until_http_date(value: str, now: datetime) -> float | None:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT even when the zone is missing
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)
