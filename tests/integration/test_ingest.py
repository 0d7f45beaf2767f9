"""Message ingest against the real gateway and Postgres: order kept, bounds with reasons, one bad message
refuses the batch, idempotency (per request and per message), keys and users, memory status."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from shared.infra import db
from shared.infra.config import get_settings
from tests.conftest import Gateway
from tests.integration.test_keys import client, issue

pytestmark = pytest.mark.integration

TABLES = ("users", "sessions", "turns", "session_messages")
URL = "/v1/users/alice/sessions/chat-1/messages"


def counts() -> dict[str, int]:
    with db.connection() as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"])  # type: ignore[index]
            for table in TABLES
        }


def history(api: httpx.Client, session: str = "chat-1", user: str = "alice") -> list[dict[str, Any]]:
    response = api.get(f"/v1/sessions/{session}/messages", params={"user_id": user})
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


@pytest.fixture
def settings_env() -> Iterator[Callable[..., None]]:
    with pytest.MonkeyPatch.context() as patch:

        def apply(**values: str) -> None:
            for name, value in values.items():
                patch.setenv(f"ENGRAM_{name.upper()}", value)
            get_settings.cache_clear()

        yield apply
    get_settings.cache_clear()


CONVERSATION = [
    {"role": "system", "content": "You are a travel assistant."},
    {"role": "user", "content": "I am planning a trip to Kyoto.", "name": "Alice"},
    {"role": "assistant", "content": "Lovely! When are you going?"},
    {"role": "tool", "content": '{"weather": "sunny"}', "name": "weather"},
    {"role": "user", "content": "In April.", "created_at": "2025-03-01T10:00:00Z"},
]


def test_messages_are_stored_in_order_and_answered_with_their_ids(api: httpx.Client) -> None:
    response = api.post(URL, json={"messages": CONVERSATION, "metadata": {"source": "my-agent", "n": [1, 2]}})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and len(body["message_ids"]) == len(CONVERSATION)
    stored = history(api)
    assert [(m["role"], m["content"]) for m in stored] == [(m["role"], m["content"]) for m in CONVERSATION]
    assert [m["id"] for m in stored] == body["message_ids"]
    assert stored[-1]["created_at"].startswith("2025-03-01T10:00:00")
    # A second batch goes after the first, also in the session state; no reply was generated.
    second = api.post(URL, json={"messages": [{"role": "user", "content": "Also Osaka."}]}).json()
    assert history(api)[-1]["id"] == second["message_ids"][0] and second["session_id"] == body["session_id"]
    with db.connection() as conn:
        row = conn.execute("SELECT count(*) AS n FROM turns WHERE kind = 'chat'").fetchone()
        names = conn.execute("SELECT name FROM session_messages ORDER BY id").fetchall()
    assert row is not None and row["n"] == 0
    assert [n["name"] for n in names][:4] == [None, "Alice", None, "weather"]
    state = api.get("/v1/sessions/chat-1", params={"user_id": "alice"}).json()
    assert state["token_count"] > 0


def test_an_ingest_batch_is_not_a_turn(api: httpx.Client) -> None:
    api.post(URL, json={"messages": [{"role": "user", "content": "hello"}]})
    with db.connection() as conn:
        batch = conn.execute("SELECT id FROM turns").fetchone()
    assert batch is not None
    assert api.get(f"/v1/turns/{batch['id']}").status_code == 404


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"role": "user", "content": "   "}, "must not be empty"),
        ({"role": "robot", "content": "beep"}, "role"),
        ({"role": "user", "content": "nul \x00 inside"}, "NUL"),
        ({"role": "user", "content": "lone \ud800"}, "surrogate"),
        ({"role": "user", "content": "hi", "created_at": 1700000000}, "ISO-8601"),
        ({"role": "user", "content": "hi", "tool_call_id": "x"}, "tool_call_id"),
        ({"role": "user"}, "content"),
    ],
)
def test_one_invalid_message_refuses_the_whole_batch(api: httpx.Client, bad: dict[str, Any], reason: str) -> None:
    import json

    before = counts()
    messages = [{"role": "user", "content": "I live in Lisbon."}, bad, {"role": "assistant", "content": "Noted."}]
    response = api.post(URL, content=json.dumps({"messages": messages}), headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "validation_error" and reason in json.dumps(body["detail"], ensure_ascii=False)
    assert any(issue["loc"][:3] == ["body", "messages", 1] for issue in body["detail"]), body
    assert counts() == before


def test_bounds_are_settings_and_answer_413_with_the_reason(
    api: httpx.Client, settings_env: Callable[..., None]
) -> None:
    settings_env(ingest_max_messages="3", ingest_max_message_chars="50")
    before = counts()
    many = api.post(URL, json={"messages": [{"role": "user", "content": f"m{i}"} for i in range(4)]})
    assert many.status_code == 413 and many.json()["code"] == "payload_too_large"
    assert "ENGRAM_INGEST_MAX_MESSAGES" in many.json()["detail"]
    long = api.post(URL, json={"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 51}]})
    assert long.status_code == 413 and "message 1" in long.json()["detail"]
    assert counts() == before
    assert api.post(URL, json={"messages": [{"role": "user", "content": "x" * 50}] * 3}).status_code == 202


def test_empty_batches_and_unknown_fields_are_refused(api: httpx.Client) -> None:
    before = counts()
    for body in ({"messages": []}, {}, {"messages": [{"role": "user", "content": "hi"}], "extra": 1}):
        response = api.post(URL, json=body)
        assert response.status_code == 422, (body, response.text)
    response = api.post(URL, json={"messages": [{"role": "user", "content": "hi"}], "metadata": {"a": "\x00"}})
    assert response.status_code == 422 and "NUL" in response.text
    assert counts() == before


def test_the_same_idempotency_key_replays_the_first_answer(api: httpx.Client) -> None:
    body = {"messages": CONVERSATION[:3]}
    first = api.post(URL, json=body, headers={"Idempotency-Key": "batch-1"})
    assert first.status_code == 202 and "Idempotent-Replayed" not in first.headers
    after_first = counts()
    again = api.post(URL, json=body, headers={"Idempotency-Key": "batch-1"})
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json() and counts() == after_first
    other = api.post(URL, json={"messages": CONVERSATION[3:]}, headers={"Idempotency-Key": "batch-1"})
    assert other.status_code == 409 and other.json()["code"] == "conflict"
    # A chat turn may not take an ingest batch's key either.
    turn = api.post(
        "/v1/sessions/chat-1/turns", json={"user_id": "alice", "text": "hi"}, headers={"Idempotency-Key": "batch-1"}
    )
    assert turn.status_code == 409
    assert counts() == after_first


def test_message_keys_make_a_rerun_write_nothing(api: httpx.Client) -> None:
    keyed = [{**m, "idempotency_key": f"import:{i}"} for i, m in enumerate(CONVERSATION)]
    first = api.post(URL, json={"messages": keyed[:3]}).json()
    # A re-run that overlaps: the known three answer their stored ids, the new two are written.
    second = api.post(URL, json={"messages": keyed}).json()
    assert second["message_ids"][:3] == first["message_ids"]
    assert first["new_messages"] == 3 and second["new_messages"] == 2
    stored = history(api)
    assert [m["content"] for m in stored] == [m["content"] for m in CONVERSATION]
    before = counts()
    third = api.post(URL, json={"messages": keyed}).json()
    assert third["message_ids"] == second["message_ids"] and third["new_messages"] == 0
    assert counts()["session_messages"] == before["session_messages"]
    # The same message key with other content is a conflict, and nothing of that batch is written.
    clash = [
        {"role": "user", "content": "new one", "idempotency_key": "import:new"},
        {**keyed[1], "content": "changed"},
    ]
    response = api.post(URL, json={"messages": clash})
    assert response.status_code == 409 and "import:1" in response.json()["detail"]
    twice = [
        {"role": "user", "content": "a", "idempotency_key": "k"},
        {"role": "user", "content": "b", "idempotency_key": "k"},
    ]
    assert api.post(URL, json={"messages": twice}).status_code == 422
    assert counts()["session_messages"] == before["session_messages"]


def test_scopes_and_bound_users(gateway: Gateway, api: httpx.Client) -> None:
    one = {"messages": [{"role": "user", "content": "hi"}]}
    reader = issue(api, scopes=["memory:read"])
    bound = issue(api, scopes=["memory:write", "memory:read"], user_id="bob")
    with client(gateway, reader["key"]) as http:
        refused = http.post(URL, json=one)
        assert refused.status_code == 403 and refused.json()["code"] == "missing_scope"
    with client(gateway, bound["key"]) as http:
        wrong = http.post(URL, json=one)
        assert wrong.status_code == 403 and wrong.json()["code"] == "wrong_user"
        assert http.post("/v1/users/bob/sessions/s/messages", json=one).status_code == 202
        assert http.get("/v1/users/alice/sessions/s/memory-status").status_code == 403
        assert http.get("/v1/users/bob/sessions/s/memory-status").status_code == 200
    assert counts()["session_messages"] == 1


def test_memory_status_counts_pending_messages(api: httpx.Client) -> None:
    assert api.get("/v1/users/alice/sessions/chat-1/memory-status").status_code == 404
    api.post(URL, json={"messages": CONVERSATION})
    status = api.get("/v1/users/alice/sessions/chat-1/memory-status").json()
    assert status["messages"] == len(CONVERSATION) and status["pending_messages"] == len(CONVERSATION)
    assert status["last_extracted_at"] is None and status["memories_created"] == 0 and status["idle"] is False


def test_a_time_postgres_could_not_give_back_is_refused(api: httpx.Client) -> None:
    before = counts()
    early = {"role": "user", "content": "hi", "created_at": "0001-01-01T00:00:00+01:00"}
    response = api.post(URL, json={"messages": [early]})
    assert response.status_code == 422 and "years 1 to 9999" in response.text
    assert counts() == before
    memory = api.post("/v1/users/alice/memories", json={"key": "k", "value": "v", "event_time": early["created_at"]})
    assert memory.status_code == 422


def test_a_spent_token_budget_refuses_ingest(api: httpx.Client) -> None:
    # Extraction of ingested messages costs model tokens: past the budget, nothing more is taken in.
    assert api.patch("/v1/admin/tenant", json={"monthly_token_budget": 50}).status_code == 200
    with db.connection() as conn:
        conn.execute(
            """INSERT INTO llm_calls (tenant_id, purpose, provider, model, input_tokens)
               SELECT id, 'extraction', 'fake', 'fake', 100 FROM tenants WHERE name = 'tenant-a'"""
        )
    before = counts()
    refused = api.post(URL, json={"messages": [{"role": "user", "content": "hi"}]})
    assert refused.status_code == 429 and refused.json()["code"] == "token_budget_exceeded"
    assert int(refused.headers["Retry-After"]) > 0 and counts() == before
