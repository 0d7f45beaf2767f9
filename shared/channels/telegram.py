"""Telegram: webhook verification and reading updates (the Bot API calls are
shared/adapters/telegram_bot_api.py's).

Which updates become turns: `message`s with text in private chats; in groups only when the bot is
mentioned (@username or a text mention of its id) or the message replies to one of the bot's; commands
(/start, /memory, /forget) are answered without a turn.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from typing import Any

from shared.text import clean_text

MESSAGE_UNITS = 4_096  # UTF-16 code units per message, after entity parsing
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
COMMANDS = ("start", "memory", "forget")


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
