"""Slack's Web API: the calls a delivery makes (post a message, read a user's display name), through slack_sdk.

Failures become the send errors of shared/channels/errors.py: 429 (with its Retry-After), 5xx, Slack's
transient error codes and network errors are retryable; any other refusal is permanent.
"""

from __future__ import annotations

import logging
import urllib.error
from http.client import HTTPException
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from shared.channels.errors import PermanentSendError, RetryableSendError

# slack_sdk logs request headers (the bot token) at DEBUG: its client gets a logger that never does.
_SDK_LOG = logging.getLogger("engram.slack_sdk")
_SDK_LOG.setLevel(logging.WARNING)


class SlackClient:
    """The Web API calls a delivery makes, through slack_sdk's WebClient (its own retries off: the delivery
    loop retries with tenacity, honouring Retry-After)."""

    def __init__(self, token: str, base_url: str, timeout: float) -> None:
        self._client = WebClient(
            token=token,
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=int(max(1, timeout)),
            logger=_SDK_LOG,
            retry_handlers=[],
        )

    def post_message(self, channel: str, text: str, thread_ts: str | None) -> str:
        """Post one message (mrkdwn); returns its ts."""
        kwargs: dict[str, Any] = {"channel": channel, "text": text, "mrkdwn": True}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        response = self._call("chat.postMessage", lambda: self._client.chat_postMessage(**kwargs))
        return str(response.get("ts") or "")

    def display_name(self, user: str) -> str | None:
        response = self._call("users.info", lambda: self._client.users_info(user=user))
        info = response.get("user") or {}
        profile = info.get("profile") or {}
        name = profile.get("display_name") or profile.get("real_name") or info.get("real_name") or info.get("name")
        return str(name)[:200] if name else None

    @staticmethod
    def _call(method: str, call: Any) -> Any:
        try:
            return call()
        except SlackApiError as exc:
            status = int(getattr(exc.response, "status_code", 0) or 0)
            data = exc.response.data if isinstance(exc.response.data, dict) else {}
            reason = str(data.get("error") or f"HTTP {status}")
            message = f"slack {method}: HTTP {status}: {reason}"
            if status == 429:
                raise RetryableSendError(message, _retry_after(exc.response.headers)) from None
            if status >= 500 or reason in ("fatal_error", "internal_error", "service_unavailable", "request_timeout"):
                raise RetryableSendError(message) from None
            raise PermanentSendError(message) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, HTTPException, OSError) as exc:
            raise RetryableSendError(f"slack {method}: network error: {type(exc).__name__}") from None
        except (SlackClientError, ValueError) as exc:  # e.g. a 5xx whose body is not JSON
            raise RetryableSendError(f"slack {method}: unreadable response ({type(exc).__name__})") from None


def _retry_after(headers: Any) -> float | None:
    for name in ("Retry-After", "retry-after"):
        value = (headers or {}).get(name)
        if value is not None:
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None
