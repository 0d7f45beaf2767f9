"""Slack and Telegram end to end: the real gateway, real Celery workers, the real slack_sdk and httpx
clients talking to local fake platform APIs (ops/fake_channels.py) through the base-URL settings.

"Exactly one" is checked after the broker has gone idle (no queued or unacknowledged task left), so a
second reply would have been posted by then.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from ops.fake_channels import Call, FakeChannels, Scripted
from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import ensure_tenant
from shared.channels import slack
from shared.channels.connections import Connection, ConnectionInvalid, get_connection, upsert_connection
from shared.channels.deliveries import FAILED_TURN_TEXT
from shared.channels.receive import receive_slack_event
from shared.channels.setup import sync_env_connections
from shared.infra import db
from shared.infra.config import Settings, get_settings
from shared.infra.redis_client import get_redis
from tests.conftest import CeleryStack, Gateway
from tests.support.queues import wait_for_idle_broker

pytestmark = pytest.mark.integration

SIGNING_SECRET = "slack-signing-secret-0123456789"
SLACK_TOKEN = "xoxb-1111-2222-slacktokenvalue"
TG_TOKEN = "7000001:AAHfakeTelegramTokenValue_123"
TG_SECRET = "tg-webhook-secret_0123456789"


@pytest.fixture(scope="session")
def fake_channels_server() -> Iterator[FakeChannels]:
    with FakeChannels() as fake:
        yield fake


@pytest.fixture
def fake(fake_channels_server: FakeChannels) -> FakeChannels:
    fake_channels_server.reset()
    return fake_channels_server


def channel_env(fake: FakeChannels) -> dict[str, str]:
    return {
        "ENGRAM_SLACK_API_URL": fake.slack_api_url,
        "ENGRAM_TELEGRAM_API_URL": fake.telegram_api_url,
        "ENGRAM_CHANNEL_SEND_ATTEMPTS": "3",
        "ENGRAM_CHANNEL_RETRY_MAX_WAIT_SECONDS": "2",
        "ENGRAM_CHANNEL_STALLED_DELIVERY_SECONDS": "2",
    }


@pytest.fixture
def stack(celery_stack: CeleryStack, fake: FakeChannels, api: httpx.Client, fake_llm: FakeLLM) -> CeleryStack:
    """Workers that reach the fake platforms; `api` (tenant-a's admin key) has emptied the tables."""
    celery_stack.ensure("anthropic", **channel_env(fake))
    return celery_stack


def add_connection(kind: str, slug: str = "team", tenant: str = "tenant-a") -> Connection:
    secrets = (
        {"signing_secret": SIGNING_SECRET, "bot_token": SLACK_TOKEN}
        if kind == "slack"
        else {"bot_token": TG_TOKEN, "webhook_secret": TG_SECRET}
    )
    with db.connection() as conn:
        connection, _ = upsert_connection(
            conn,
            ensure_tenant(conn, tenant),
            kind,
            slug,
            secrets,
            "engram_test_bot" if kind == "telegram" else None,
        )
    return connection


def slack_dm(text: str, event_id: str = "Ev0001", user: str = "U100", channel: str = "D100", **event: Any) -> dict:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": event_id,
        "event_time": 1700000000,
        "authorizations": [{"user_id": "UBOT", "is_bot": True}],
        "event": {
            "type": "message",
            "channel_type": "im",
            "user": user,
            "channel": channel,
            "text": text,
            "ts": "1700000000.000100",
            **event,
        },
    }


def post_slack(
    url: str,
    payload: dict[str, Any],
    *,
    slug: str = "team",
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    retry: int | None = None,
) -> httpx.Response:
    body = json.dumps(payload).encode()
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": slack.sign(secret, stamp, body),
    }
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return httpx.post(f"{url}/v1/channels/slack/{slug}/events", content=body, headers=headers, timeout=30)


def tg_update(update_id: int, text: str, *, user: int = 4200, chat: int | None = None, **message: Any) -> dict:
    chat_id = chat if chat is not None else user
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id * 10,
            "date": 1700000000,
            "from": {"id": user, "is_bot": False, "first_name": "Ada", "last_name": "Lovelace"},
            "chat": {"id": chat_id, "type": "private" if chat_id == user else "supergroup"},
            "text": text,
            **message,
        },
    }


def post_telegram(
    url: str, update: dict[str, Any], *, slug: str = "team", secret: str | None = TG_SECRET
) -> httpx.Response:
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    return httpx.post(f"{url}/v1/channels/telegram/{slug}/webhook", json=update, headers=headers, timeout=30)


def settle() -> None:
    """Every task that could still post has run (nothing queued, nothing unacknowledged)."""
    wait_for_idle_broker(get_redis(), timeout=90)


def table_counts() -> dict[str, int]:
    with db.connection() as conn:
        tables = [r["tablename"] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in tables}  # type: ignore[index]


def deliveries() -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute("SELECT * FROM channel_deliveries ORDER BY id").fetchall()


def wait_delivery(leaving: str = "sending", timeout: float = 30) -> dict[str, Any]:
    """The (only) delivery once it is no longer in state `leaving` (its task let go of it, or took it)."""
    deadline = time.monotonic() + timeout
    while True:
        with db.connection() as conn:
            row = conn.execute(
                "SELECT status, last_error, next_attempt_at > now() AS later FROM channel_deliveries"
            ).fetchone()
        assert row is not None
        if row["status"] != leaving or time.monotonic() > deadline:
            return row
        time.sleep(0.05)


def texts(calls: list[Call]) -> list[str]:
    return [str(call.body.get("text")) for call in calls]


# ----------------------------------------------------------------------------------------------- Slack


def test_slack_url_verification_is_answered_with_the_challenge(gateway: Gateway, stack: CeleryStack) -> None:
    add_connection("slack")
    response = post_slack(gateway.url, {"type": "url_verification", "token": "x", "challenge": "c-3f9a"})
    assert response.status_code == 200
    assert response.json() == {"challenge": "c-3f9a"}
    unsigned = httpx.post(
        f"{gateway.url}/v1/channels/slack/team/events", json={"type": "url_verification", "challenge": "c"}
    )
    assert unsigned.status_code == 401


def test_slack_mention_gets_exactly_one_reply_in_its_thread(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    add_connection("slack")
    fake_llm.script(FakeReply(text="**Sure**: the plan is ready."), match="what is the plan")
    payload = slack_dm("<@UBOT> what is the plan?", event_id="EvM1", channel="C777", channel_type=None)
    payload["event"]["type"] = "app_mention"
    payload["event"]["ts"] = "1700000001.000200"
    response = post_slack(gateway.url, payload)
    assert response.status_code == 200, response.text

    (call,) = fake.slack.wait_for("chat.postMessage")
    assert call.token == SLACK_TOKEN
    assert call.body["channel"] == "C777" and call.body["thread_ts"] == "1700000001.000200"
    assert call.body["text"] == "*Sure*: the plan is ready."  # Markdown became mrkdwn
    (request,) = fake_llm.requests_matching("what is the plan")
    assert "<@UBOT>" not in json.dumps(request.body["messages"])
    settle()
    assert len(fake.slack.calls("chat.postMessage")) == 1
    (delivery,) = deliveries()
    assert delivery["status"] == "sent" and delivery["attempts"] == 1


def test_slack_retries_and_duplicates_make_one_turn_and_one_reply(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    add_connection("slack")
    payload = slack_dm("remember the milk", event_id="EvDup1")
    first = post_slack(gateway.url, payload)
    retried = post_slack(gateway.url, payload, retry=1)
    again = post_slack(gateway.url, payload, retry=2)
    assert [r.status_code for r in (first, retried, again)] == [200, 200, 200]
    fake.slack.wait_for("chat.postMessage")
    post_slack(gateway.url, payload, retry=3)  # a late retry, after the reply went out
    settle()
    (call,) = fake.slack.calls("chat.postMessage")
    assert call.body["channel"] == "D100" and "thread_ts" not in call.body  # a DM's main line
    assert call.body["text"].startswith("echo: remember the milk")
    counts = table_counts()
    assert counts["turns"] == 1 and counts["inbound_events"] == 1 and counts["channel_deliveries"] == 1
    assert len(fake_llm.requests_matching("remember the milk")) == 1


def test_slack_thread_is_one_session_and_the_person_one_user(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels
) -> None:
    add_connection("slack")
    post_slack(gateway.url, slack_dm("first in thread", event_id="EvT1", thread_ts="1700000000.000001"))
    fake.slack.wait_for("chat.postMessage", 1)
    post_slack(gateway.url, slack_dm("second in thread", event_id="EvT2", thread_ts="1700000000.000001"))
    post_slack(gateway.url, slack_dm("main line", event_id="EvT3"))
    fake.slack.wait_for("chat.postMessage", 3)
    settle()
    with db.connection() as conn:
        sessions = conn.execute("SELECT session_key, channel FROM sessions ORDER BY session_key").fetchall()
        users = conn.execute("SELECT external_id, display_name FROM users").fetchall()
        said = conn.execute("SELECT content, name FROM session_messages WHERE role = 'user' ORDER BY id").fetchall()
    assert [s["session_key"] for s in sessions] == ["slack:team:D100:1700000000.000001", "slack:team:D100:main"]
    # Once the person's name is known, what they say is stored under it (the transcript's speaker).
    assert [(m["content"], m["name"]) for m in said[1:]] == [
        ("second in thread", "Person U100"),
        ("main line", "Person U100"),
    ]
    assert {s["channel"] for s in sessions} == {"slack"}
    assert users == [{"external_id": "slack:team:U100", "display_name": "Person U100"}]
    assert len(fake.slack.calls("users.info")) == 1  # the display name is fetched once, then kept
    threaded = [c for c in fake.slack.calls("chat.postMessage") if c.body.get("thread_ts")]
    assert len(threaded) == 2


def test_bad_signatures_are_401_and_store_nothing(gateway: Gateway, stack: CeleryStack, fake: FakeChannels) -> None:
    add_connection("slack")
    add_connection("telegram")
    before = table_counts()
    payload = slack_dm("let me in", event_id="EvBad")
    assert post_slack(gateway.url, payload, secret="not-the-secret").status_code == 401
    stale = post_slack(gateway.url, payload, timestamp=int(time.time()) - 6 * 60)
    assert stale.status_code == 401 and stale.json()["code"] == "unauthorized"
    unsigned = httpx.post(f"{gateway.url}/v1/channels/slack/team/events", json=payload)
    assert unsigned.status_code == 401
    assert post_telegram(gateway.url, tg_update(1, "hi"), secret="wrong-secret").status_code == 401
    assert post_telegram(gateway.url, tg_update(1, "hi"), secret=None).status_code == 401
    assert post_slack(gateway.url, payload, slug="nobody").status_code == 404
    settle()
    assert table_counts() == before
    assert fake.slack.calls() == [] and fake.telegram.calls() == []


def test_bot_messages_edits_and_joins_are_ignored(gateway: Gateway, stack: CeleryStack, fake: FakeChannels) -> None:
    add_connection("slack")
    before = table_counts()
    ignored = [
        slack_dm("my own reply", event_id="EvI1", user="UBOT"),
        slack_dm("from an integration", event_id="EvI2", bot_id="B42"),
        slack_dm("edited", event_id="EvI3", subtype="message_changed"),
        slack_dm("joined", event_id="EvI4", subtype="channel_join"),
        slack_dm("chatter in a channel", event_id="EvI5", channel_type="channel"),
    ]
    for payload in ignored:
        assert post_slack(gateway.url, payload).status_code == 200
    settle()
    assert table_counts() == before
    assert fake.slack.calls("chat.postMessage") == []


def test_slack_429_is_retried_after_retry_after(gateway: Gateway, stack: CeleryStack, fake: FakeChannels) -> None:
    add_connection("slack")
    fake.slack.script("chat.postMessage", Scripted(status=429, headers={"Retry-After": "1"}))
    post_slack(gateway.url, slack_dm("slow down", event_id="Ev429"))
    limited, posted = fake.slack.wait_for("chat.postMessage", 2)
    settle()
    assert len(fake.slack.calls("chat.postMessage")) == 2
    assert posted.at - limited.at >= 1.0  # the second try waited as Slack asked
    assert posted.body == limited.body
    (delivery,) = deliveries()
    assert delivery["status"] == "sent" and delivery["attempts"] == 2


def test_permanent_failure_is_recorded_and_listed(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, api: httpx.Client
) -> None:
    add_connection("slack")
    # Three server errors (the attempts the workers allow), then a refusal for another message.
    fake.slack.script("chat.postMessage", *(Scripted(status=503) for _ in range(3)))
    post_slack(gateway.url, slack_dm("will not arrive", event_id="EvF1"))
    fake.slack.wait_for("chat.postMessage", 3)
    settle()
    fake.slack.script("chat.postMessage", Scripted(body={"ok": False, "error": "channel_not_found"}))
    post_slack(gateway.url, slack_dm("nor this", event_id="EvF2", channel="D404"))
    fake.slack.wait_for("chat.postMessage", 4)
    settle()
    assert len(fake.slack.calls("chat.postMessage")) == 4  # the refusal was not retried

    listed = api.get("/v1/admin/deliveries", params={"status": "failed"})
    assert listed.status_code == 200, listed.text
    failed = listed.json()
    assert [(d["attempts"], d["target"]["channel"]) for d in failed] == [(1, "D404"), (3, "D100")]
    assert "channel_not_found" in failed[0]["last_error"]
    assert "503" in failed[1]["last_error"]
    everything = json.dumps(api.get("/v1/admin/deliveries").json()) + json.dumps(failed)
    assert SLACK_TOKEN not in everything and SIGNING_SECRET not in everything
    assert stack.worker is not None and SLACK_TOKEN not in stack.worker.tail(10**7)


def test_failed_turn_tells_the_person(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    add_connection("slack")
    fake_llm.script(*(FakeReply(status=500) for _ in range(2)), match="break please")
    post_slack(gateway.url, slack_dm("break please", event_id="EvBroken"))
    (call,) = fake.slack.wait_for("chat.postMessage")
    assert call.body["text"] == FAILED_TURN_TEXT
    with db.connection() as conn:
        assert conn.execute("SELECT status FROM turns").fetchone() == {"status": "failed"}


def test_gateway_dying_between_store_and_enqueue_still_answers_once(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels
) -> None:
    connection = add_connection("slack")
    payload = slack_dm("are you still there?", event_id="EvLost")
    # What the webhook does before it enqueues, and nothing after: as if the gateway died right there.
    accepted = receive_slack_event(connection, payload, get_settings())
    assert accepted is not None and accepted.turn_id is not None
    stack.start_beat()  # the stalled-turn sweep finds the turn in Postgres
    (call,) = fake.slack.wait_for("chat.postMessage", timeout=90)
    assert call.body["text"].startswith("echo: are you still there?")
    assert post_slack(gateway.url, payload, retry=1).status_code == 200  # Slack retries the lost request
    settle()
    assert len(fake.slack.calls("chat.postMessage")) == 1


# -------------------------------------------------------------------------------------------- Telegram


def test_telegram_update_twice_gets_one_reply_and_wrong_secret_401(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    add_connection("telegram")
    fake_llm.script(FakeReply(text="Hi Ada (again) - *welcome* back!"), match="Hi there")
    update = tg_update(501, "Hi there, it's me")
    assert post_telegram(gateway.url, update).status_code == 200
    assert post_telegram(gateway.url, update).status_code == 200
    (call,) = fake.telegram.wait_for("sendMessage")
    settle()
    assert len(fake.telegram.calls("sendMessage")) == 1
    assert call.token == TG_TOKEN
    assert call.body["chat_id"] == 4200 and call.body["parse_mode"] == "MarkdownV2"
    assert call.body["text"] == "Hi Ada \\(again\\) \\- _welcome_ back\\!"
    assert "reply_parameters" not in call.body  # a private chat is not a thread of replies
    assert post_telegram(gateway.url, tg_update(502, "x"), secret=TG_SECRET + "x").status_code == 401
    # httpx logs each request's URL, which holds the bot token: the worker's log must not show it.
    assert stack.worker is not None and "/bot[redacted]/sendMessage" in stack.worker.tail(10**7)
    assert TG_TOKEN not in stack.worker.tail(10**7)


def test_telegram_groups_answer_only_mentions_and_replies(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels
) -> None:
    add_connection("telegram")
    before = table_counts()
    assert post_telegram(gateway.url, tg_update(601, "just chatting", chat=-1001)).status_code == 200
    settle()
    assert table_counts() == before and fake.telegram.calls("sendMessage") == []

    mention = tg_update(602, "@engram_test_bot what time is it", chat=-1001)
    mention["message"]["entities"] = [{"type": "mention", "offset": 0, "length": 16}]
    post_telegram(gateway.url, mention)
    (call,) = fake.telegram.wait_for("sendMessage")
    assert call.body["chat_id"] == -1001
    assert call.body["reply_parameters"]["message_id"] == 6020
    assert call.body["text"].startswith("echo: what time is it")
    reply = tg_update(603, "and tomorrow?", chat=-1001, reply_to_message={"message_id": 1, "from": {"id": 7000001}})
    post_telegram(gateway.url, reply)
    fake.telegram.wait_for("sendMessage", 2)
    settle()
    assert len(fake.telegram.calls("sendMessage")) == 2


def test_long_reply_is_split_in_order(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    add_connection("telegram")
    paragraphs = [f"Part {n:02d}. " + "The quick brown fox jumps over the lazy dog. " * 20 for n in range(12)]
    fake_llm.script(FakeReply(text="\n\n".join(paragraphs)), match="tell me a long story")
    post_telegram(gateway.url, tg_update(701, "tell me a long story"))
    fake.telegram.wait_for("sendMessage", 3)
    settle()
    calls = fake.telegram.calls("sendMessage")
    assert len(calls) == 3  # 11,000 characters in parts of at most 4,096
    assert all(len(text) <= 4096 for text in texts(calls))
    numbers = [int(n) for text in texts(calls) for n in __import__("re").findall(r"Part (\d+)\\\.", text)]
    assert numbers == list(range(12))
    (delivery,) = deliveries()
    assert delivery["status"] == "sent" and delivery["parts_sent"] == 3


def test_telegram_commands_start_memory_and_forget_with_confirmation(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, api: httpx.Client
) -> None:
    add_connection("telegram")
    post_telegram(gateway.url, tg_update(801, "/start"))
    (greeting,) = fake.telegram.wait_for("sendMessage")
    assert "Hi, Ada" in greeting.body["text"] and "/forget" in greeting.body["text"]
    # A memory of this person (what extraction or a tool would write), then the commands.
    created = api.post("/v1/users/telegram:team:4200/memories", json={"key": "pet", "value": "a cat called Babbage"})
    assert created.status_code == 201, created.text
    post_telegram(gateway.url, tg_update(802, "/memory"))
    listing = fake.telegram.wait_for("sendMessage", 2)[-1]
    assert "Babbage" in listing.body["text"]

    post_telegram(gateway.url, tg_update(803, "/forget"))
    prompt = fake.telegram.wait_for("sendMessage", 3)[-1]
    code = __import__("re").search(r"/forget (\d{6})", prompt.body["text"].replace("\\", ""))
    assert code is not None, prompt.body["text"]
    settle()
    assert api.get("/v1/users/telegram:team:4200/memories").json()  # asking erased nothing

    post_telegram(gateway.url, tg_update(804, "/forget 000000" if code.group(1) != "000000" else "/forget 111111"))
    wrong = fake.telegram.wait_for("sendMessage", 4)[-1]
    assert "doesn" in wrong.body["text"]
    assert api.get("/v1/users/telegram:team:4200/memories").status_code == 200

    post_telegram(gateway.url, tg_update(805, f"/forget {code.group(1)}"))
    done = fake.telegram.wait_for("sendMessage", 5)[-1]
    assert "erased everything" in done.body["text"]
    assert api.get("/v1/users/telegram:team:4200/memories").status_code == 404
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM channel_identities").fetchone() == {"n": 0}
        left = conn.execute("SELECT payload::text AS p FROM inbound_events").fetchall()
    assert all("Ada" not in row["p"] for row in left)  # nothing of hers outlives the erasure
    post_telegram(gateway.url, tg_update(805, f"/forget {code.group(1)}"))  # Telegram retries the update
    settle()
    assert len(fake.telegram.calls("sendMessage")) == 5


def test_linked_identities_share_memory(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM, api: httpx.Client
) -> None:
    add_connection("slack")
    add_connection("telegram")
    for identity in ({"kind": "slack", "platform_user_id": "U100"}, {"kind": "telegram", "platform_user_id": "4200"}):
        linked = api.post("/v1/admin/identities", json={"user_id": "ada", "connection": "team", **identity})
        assert linked.status_code == 200, linked.text
    fake_llm.script(
        FakeReply(tool_calls=[("memory_store", {"key": "favourite-tea", "value": "smoky lapsang souchong"})]),
        FakeReply(text="Noted."),
        match="my favourite tea",
    )
    post_slack(gateway.url, slack_dm("my favourite tea is lapsang", event_id="EvL1"))
    fake.slack.wait_for("chat.postMessage")
    post_telegram(gateway.url, tg_update(901, "/memory"))
    (listing,) = fake.telegram.wait_for("sendMessage")
    assert "smoky lapsang souchong" in listing.body["text"].replace("\\", "")
    post_telegram(gateway.url, tg_update(902, "what tea do I like?"))
    fake.telegram.wait_for("sendMessage", 2)
    (request,) = fake_llm.requests_matching("what tea do I like?")
    assert "smoky lapsang souchong" in json.dumps(request.body)  # the model knows it, on Telegram
    with db.connection() as conn:
        sessions = conn.execute(
            "SELECT s.channel, u.external_id FROM sessions s JOIN users u ON u.id = s.user_id ORDER BY s.channel"
        ).fetchall()
    assert sessions == [{"channel": "slack", "external_id": "ada"}, {"channel": "telegram", "external_id": "ada"}]


def test_polling_takes_the_webhook_path(stack: CeleryStack, fake: FakeChannels) -> None:
    from shared.adapters.telegram_bot_api import TelegramClient
    from shared.channels.polling import PollState, poll_once
    from workers.dispatch import dispatch_accepted

    connection = add_connection("telegram")
    fake.push_update(tg_update(1001, "polled hello"))
    fake.push_update(tg_update(1001, "polled hello"))  # delivered twice
    fake.push_update(tg_update(1002, "group noise", chat=-5))
    state = PollState()
    with TelegramClient(TG_TOKEN, fake.telegram_api_url, 10) as client:
        poll_once(connection, client, state, get_settings(), dispatch_accepted, timeout=1)
        poll_once(connection, client, state, get_settings(), dispatch_accepted, timeout=0)
    assert (state.received, state.accepted, state.duplicates, state.offset) == (3, 1, 1, 1003)
    (call,) = fake.telegram.wait_for("sendMessage")
    assert call.body["text"].startswith("echo: polled hello")
    settle()
    assert len(fake.telegram.calls("sendMessage")) == 1


def test_admin_connections_never_show_secrets(api: httpx.Client, fake: FakeChannels) -> None:
    created = api.post(
        "/v1/admin/channels",
        json={"kind": "telegram", "slug": "support", "bot_token": TG_TOKEN, "bot_username": "support_bot"},
    )
    assert created.status_code == 201, created.text
    assert created.json()["secrets_set"] == ["bot_token", "webhook_secret"]
    assert created.json()["webhook_path"] == "/v1/channels/telegram/support/webhook"
    refused = api.post("/v1/admin/channels", json={"kind": "slack", "slug": "x", "bot_token": "xoxb-only"})
    assert refused.status_code == 422 and "signing_secret" in refused.json()["detail"]
    listed = api.get("/v1/admin/channels")
    assert listed.status_code == 200 and [c["slug"] for c in listed.json()] == ["support"]
    assert TG_TOKEN not in listed.text and TG_TOKEN not in created.text
    assert api.delete("/v1/admin/channels/telegram/support").status_code == 204
    assert api.delete("/v1/admin/channels/telegram/support").status_code == 404


def test_environment_shortcut_done_when(
    stack: CeleryStack, fake: FakeChannels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's acceptance check, with ENGRAM_SLACK_* / ENGRAM_TELEGRAM_* pointing at the fakes."""
    env = {
        "ENGRAM_SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "ENGRAM_SLACK_BOT_TOKEN": SLACK_TOKEN,
        "ENGRAM_TELEGRAM_BOT_TOKEN": TG_TOKEN,
        "ENGRAM_TELEGRAM_WEBHOOK_SECRET": TG_SECRET,
        **channel_env(fake),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    gateway = Gateway().start()  # its start creates the `default` connections
    try:
        fake.telegram.wait_for("getMe")
        dm = slack_dm("done when?", event_id="EvDone")
        assert post_slack(gateway.url, dm, slug="default").status_code == 200
        assert post_slack(gateway.url, dm, slug="default", retry=1).status_code == 200
        assert post_slack(gateway.url, dm, slug="default", secret="wrong").status_code == 401
        update = tg_update(42, "done when?")
        assert post_telegram(gateway.url, update, slug="default").status_code == 200
        assert post_telegram(gateway.url, update, slug="default").status_code == 200
        assert post_telegram(gateway.url, update, slug="default", secret="wrong").status_code == 401
        (slack_call,) = fake.slack.wait_for("chat.postMessage")
        (tg_call,) = fake.telegram.wait_for("sendMessage")
        settle()
        assert len(fake.slack.calls("chat.postMessage")) == 1 and len(fake.telegram.calls("sendMessage")) == 1
        assert slack_call.token == SLACK_TOKEN and slack_call.body["channel"] == "D100"
        assert tg_call.token == TG_TOKEN and tg_call.body["chat_id"] == 4200
        with db.connection() as conn:
            rows = conn.execute(
                "SELECT c.kind, t.name, c.bot_username FROM channel_connections c JOIN tenants t ON t.id = c.tenant_id"
                " WHERE c.slug = 'default' ORDER BY c.kind"
            ).fetchall()
        assert rows == [
            {"kind": "slack", "name": "default", "bot_username": None},
            {"kind": "telegram", "name": "default", "bot_username": "engram_test_bot"},
        ]
    finally:
        gateway.stop()
        for name in env:
            os.environ.pop(name, None)
        get_settings.cache_clear()


def env_settings(fake: FakeChannels, **secrets: str) -> Settings:
    return get_settings().model_copy(
        update={
            "slack_api_url": fake.slack_api_url,
            "telegram_api_url": fake.telegram_api_url,
            **{name: SecretStr(value) for name, value in secrets.items()},
        }
    )


def default_connections() -> dict[str, dict[str, Any]]:
    """The `default` connections' secrets, decrypted (the stored ones are Fernet tokens)."""
    with db.connection() as conn:
        found = {kind: get_connection(conn, kind, "default") for kind in ("slack", "telegram")}
    return {kind: {n: v.get_secret_value() for n, v in c.secrets.items()} for kind, c in found.items() if c}


def test_environment_shortcut_is_all_or_nothing(api: httpx.Client, fake: FakeChannels) -> None:
    """A malformed Telegram token refuses the whole shortcut: the valid Slack half is not stored either."""
    settings = env_settings(
        fake, slack_signing_secret=SIGNING_SECRET, slack_bot_token=SLACK_TOKEN, telegram_bot_token="not-a-token"
    )
    with pytest.raises(ConnectionInvalid, match="Telegram bot token is malformed"):
        sync_env_connections(settings)
    assert default_connections() == {}
    assert fake.telegram.calls("getMe") == []  # refused before any network call


def test_environment_shortcut_keeps_the_telegram_webhook_secret_across_restarts(
    api: httpx.Client, fake: FakeChannels
) -> None:
    """Without ENGRAM_TELEGRAM_WEBHOOK_SECRET the first start generates one; later starts keep it, so the
    webhook registered with it keeps working."""
    settings = env_settings(fake, telegram_bot_token=TG_TOKEN)
    (first,) = sync_env_connections(settings)
    generated = default_connections()["telegram"]["webhook_secret"]
    (again,) = sync_env_connections(settings)
    assert again.id == first.id
    assert default_connections()["telegram"]["webhook_secret"] == generated
    assert again.secret("webhook_secret") == generated
    explicit = env_settings(fake, telegram_bot_token=TG_TOKEN, telegram_webhook_secret=TG_SECRET)
    sync_env_connections(explicit)
    assert default_connections()["telegram"]["webhook_secret"] == TG_SECRET  # the environment wins when set


def test_telegram_429_waits_retry_after_and_unparsable_markdown_goes_plain(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    add_connection("telegram")
    fake.telegram.script(
        "sendMessage",
        Scripted(status=429, headers={"Retry-After": "1"}),
        Scripted(status=400, body={"ok": False, "error_code": 400, "description": "Bad Request: can't parse entities"}),
    )
    fake_llm.script(FakeReply(text="Costs 5.00 *today*"), match="price please")
    post_telegram(gateway.url, tg_update(1101, "price please"))
    limited, rejected, plain = fake.telegram.wait_for("sendMessage", 3)
    settle()
    assert len(fake.telegram.calls("sendMessage")) == 3
    assert rejected.at - limited.at >= 1.0  # retry_after honoured
    assert rejected.body["parse_mode"] == "MarkdownV2" and rejected.body["text"] == "Costs 5\\.00 _today_"
    assert "parse_mode" not in plain.body and plain.body["text"] == "Costs 5.00 *today*"
    (delivery,) = deliveries()
    assert delivery["status"] == "sent"


def test_too_long_message_is_answered_without_a_turn(gateway: Gateway, stack: CeleryStack, fake: FakeChannels) -> None:
    add_connection("slack")
    limit = get_settings().max_turn_chars
    post_slack(gateway.url, slack_dm("x" * (limit + 1), event_id="EvLong"))
    (call,) = fake.slack.wait_for("chat.postMessage")
    assert f"at most {limit:,}" in call.body["text"]
    settle()
    assert table_counts()["turns"] == 0


def test_lost_command_answer_is_sent_by_the_sweep(stack: CeleryStack, fake: FakeChannels) -> None:
    from shared.channels.receive import receive_telegram_update

    connection = add_connection("telegram")
    accepted = receive_telegram_update(connection, tg_update(1201, "/start"), get_settings())
    assert accepted is not None and accepted.delivery_id is not None  # stored, never enqueued
    stack.start_beat()
    (call,) = fake.telegram.wait_for("sendMessage", timeout=90)
    assert "/memory" in call.body["text"]
    settle()
    assert len(fake.telegram.calls("sendMessage")) == 1


def test_cli_adds_connections_sets_the_webhook_polls_and_links(
    stack: CeleryStack, fake: FakeChannels, api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from ops.cli import app

    monkeypatch.setenv("ENGRAM_TELEGRAM_API_URL", fake.telegram_api_url)
    get_settings.cache_clear()
    runner = CliRunner()
    try:
        added = runner.invoke(
            app, ["channels", "add", "telegram", "--tenant", "tenant-a", "--name", "tg", "--bot-token", TG_TOKEN]
        )
        assert added.exit_code == 0, added.output
        assert "@engram_test_bot" in added.output and TG_TOKEN not in added.output  # learnt with getMe
        slack_added = runner.invoke(
            app,
            ["channels", "add", "slack", "--tenant", "tenant-a", "--name", "sl", "--json",
             "--signing-secret", SIGNING_SECRET, "--bot-token", SLACK_TOKEN],
        )  # fmt: skip
        assert slack_added.exit_code == 0, slack_added.output
        assert json.loads(slack_added.output)["webhook_path"] == "/v1/channels/slack/sl/events"
        refused = runner.invoke(
            app, ["channels", "add", "slack", "--tenant", "tenant-a", "--name", "x", "--bot-token", "b"]
        )
        assert refused.exit_code == 2 and "signing secret is required" in refused.output
        listed = runner.invoke(app, ["channels", "list", "--tenant", "tenant-a"])
        assert listed.exit_code == 0 and "tg" in listed.output and SLACK_TOKEN not in listed.output

        hooked = runner.invoke(app, ["channels", "telegram", "set-webhook", "https://bot.example", "--name", "tg",
                                     "--tenant", "tenant-a"])  # fmt: skip
        assert hooked.exit_code == 0, hooked.output
        (call,) = fake.telegram.calls("setWebhook")
        assert call.body["url"] == "https://bot.example/v1/channels/telegram/tg/webhook"
        with db.connection() as conn:
            stored = get_connection(conn, "telegram", "tg")
        assert stored is not None and call.body["secret_token"] == stored.secret("webhook_secret")

        fake.push_update(tg_update(1301, "hello from polling"))
        polled = runner.invoke(app, ["channels", "telegram", "poll", "--name", "tg", "--tenant", "tenant-a",
                                     "--once", "--timeout", "1"])  # fmt: skip
        assert polled.exit_code == 0, polled.output
        assert "1 received, 1 new" in polled.output
        assert fake.telegram.calls("deleteWebhook")  # polling and a webhook exclude each other
        (reply,) = fake.telegram.wait_for("sendMessage")
        assert reply.body["text"].startswith("echo: hello from polling")

        linked = runner.invoke(
            app, ["users", "link", "ada", "telegram:tg:4200", "slack:sl:U100", "--tenant", "tenant-a", "--json"]
        )
        assert linked.exit_code == 0, linked.output
        rows = json.loads(linked.output)["linked"]
        assert [(r["kind"], r["user_id"], r["previous_user_id"]) for r in rows] == [
            ("telegram", "ada", "telegram:tg:4200"),
            ("slack", "ada", None),
        ]
        unknown = runner.invoke(app, ["users", "link", "ada", "slack:nope:U1", "--tenant", "tenant-a"])
        assert unknown.exit_code == 1 and "no slack connection 'nope'" in unknown.output
        identities = api.get("/v1/admin/identities", params={"user_id": "ada"}).json()
        assert sorted((i["kind"], i["platform_user_id"]) for i in identities) == [
            ("slack", "U100"),
            ("telegram", "4200"),
        ]
    finally:
        monkeypatch.delenv("ENGRAM_TELEGRAM_API_URL")
        get_settings.cache_clear()


def test_long_retry_after_gives_the_worker_back_and_the_sweep_sends_later(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels
) -> None:
    add_connection("slack")
    stack.start_beat()
    # Longer than ENGRAM_CHANNEL_RETRY_MAX_WAIT_SECONDS (2 s here): not slept through in the task.
    fake.slack.script("chat.postMessage", Scripted(status=429, headers={"Retry-After": "3"}))
    post_slack(gateway.url, slack_dm("patience", event_id="EvWait"))
    fake.slack.wait_for("chat.postMessage", 1)
    waiting = wait_delivery("sending")
    assert waiting["status"] == "pending" and waiting["later"] and "429" in waiting["last_error"]
    limited, posted = fake.slack.wait_for("chat.postMessage", 2, timeout=90)
    assert posted.at - limited.at >= 3.0
    settle()
    assert len(fake.slack.calls("chat.postMessage")) == 2
    (delivery,) = deliveries()
    assert delivery["status"] == "sent" and delivery["attempts"] == 2


def test_spent_budget_is_said_in_the_channel(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, api: httpx.Client
) -> None:
    add_connection("slack")
    assert api.patch("/v1/admin/tenant", json={"monthly_token_budget": 1}).status_code == 200
    post_slack(gateway.url, slack_dm("first", event_id="EvB1"))  # nothing used yet: it runs, and uses tokens
    fake.slack.wait_for("chat.postMessage")
    post_slack(gateway.url, slack_dm("second", event_id="EvB2"))
    refusal = fake.slack.wait_for("chat.postMessage", 2)[-1]
    assert "budget is spent" in refusal.body["text"]
    settle()
    assert table_counts()["turns"] == 1


def test_a_connection_name_belongs_to_one_tenant(api: httpx.Client) -> None:
    add_connection("slack", slug="shared-name", tenant="tenant-b")
    taken = api.post(
        "/v1/admin/channels",
        json={"kind": "slack", "slug": "shared-name", "signing_secret": "s", "bot_token": SLACK_TOKEN},
    )
    assert taken.status_code == 422 and "taken by another tenant" in taken.json()["detail"]
    assert api.get("/v1/admin/channels").json() == []
    assert api.delete("/v1/admin/channels/slack/shared-name").status_code == 404  # not this tenant's to remove


def test_platform_clients_classify_failures(fake: FakeChannels) -> None:
    """The real slack_sdk and httpx clients against the fake: what is retried, after how long, what is final."""
    from shared.adapters.slack_web_api import SlackClient
    from shared.adapters.telegram_bot_api import TelegramClient
    from shared.channels.errors import FormattingRejected, PermanentSendError, RetryableSendError

    client = SlackClient(SLACK_TOKEN, fake.slack_api_url, 5)
    fake.slack.script(
        "chat.postMessage",
        Scripted(status=429, headers={"Retry-After": "7"}),
        Scripted(status=502, raw="<html>bad gateway</html>"),
        Scripted(body={"ok": False, "error": "invalid_auth"}),
    )
    with pytest.raises(RetryableSendError) as limited:
        client.post_message("C1", "hi", None)
    assert limited.value.retry_after == 7.0
    with pytest.raises(RetryableSendError, match="502"):
        client.post_message("C1", "hi", None)
    with pytest.raises(PermanentSendError, match="invalid_auth"):
        client.post_message("C1", "hi", None)
    assert client.post_message("C1", "hi", "1.2")  # the ts of the posted message
    assert fake.slack.calls("chat.postMessage")[-1].token == SLACK_TOKEN

    fake.telegram.script(
        "sendMessage",
        Scripted(status=429, headers={"Retry-After": "4"}),
        Scripted(status=500),
        Scripted(status=400, body={"ok": False, "error_code": 400, "description": "Bad Request: can't parse entities"}),
        Scripted(status=403, body={"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked"}),
    )
    with TelegramClient(TG_TOKEN, fake.telegram_api_url, 5) as tg:
        with pytest.raises(RetryableSendError) as slow:
            tg.send_message({"chat_id": 1}, "x", markdown_v2=False)
        assert slow.value.retry_after == 4.0
        with pytest.raises(RetryableSendError, match="500"):
            tg.send_message({"chat_id": 1}, "x", markdown_v2=False)
        with pytest.raises(FormattingRejected):
            tg.send_message({"chat_id": 1}, "x", markdown_v2=True)
        with pytest.raises(PermanentSendError, match="blocked") as blocked:
            tg.send_message({"chat_id": 1}, "x", markdown_v2=False)
        assert TG_TOKEN not in str(blocked.value)
    with TelegramClient(TG_TOKEN, "http://127.0.0.1:9", 2) as unreachable:
        with pytest.raises(RetryableSendError, match="network error") as down:
            unreachable.get_me()
        assert TG_TOKEN not in str(down.value)


def test_a_delivery_that_cannot_be_sent_for_an_internal_reason_is_failed_not_retried_forever(
    stack: CeleryStack, fake: FakeChannels
) -> None:
    from psycopg.types.json import Jsonb

    from workers.dispatch import enqueue_delivery

    connection = add_connection("slack")
    with db.connection() as conn:
        row = conn.execute(
            "INSERT INTO channel_deliveries (tenant_id, connection_id, target, text) VALUES (%s, %s, %s, 'hi') "
            "RETURNING id",
            (connection.tenant_id, connection.id, Jsonb({"no-channel": True})),
        ).fetchone()
    assert row is not None
    enqueue_delivery(row["id"])
    wait_delivery("pending")  # claimed
    state = wait_delivery("sending")
    assert state["status"] == "failed" and state["last_error"].startswith("internal error: KeyError")
    assert fake.slack.calls("chat.postMessage") == []
