"""Slack: Events API request verification and reading (the Web API calls replies need are
shared/adapters/slack_web_api.py's).

Verification follows Slack's v0 signing scheme: HMAC-SHA256 over `v0:{timestamp}:{raw body}` with the
app's signing secret, compared in constant time, with the timestamp within five minutes of now (a
captured request cannot be replayed later). The body is the raw bytes as received: re-serialised JSON
would not match.

Which events become turns: direct messages (`message` with `channel_type: im`) and `app_mention`s. A
message with a subtype (edits, joins, bot messages, file shares…), a `bot_id`, or from the app's own
bot user is ignored; so are channel messages, whose mentions arrive as `app_mention` anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import Any

from shared.text import clean_text

SIGNATURE_WINDOW_SECONDS = 300
# Slack renders up to 40,000 characters but recommends at most 4,000 per message; parts stay under it
# (measured on the Markdown source: escaping & < > can add a little).
MESSAGE_CHARS = 3_900


def verify_signature(
    signing_secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float | None = None
) -> bool:
    if not signing_secret or not timestamp or not signature:
        return False
    try:
        sent_at = int(timestamp)
    except ValueError:
        return False
    if abs((now if now is not None else time.time()) - sent_at) > SIGNATURE_WINDOW_SECONDS:
        return False
    expected = sign(signing_secret, timestamp, body)
    return hmac.compare_digest(expected.encode(), signature.encode())


def sign(signing_secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class SlackMessage:
    event_id: str
    team_id: str
    user: str
    channel: str
    thread: str  # the conversation inside the channel: a thread's root ts, or "main" for a DM's main line
    text: str
    reply_thread_ts: str | None  # where the reply goes (None: the DM's main line)


_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")


def read_event(payload: dict[str, Any]) -> SlackMessage | None:
    """The message an `event_callback` asks engram to answer, or None when it is not for us."""
    if payload.get("type") != "event_callback":
        return None
    event = payload.get("event")
    if not isinstance(event, dict):
        return None
    event_id = str(payload.get("event_id") or "")
    user = event.get("user")
    channel = event.get("channel")
    text = event.get("text")
    if not event_id or not isinstance(user, str) or not isinstance(channel, str) or not isinstance(text, str):
        return None
    if event.get("subtype") or event.get("bot_id") or event.get("bot_profile") or user in _bot_user_ids(payload):
        return None
    ts = str(event.get("ts") or "")
    thread_ts = event.get("thread_ts")
    kind = event.get("type")
    if kind == "message" and event.get("channel_type") == "im":
        thread = str(thread_ts) if thread_ts else "main"
        reply_ts = str(thread_ts) if thread_ts else None
    elif kind == "app_mention":
        # A mention starts (or continues) a thread: the conversation is that thread.
        root = str(thread_ts or ts)
        thread, reply_ts = root, root
        text = _MENTION.sub("", text)
    else:
        return None
    text = clean_text(text).strip()
    if not text:
        return None
    return SlackMessage(
        event_id=event_id,
        team_id=str(payload.get("team_id") or ""),
        user=user,
        channel=channel,
        thread=thread,
        text=_unescape(text),
        reply_thread_ts=reply_ts,
    )


def _bot_user_ids(payload: dict[str, Any]) -> set[str]:
    """The app's own bot user, as Slack names it in the event's authorizations."""
    ids = {
        str(a.get("user_id")) for a in payload.get("authorizations") or [] if isinstance(a, dict) and a.get("is_bot")
    }
    return {i for i in ids if i and i != "None"}


def _unescape(text: str) -> str:
    """Slack escapes &, < and > in message text; the model should read what the person typed."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
