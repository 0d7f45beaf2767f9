"""API key scopes, user-bound keys, the admin key API and `engram keys`, against the real gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Gateway, make_key
from tests.integration.test_turns import count


def client(gateway: Gateway, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=gateway.url, headers=headers, timeout=30)


@pytest.fixture
def admin(gateway: Gateway, api_key: str) -> Iterator[httpx.Client]:
    with client(gateway, api_key) as http:
        yield http


def issue(admin: httpx.Client, **body: Any) -> dict[str, Any]:
    response = admin.post("/v1/admin/keys", json=body)
    assert response.status_code == 201, response.text
    issued: dict[str, Any] = response.json()
    return issued


def test_a_read_only_key_reads_but_cannot_write(gateway: Gateway, admin: httpx.Client) -> None:
    assert admin.post("/v1/users/alice/memories", json={"key": "city", "value": "Lives in Porto"}).status_code == 201
    reader = issue(admin, name="reader", scopes=["memory:read"])
    assert reader["scopes"] == ["memory:read"] and reader["key"].startswith("egm_")
    with client(gateway, reader["key"]) as http:
        assert [m["key"] for m in http.get("/v1/users/alice/memories").json()] == ["city"]
        assert http.post("/v1/users/alice/memories/search", json={"query": "Porto"}).status_code == 200
        before = count("memories")
        for response in (
            http.post("/v1/users/alice/memories", json={"key": "pet", "value": "Has a cat"}),
            http.delete("/v1/users/alice"),
            http.patch("/v1/users/alice/profile", json={"display_name": "Mallory"}),
            http.post("/v1/sessions/s1/turns", json={"user_id": "alice", "text": "hi"}),
            http.get("/v1/admin/keys"),
        ):
            assert response.status_code == 403, response.text
            assert response.json()["code"] == "missing_scope"
        refused = http.post("/v1/users/alice/memories", json={"key": "pet", "value": "Has a cat"}).json()
        assert "memory:write" in refused["detail"]
        assert count("memories") == before and count("turns") == 0


def test_a_chat_key_cannot_read_memories(gateway: Gateway, admin: httpx.Client) -> None:
    chat = issue(admin, scopes=["chat"])
    with client(gateway, chat["key"]) as http:
        assert http.post("/v1/sessions/s1/turns", json={"user_id": "alice", "text": "hi"}).status_code == 202
        refused = http.get("/v1/users/alice/memories")
        assert refused.status_code == 403 and "memory:read" in refused.json()["detail"]


def test_metrics_need_a_key_with_the_metrics_scope(gateway: Gateway, admin: httpx.Client) -> None:
    with client(gateway, None) as anonymous:
        assert anonymous.get("/metrics").status_code == 401
    with client(gateway, issue(admin, scopes=["chat", "memory:read"])["key"]) as http:
        assert http.get("/metrics").status_code == 403
    with client(gateway, issue(admin, scopes=["metrics"])["key"]) as scraper:
        scraped = scraper.get("/metrics")
        assert scraped.status_code == 200 and "engram_" in scraped.text
        # A scraper's key opens nothing else.
        assert scraper.get("/v1/users/alice/memories").status_code == 403


def test_rotate_and_revoke_take_effect_at_once(gateway: Gateway, admin: httpx.Client) -> None:
    old = issue(admin, name="rotating", scopes=["memory:read"])
    rotated = admin.post(f"/v1/admin/keys/{old['id']}/rotate")
    assert rotated.status_code == 200
    new = rotated.json()
    assert new["key"] != old["key"] and new["scopes"] == ["memory:read"] and new["rotated_from"] == old["id"]
    with client(gateway, old["key"]) as stale, client(gateway, new["key"]) as fresh:
        assert stale.get("/v1/users/alice/memories").status_code == 401
        assert fresh.get("/v1/users/alice/memories").status_code == 404  # no such user yet: authorised
        assert admin.delete(f"/v1/admin/keys/{new['id']}").status_code == 200
        assert fresh.get("/v1/users/alice/memories").status_code == 401
    assert admin.delete(f"/v1/admin/keys/{new['id']}").status_code == 404  # already revoked
    listed = {k["id"]: k for k in admin.get("/v1/admin/keys", params={"include_revoked": True}).json()}
    assert listed[old["id"]]["revoked_at"] and listed[new["id"]]["revoked_at"]
    assert all("key" not in k for k in listed.values())  # secrets are never listed
    assert old["id"] not in {k["id"] for k in admin.get("/v1/admin/keys").json()}


def test_admin_cannot_touch_another_tenants_keys(gateway: Gateway, admin: httpx.Client) -> None:
    other_admin = make_key("tenant-b")
    with client(gateway, other_admin) as other:
        theirs = issue(other, scopes=["chat"])
    assert admin.delete(f"/v1/admin/keys/{theirs['id']}").status_code == 404
    assert admin.post(f"/v1/admin/keys/{theirs['id']}/rotate").status_code == 404
    assert theirs["id"] not in {k["id"] for k in admin.get("/v1/admin/keys").json()}


def test_bad_key_requests_are_422_and_create_nothing(admin: httpx.Client) -> None:
    before = count("api_keys")
    for body in ({"scopes": ["root"]}, {"scopes": []}, {"user_id": "has space"}, {"name": "x" * 101}):
        response = admin.post("/v1/admin/keys", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["code"] == "validation_error"
    assert count("api_keys") == before


def test_a_user_bound_key_acts_for_its_user_only(gateway: Gateway, admin: httpx.Client) -> None:
    turn_of_bob = admin.post("/v1/sessions/s-bob/turns", json={"user_id": "bob", "text": "bob here"}).json()
    bound = issue(admin, scopes=["chat", "memory:read", "memory:write"], user_id="alice")
    assert bound["user_id"] == "alice"
    with client(gateway, bound["key"]) as http:
        assert http.post("/v1/users/alice/memories", json={"key": "city", "value": "Lives in Porto"}).status_code == 201
        assert http.post("/v1/sessions/s1/turns", json={"user_id": "alice", "text": "hi"}).status_code == 202
        before = (count("memories"), count("turns"))
        for response in (
            http.get("/v1/users/bob/memories"),
            http.post("/v1/users/bob/memories", json={"key": "city", "value": "Lives in Oslo"}),
            http.delete("/v1/users/bob"),
            http.post("/v1/sessions/s2/turns", json={"user_id": "bob", "text": "I am bob now"}),
            http.get("/v1/sessions/s-bob/messages", params={"user_id": "bob"}),
        ):
            assert response.status_code == 403, response.text
            assert response.json()["code"] == "wrong_user"
        assert http.get(f"/v1/turns/{turn_of_bob['turn_id']}").status_code == 404
        assert (count("memories"), count("turns")) == before


def engram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, env=dict(os.environ), timeout=120
    )


def test_cli_creates_a_scoped_key_as_json(gateway: Gateway, clean_state: Any) -> None:
    created = engram("keys", "create", "--scopes", "memory:read", "--json")
    assert created.returncode == 0, created.stderr
    issued = json.loads(created.stdout.strip().splitlines()[-1])
    assert issued["scopes"] == ["memory:read"] and issued["tenant"] == "default"
    with client(gateway, issued["key"]) as http:
        assert http.get("/v1/users/alice/memories").status_code == 404  # authorised; no such user
        refused = http.post("/v1/users/alice/memories", json={"key": "k", "value": "v"})
        assert refused.status_code == 403

    listed = json.loads(engram("keys", "list", "--json").stdout)
    assert [k["id"] for k in listed["keys"]] == [issued["id"]]
    assert issued["key"] not in json.dumps(listed)

    rotated = engram("keys", "rotate", str(issued["id"]), "--json")
    assert rotated.returncode == 0, rotated.stderr
    new_key = json.loads(rotated.stdout)["key"]
    with client(gateway, issued["key"]) as stale, client(gateway, new_key) as fresh:
        assert stale.get("/v1/users/alice/memories").status_code == 401
        assert fresh.get("/v1/users/alice/memories").status_code == 404


def test_cli_refuses_bad_key_requests(clean_state: Any) -> None:
    bad_scope = engram("keys", "create", "--scopes", "memory:read,root")
    assert bad_scope.returncode == 2 and "unknown scope 'root'" in bad_scope.stderr
    assert "Traceback" not in bad_scope.stderr
    assert count("api_keys") == 0
    no_tenant = engram("keys", "list", "--tenant", "nobody")
    assert no_tenant.returncode == 1 and "no tenant 'nobody'" in no_tenant.stderr
    make_key("default")
    unknown = engram("keys", "revoke", "999999")
    assert unknown.returncode == 1 and "no active key 999999" in unknown.stderr
    assert count("api_keys") == 1
