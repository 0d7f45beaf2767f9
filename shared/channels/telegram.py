"""Telegram: webhook verification, reading updates, and the Bot API calls (over httpx).

The Bot API is called directly (`POST {ENGRAM_TELEGRAM_API_URL}/bot<token>/<method>`, JSON in and out)
rather than through python-telegram-bot: that library's Bot is asyncio-only (every call a coroutine, so
each Celery task would need its own event loop), it imports 0.09 s slower and takes ~9 MB more than the
httpx engram already loads (measured: 0.43 s / 38.6 MB against 0.34 s / 29.4 MB), and it brings a second
retry policy; the four methods used here are one URL each.

Which updates become turns: `message`s with text in private chats; in groups only when the bot is
mentioned (@username or a text mention of its id) or the message replies to one of the bot's; commands
(/start, /memory, /forget) are answered without a turn. The bot token never leaves this module in an
error message: errors are built from the method, the HTTP status and Telegram's description.
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx

from shared.channels.errors import FormattingRejected, PermanentSendError, RetryableSendError
from shared.text import clean_text

MESSAGE_UNITS = 4_096  # UTF-16 code units per message, after entity parsing
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
COMMANDS = ("start", "memory", "forget")


_TOKEN_IN_URL = re.compile(r"/bot\d+:[A-Za-z0-9_-]+")


class _HideBotTokens(logging.Filter):
    """httpx logs every request's URL at INFO, and a Bot API URL carries the bot token: hide it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "/bot" in message:
            record.msg, record.args = _TOKEN_IN_URL.sub("/bot[redacted]", message), ()
        return True


logging.getLogger("httpx").addFilter(_HideBotTokens())


def secret_matches(expected: str, received: str | None) -> bool:
    """Constant-time comparison of the webhook's secret token header."""
    if not expected or received is None:
        return False
    return hmac.compare_digest(expected.encode(), received.encode())


@dataclass(frozen=True)
class TelegramMessage:
    update_id: int
    chat_id: int
    chat_type: str  # private, group, supergroup
    topic: int | None  # forum topic (message_thread_id)
    message_id: int
    user_id: str
    display_name: str | None
    text: str
    command: str | None  # start | memory | forget, when the message is one of ours
    argument: str

    @property
    def private(self) -> bool:
        return self.chat_type == "private"

    def target(self) -> dict[str, Any]:
        target: dict[str, Any] = {"chat_id": self.chat_id}
        if not self.private:
            target["reply_to_message_id"] = self.message_id
        if self.topic is not None:
            target["message_thread_id"] = self.topic
        return target

    @property
    def conversation(self) -> str:
        return f"{self.chat_id}:{self.topic if self.topic is not None else 'main'}"


_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]{3,64}))?(?:\s+(.*))?$", re.DOTALL)


def read_update(update: dict[str, Any], bot_id: str, bot_username: str | None) -> TelegramMessage | None:
    """The message of an update that engram should answer, or None (not a text message, or a group
    message not addressed to the bot)."""
    update_id = update.get("update_id")
    message = update.get("message")
    if not isinstance(update_id, int) or not isinstance(message, dict):
        return None  # edits, channel posts, member changes, callbacks: nothing to answer
    chat = message.get("chat") or {}
    sender = message.get("from") or {}
    text = message.get("text")
    if not isinstance(text, str) or not isinstance(chat.get("id"), int) or not isinstance(sender.get("id"), int):
        return None
    if sender.get("is_bot"):
        return None
    chat_type = str(chat.get("type") or "")
    if chat_type not in ("private", "group", "supergroup"):
        return None
    command, argument = _command(text, bot_username)
    if command == "":  # a command addressed to another bot
        return None
    if chat_type != "private" and command is None and not _addressed_to_bot(message, bot_id, bot_username):
        return None
    if command is None and bot_username:
        text = re.sub(rf"@{re.escape(bot_username)}\b", "", text, flags=re.IGNORECASE)
    text = clean_text(text).strip()
    if not text:
        return None
    names = [sender.get("first_name"), sender.get("last_name")]
    display = " ".join(str(n) for n in names if n) or sender.get("username")
    topic = message.get("message_thread_id") if message.get("is_topic_message") else None
    return TelegramMessage(
        update_id=update_id,
        chat_id=int(chat["id"]),
        chat_type=chat_type,
        topic=int(topic) if isinstance(topic, int) else None,
        message_id=int(message.get("message_id") or 0),
        user_id=str(sender["id"]),
        display_name=str(display) if display else None,
        text=text,
        command=command,
        argument=argument,
    )


def _command(text: str, bot_username: str | None) -> tuple[str | None, str]:
    """(command, argument) for /start, /memory, /forget; "" for a command meant for another bot; None
    for anything else (other commands go to the model as text)."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None, ""
    name, addressee, argument = match.group(1).lower(), match.group(2), (match.group(3) or "").strip()
    if addressee and (bot_username is None or addressee.lower() != bot_username.lower()):
        return "", ""
    return (name, argument) if name in COMMANDS else (None, "")


def _addressed_to_bot(message: dict[str, Any], bot_id: str, bot_username: str | None) -> bool:
    replied = message.get("reply_to_message") or {}
    if str((replied.get("from") or {}).get("id")) == bot_id:
        return True
    text = message.get("text") or ""
    for entity in message.get("entities") or []:
        if entity.get("type") == "text_mention" and str((entity.get("user") or {}).get("id")) == bot_id:
            return True
        if entity.get("type") == "mention" and bot_username:
            mention = _entity_text(text, entity)
            if mention.lower() == f"@{bot_username.lower()}":
                return True
    return False


def _entity_text(text: str, entity: dict[str, Any]) -> str:
    """Entity offsets count UTF-16 code units."""
    encoded = text.encode("utf-16-le")
    start, length = int(entity.get("offset", 0)), int(entity.get("length", 0))
    return encoded[start * 2 : (start + length) * 2].decode("utf-16-le", errors="replace")


class TelegramClient:
    def __init__(self, token: str, base_url: str, timeout: float, client: httpx.Client | None = None) -> None:
        self._token = token
        self._base = base_url.rstrip("/")
        self._http = client or httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TelegramClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def call(self, method: str, payload: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        url = f"{self._base}/bot{self._token}/{method}"
        try:
            response = self._http.post(url, json=payload or {}, timeout=timeout or httpx.USE_CLIENT_DEFAULT)
        except httpx.TransportError as exc:
            raise RetryableSendError(f"telegram {method}: network error: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        if response.status_code == 200 and body.get("ok"):
            return body.get("result")
        status = int(body.get("error_code") or response.status_code)
        description = str(body.get("description") or response.reason_phrase or "")[:300]
        message = f"telegram {method}: HTTP {status}: {description}"
        if status == 429:
            retry_after = (body.get("parameters") or {}).get("retry_after") or response.headers.get("Retry-After")
            raise RetryableSendError(message, float(retry_after) if retry_after is not None else None)
        if status >= 500 or response.status_code >= 500:
            raise RetryableSendError(message)
        if status == 400 and "parse entities" in description.lower():
            raise FormattingRejected(message)
        raise PermanentSendError(message)

    def send_message(self, target: dict[str, Any], text: str, markdown_v2: bool) -> int:
        payload: dict[str, Any] = {"chat_id": target["chat_id"], "text": text}
        if markdown_v2:
            payload["parse_mode"] = "MarkdownV2"
        if target.get("reply_to_message_id"):
            # The current form of reply_to_message_id; still posted if the message was deleted meanwhile.
            payload["reply_parameters"] = {
                "message_id": target["reply_to_message_id"],
                "allow_sending_without_reply": True,
            }
        if target.get("message_thread_id") is not None:
            payload["message_thread_id"] = target["message_thread_id"]
        result = self.call("sendMessage", payload)
        return int((result or {}).get("message_id") or 0)

    def get_me(self) -> dict[str, Any]:
        return dict(self.call("getMe") or {})

    def set_webhook(self, url: str, secret_token: str) -> None:
        self.call(
            "setWebhook",
            {"url": url, "secret_token": secret_token, "allowed_updates": ["message"], "drop_pending_updates": False},
        )

    def delete_webhook(self) -> None:
        self.call("deleteWebhook", {"drop_pending_updates": False})

    def get_updates(self, offset: int | None, timeout: int) -> list[dict[str, Any]]:
        payload: dict[str, Any] = {"timeout": timeout, "allowed_updates": ["message"]}
        if offset is not None:
            payload["offset"] = offset
        result = self.call("getUpdates", payload, timeout=timeout + 10)
        return [update for update in result or [] if isinstance(update, dict)]
