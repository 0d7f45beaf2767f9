"""Channel pure logic: Slack signatures and events, Telegram updates, mrkdwn / MarkdownV2, splitting."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.channels import slack, telegram
from shared.channels.connections import ConnectionInvalid, redact, validate
from shared.channels.formatting import split_markdown, to_markdown_v2, to_mrkdwn, utf16_len

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BODY = b'{"type":"event_callback","event_id":"Ev1"}'


def test_slack_signature_accepts_the_signed_body_within_five_minutes() -> None:
    signature = slack.sign(SECRET, "1700000000", BODY)
    assert slack.verify_signature(SECRET, "1700000000", signature, BODY, now=1700000000 + 299)
    assert slack.verify_signature(SECRET, "1700000000", signature, BODY, now=1700000000 - 299)


@pytest.mark.parametrize(
    ("secret", "timestamp", "body", "now"),
    [
        ("wrong-secret", "1700000000", BODY, 1700000000),  # another app's secret
        (SECRET, "1700000000", BODY + b" ", 1700000000),  # the body changed (re-serialised JSON)
        (SECRET, "1700000000", BODY, 1700000000 + 301),  # stale: a replay
        (SECRET, "1700000001", BODY, 1700000000),  # the timestamp is part of what is signed
    ],
)
def test_slack_signature_refuses(secret: str, timestamp: str, body: bytes, now: float) -> None:
    signature = slack.sign(secret, "1700000000", BODY)
    assert not slack.verify_signature(SECRET, timestamp, signature, body, now=now)


def test_slack_signature_refuses_missing_parts() -> None:
    signature = slack.sign(SECRET, "1700000000", BODY)
    assert not slack.verify_signature(SECRET, None, signature, BODY, now=1700000000)
    assert not slack.verify_signature(SECRET, "1700000000", None, BODY, now=1700000000)
    assert not slack.verify_signature(SECRET, "not-a-number", signature, BODY, now=1700000000)
    assert not slack.verify_signature("", "1700000000", signature, BODY, now=1700000000)


def slack_event(event: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": "Ev1",
        "authorizations": [{"user_id": "UBOT", "is_bot": True}],
        "event": event,
        **extra,
    }


def test_slack_dm_and_mention_become_messages_in_their_conversations() -> None:
    dm = slack.read_event(
        slack_event(
            {
                "type": "message",
                "channel_type": "im",
                "user": "U1",
                "channel": "D1",
                "text": "hi &lt;there&gt;",
                "ts": "1.1",
            }
        )
    )
    assert dm is not None and dm.thread == "main" and dm.reply_thread_ts is None and dm.text == "hi <there>"
    threaded = slack.read_event(
        slack_event(
            {
                "type": "message",
                "channel_type": "im",
                "user": "U1",
                "channel": "D1",
                "text": "more",
                "ts": "1.3",
                "thread_ts": "1.2",
            }
        )
    )
    assert threaded is not None and threaded.thread == "1.2" and threaded.reply_thread_ts == "1.2"
    mention = slack.read_event(
        slack_event({"type": "app_mention", "user": "U1", "channel": "C1", "text": "<@UBOT> what's up?", "ts": "2.1"})
    )
    assert mention is not None and mention.text == "what's up?"
    assert mention.thread == "2.1" and mention.reply_thread_ts == "2.1"  # a mention starts a thread


@pytest.mark.parametrize(
    "event",
    [
        {"type": "message", "channel_type": "im", "user": "UBOT", "channel": "D1", "text": "my own", "ts": "1"},
        {
            "type": "message",
            "channel_type": "im",
            "user": "U1",
            "channel": "D1",
            "text": "x",
            "ts": "1",
            "bot_id": "B1",
        },
        {
            "type": "message",
            "subtype": "message_changed",
            "channel_type": "im",
            "user": "U1",
            "channel": "D1",
            "text": "edit",
            "ts": "1",
        },
        {"type": "message", "subtype": "channel_join", "user": "U1", "channel": "C1", "text": "joined", "ts": "1"},
        {"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1", "text": "chatter", "ts": "1"},
        {"type": "app_mention", "user": "U1", "channel": "C1", "text": "<@UBOT>", "ts": "1"},  # nothing said
        {"type": "reaction_added", "user": "U1", "reaction": "+1"},
    ],
)
def test_slack_events_not_for_us_are_ignored(event: dict[str, Any]) -> None:
    assert slack.read_event(slack_event(event)) is None


def tg_update(text: str, chat_type: str = "private", **message: Any) -> dict[str, Any]:
    return {
        "update_id": 10,
        "message": {
            "message_id": 5,
            "from": {"id": 42, "is_bot": False, "first_name": "Ada", "last_name": "L"},
            "chat": {"id": 42 if chat_type == "private" else -100, "type": chat_type},
            "text": text,
            **message,
        },
    }


def test_telegram_private_messages_and_commands() -> None:
    plain = telegram.read_update(tg_update("hello"), "7", "engram_bot")
    assert plain is not None and plain.command is None and plain.display_name == "Ada L"
    assert plain.target() == {"chat_id": 42}
    forget = telegram.read_update(tg_update("/forget 123456"), "7", "engram_bot")
    assert forget is not None and forget.command == "forget" and forget.argument == "123456"
    addressed = telegram.read_update(tg_update("/memory@engram_bot"), "7", "engram_bot")
    assert addressed is not None and addressed.command == "memory"
    assert telegram.read_update(tg_update("/memory@other_bot"), "7", "engram_bot") is None
    other = telegram.read_update(tg_update("/help me"), "7", "engram_bot")
    assert other is not None and other.command is None  # not ours: the model reads it


def test_telegram_groups_only_when_addressed() -> None:
    assert telegram.read_update(tg_update("chatter", "group"), "7", "engram_bot") is None
    mention = tg_update("hey @engram_bot, hi", "supergroup", entities=[{"type": "mention", "offset": 4, "length": 11}])
    found = telegram.read_update(mention, "7", "engram_bot")
    assert found is not None and found.text == "hey , hi"
    assert found.target() == {"chat_id": -100, "reply_to_message_id": 5}
    reply = tg_update("and then?", "group", reply_to_message={"message_id": 4, "from": {"id": 7, "is_bot": True}})
    assert telegram.read_update(reply, "7", "engram_bot") is not None
    emoji_first = tg_update("😀 @engram_bot x", "group", entities=[{"type": "mention", "offset": 3, "length": 11}])
    assert telegram.read_update(emoji_first, "7", "engram_bot") is not None  # offsets are UTF-16 units
    from_bot = tg_update("hi")
    from_bot["message"]["from"]["is_bot"] = True
    assert telegram.read_update(from_bot, "7", "engram_bot") is None
    assert telegram.read_update({"update_id": 3, "edited_message": {}}, "7", "engram_bot") is None


def test_telegram_secret_comparison() -> None:
    assert telegram.secret_matches("abc_DEF-1", "abc_DEF-1")
    assert not telegram.secret_matches("abc_DEF-1", "abc_DEF-2")
    assert not telegram.secret_matches("abc_DEF-1", None)
    assert not telegram.secret_matches("", "")


def test_mrkdwn_from_markdown() -> None:
    text = "# Plan\n\n**Bold** and *it* ~~no~~ `x<y` [docs](https://e.x/a?b=1&c=2) a & b\n\n- one\n- two"
    assert to_mrkdwn(text) == (
        "*Plan*\n\n*Bold* and _it_ ~no~ `x&lt;y` <https://e.x/a?b=1&c=2|docs> a &amp; b\n\n• one\n• two"
    )
    assert to_mrkdwn("```py\nif a < b:\n    pass\n```") == "```\nif a &lt; b:\n    pass\n```"


def test_markdown_v2_escapes_every_special_character_outside_entities() -> None:
    assert to_markdown_v2("Price: 3.50 (approx) - 1+1=2! #tag {x} |y| ~z~ > q") == (
        "Price: 3\\.50 \\(approx\\) \\- 1\\+1\\=2\\! \\#tag \\{x\\} \\|y\\| \\~z\\~ \\> q"
    )
    assert to_markdown_v2("**a_b** `c\\d`") == "*a\\_b* `c\\\\d`"
    assert to_markdown_v2("[site](https://e.x/a_(b))") == "[site](https://e.x/a_(b\\))"


V2_SPECIAL = set("_*[]()~`>#+-=|{}.!")


def unescaped_specials(v2: str) -> list[str]:
    """Special characters standing alone (not escaped) outside code: only entity markers may."""
    out, i = [], 0
    while i < len(v2):
        ch = v2[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "`":  # skip code spans and blocks
            end = v2.find("```" if v2.startswith("```", i) else "`", i + (3 if v2.startswith("```", i) else 1))
            i = (end + (3 if v2.startswith("```", i) else 1)) if end != -1 else len(v2)
            continue
        if ch in V2_SPECIAL:
            out.append(ch)
        i += 1
    return out


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .,!-+=()[]{}#|~>_*`\\\n")), max_size=80))
def test_markdown_v2_leaves_only_entity_markers_unescaped(text: str) -> None:
    v2 = to_markdown_v2(text)
    assert set(unescaped_specials(v2)) <= set("*_~[]()>")


def test_split_keeps_order_limits_and_code_fences() -> None:
    paragraphs = [f"Paragraph {n}: " + "word " * 30 for n in range(12)]
    code = "```python\n" + "\n".join(f"print({n})" for n in range(80)) + "\n```"
    source = "\n\n".join([*paragraphs[:6], code, *paragraphs[6:]])
    parts = split_markdown(source, 400)
    assert all(len(part) <= 400 for part in parts)
    assert len(parts) > 5
    for part in parts:
        assert part.count("```") % 2 == 0, part  # every part renders on its own
    joined = "\n".join(parts)
    assert [int(n) for n in re.findall(r"Paragraph (\d+)", joined)] == list(range(12))
    assert [int(n) for n in re.findall(r"print\((\d+)\)", joined)] == list(range(80))


def test_split_counts_utf16_units_for_telegram() -> None:
    text = "😀" * 3000  # 6,000 UTF-16 units
    parts = split_markdown(text, 4096, utf16_len)
    assert [utf16_len(p) for p in parts] == [4096, 1904]
    assert "".join(parts) == text


def test_split_breaks_long_lines_at_words() -> None:
    parts = split_markdown("alpha " * 100, 50)
    assert all(len(p) <= 50 for p in parts)
    assert " ".join(parts).split() == ["alpha"] * 100


def test_connection_validation_and_redaction() -> None:
    with pytest.raises(ConnectionInvalid, match="needs signing_secret"):
        validate("slack", "team", {"bot_token": "xoxb-1"})
    with pytest.raises(ConnectionInvalid, match="invalid name"):
        validate("slack", "Bad Name", {"bot_token": "x", "signing_secret": "y"})
    with pytest.raises(ConnectionInvalid, match="malformed"):
        validate("telegram", "bot", {"bot_token": "not-a-token"})
    generated = validate("telegram", "bot", {"bot_token": "123456:ABCdefGHIjklMNO"})
    assert len(generated["webhook_secret"]) >= 32
    assert redact("GET /bot123456:ABCdefGHIjklMNO/sendMessage failed", ["123456:ABCdefGHIjklMNO"]) == (
        "GET /bot[redacted]/sendMessage failed"
    )
