"""Bad requests get a clear 4xx with a reason and write nothing; tenants never see each other."""

from __future__ import annotations

import httpx
import pytest

from shared.infra import db
from tests.conftest import Gateway, make_key
from tests.integration.test_turns import post_turn

pytestmark = pytest.mark.integration

WRITTEN_TABLES = ("users", "sessions", "turns", "session_messages")


def written_rows() -> dict[str, int]:
    with db.connection() as conn:
        return {
            table: conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]  # type: ignore[index]
            for table in WRITTEN_TABLES
        }


NOTHING = dict.fromkeys(WRITTEN_TABLES, 0)


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"{not json", 422, "JSON decode error"),
        (b'{"text": "hi"}', 422, "user_id"),
        (b'{"user_id": "alice"}', 422, "text"),
        (b'{"user_id": "alice", "text": ""}', 422, "text must not be empty"),
        (b'{"user_id": "alice", "text": "   \\n "}', 422, "text must not be empty"),
        (b'{"user_id": "", "text": "hi"}', 422, "user_id"),
        (b'{"user_id": "has spaces", "text": "hi"}', 422, "user_id"),
        (b'{"user_id": 42, "text": "hi"}', 422, "user_id"),
        (b'["user_id", "text"]', 422, "body"),
    ],
)
def test_invalid_turn_bodies_are_refused(api: httpx.Client, body: bytes, status: int, reason: str) -> None:
    response = api.post("/v1/sessions/s1/turns", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert reason in response.text
    assert written_rows() == NOTHING


def test_a_json_body_without_its_content_type_is_told_which_header_to_send(api: httpx.Client) -> None:
    body = b'{"user_id": "alice", "text": "hi"}'
    for headers, sent in (
        ({}, "sent no Content-Type"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "sent Content-Type: application/x-www-form-urlencoded"),
    ):
        response = api.post("/v1/sessions/s1/turns", content=body, headers=headers)
        assert response.status_code == 422
        (issue,) = response.json()["detail"]
        assert "send the header Content-Type: application/json" in issue["msg"] and sent in issue["msg"], issue
    # The OpenAI-compatible route says the same in OpenAI's shape.
    completion = api.post(
        "/v1/chat/completions",
        content=b'{"model": "engram", "user": "alice", "messages": [{"role": "user", "content": "hi"}]}',
    )
    assert completion.status_code == 400
    assert "Content-Type: application/json" in completion.json()["error"]["message"]
    assert written_rows() == NOTHING


def test_text_over_the_limit_is_refused(api: httpx.Client) -> None:
    response = post_turn(api, "s1", "x" * 2001)  # ENGRAM_MAX_TURN_CHARS=2000 in tests
    assert response.status_code == 413
    assert "2001 characters" in response.json()["detail"] and "2000" in response.json()["detail"]
    assert written_rows() == NOTHING


def test_bad_session_key_is_refused(api: httpx.Client) -> None:
    response = api.post("/v1/sessions/bad%20key/turns", json={"user_id": "alice", "text": "hi"})
    assert response.status_code == 422
    assert "session_key" in response.text
    assert written_rows() == NOTHING


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer egm_wrong", "Basic dXNlcjpwYXNz", "egm_nobearer"])
def test_missing_or_invalid_api_key_is_401(gateway: Gateway, api_key: str, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    response = httpx.post(f"{gateway.url}/v1/sessions/s1/turns", json={"user_id": "a", "text": "hi"}, headers=headers)
    assert response.status_code == 401
    assert "API key" in response.json()["detail"]
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert written_rows() == NOTHING


def test_unknown_turn_and_session_are_404(api: httpx.Client) -> None:
    missing = api.get("/v1/turns/999999")
    assert missing.status_code == 404 and "999999" in missing.json()["detail"]
    assert api.get("/v1/turns/999999/events").status_code == 404
    no_session = api.get("/v1/sessions/nope/messages", params={"user_id": "alice"})
    assert no_session.status_code == 404 and "nope" in no_session.json()["detail"]
    assert api.get("/v1/turns/not-a-number").status_code == 422
    assert api.get("/v1/turns/1", params={"wait": -1}).status_code == 422
    assert api.get("/v1/sessions/s1/messages").status_code == 422  # user_id is required


def test_tenants_cannot_see_each_others_turns(gateway: Gateway, api: httpx.Client) -> None:
    accepted = post_turn(api, "shared-name", "tenant A's secret").json()
    turn_id = accepted["turn_id"]
    other_key = make_key("tenant-b")
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {other_key}"}) as other:
        assert other.get(f"/v1/turns/{turn_id}").status_code == 404
        assert other.get(f"/v1/turns/{turn_id}/events").status_code == 404
        assert other.get("/v1/sessions/shared-name/messages", params={"user_id": "alice"}).status_code == 404
        # The same session key and user id in tenant B is a different conversation.
        mine = other.post("/v1/sessions/shared-name/turns", json={"user_id": "alice", "text": "B here"})
        assert mine.status_code == 202 and mine.json()["session_id"] != accepted["session_id"]
    history = api.get("/v1/sessions/shared-name/messages", params={"user_id": "alice"}).json()["messages"]
    # A worker left running by an earlier test may have answered the turn: only user messages matter here.
    assert [m["content"] for m in history if m["role"] == "user"] == ["tenant A's secret"]


def test_users_of_one_tenant_have_separate_sessions(api: httpx.Client) -> None:
    post_turn(api, "same-key", "from alice", user="alice")
    post_turn(api, "same-key", "from bob", user="bob")
    alice = api.get("/v1/sessions/same-key/messages", params={"user_id": "alice"}).json()["messages"]
    bob = api.get("/v1/sessions/same-key/messages", params={"user_id": "bob"}).json()["messages"]
    assert [m["content"] for m in alice] == ["from alice"]
    assert [m["content"] for m in bob] == ["from bob"]


def test_openapi_schema_describes_the_api(gateway: Gateway) -> None:
    schema = httpx.get(f"{gateway.url}/openapi.json").json()
    paths = schema["paths"]
    assert {
        "/v1/sessions/{session_key}/turns",
        "/v1/turns/{turn_id}",
        "/v1/turns/{turn_id}/events",
        "/v1/sessions/{session_key}/messages",
        "/healthz",
        "/readyz",
    } <= set(paths)
    post = paths["/v1/sessions/{session_key}/turns"]["post"]
    assert "202" in post["responses"]
    assert any(p["name"] == "idempotency-key" for p in post["parameters"])
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
