"""The MCP server with the official `mcp` SDK client as the caller: over streamable HTTP at /mcp on a
real gateway, and over stdio through `engram mcp` (a subprocess forwarding to that gateway)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client

from shared.infra import db
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from tests.conftest import Gateway

pytestmark = pytest.mark.integration
T = TypeVar("T")

TOOLS = {
    "memory_store",
    "memory_search",
    "memory_recall",
    "memory_list",
    "memory_delete",
    "memory_correct",
    "memory_context",
    "memory_sources",
    "conversation_ingest",
}


def run(coro: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(coro(), 120))


def http_client(gateway: Gateway, key: str, user: str | None, statuses: list[int] | None = None) -> Client:
    headers = {"Authorization": f"Bearer {key}"}
    if user is not None:
        headers["X-Engram-User"] = user

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    http = httpx2.AsyncClient(headers=headers, timeout=60, event_hooks={"response": [record]})
    return Client(streamable_http_client(f"{gateway.url}/mcp", http_client=http))


def stdio_client(gateway: Gateway, key: str, user: str) -> Client:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME") or k.startswith("ENGRAM_")}
    return Client(
        StdioServerParameters(
            command=sys.executable,
            args=["-m", "ops.cli", "mcp", "--url", f"{gateway.url}/mcp", "--api-key", key, "--user", user],
            env=env,
        )
    )


def payload(result: mcp_types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return json.loads(block.text)


def error_text(result: mcp_types.CallToolResult) -> str:
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


def test_http_tools_store_search_and_isolate_users(gateway: Gateway, api_key: str) -> None:
    async def scenario() -> dict[str, Any]:
        async with http_client(gateway, api_key, "alice") as alice:
            tools = {tool.name: tool for tool in (await alice.list_tools()).tools}
            stored = payload(
                await alice.call_tool(
                    "memory_store", {"key": "favourite-tea", "value": "Alice drinks jasmine green tea every morning"}
                )
            )
            found = payload(await alice.call_tool("memory_search", {"query": "jasmine tea"}))
            recalled = payload(await alice.call_tool("memory_recall", {"key": "favourite-tea"}))
            listed = payload(await alice.call_tool("memory_list", {}))
            context = payload(await alice.call_tool("memory_context", {"query": "tea", "max_tokens": 200}))
            resources = {str(r.uri) for r in (await alice.list_resources()).resources}
            knowledge = await alice.read_resource("engram://user/profile")
        async with http_client(gateway, api_key, "bob") as bob:
            bob_found = payload(await bob.call_tool("memory_search", {"query": "jasmine tea"}))
            bob_list = payload(await bob.call_tool("memory_list", {}))
            bob_recall = payload(await bob.call_tool("memory_recall", {"key": "favourite-tea"}))
            bob_delete = await bob.call_tool("memory_delete", {"id": stored["memory"]["id"]})
            bob_correct = await bob.call_tool("memory_correct", {"id": stored["memory"]["id"], "value": "coffee"})
            bob_profile = await bob.read_resource("engram://user/profile")
        return {
            "tools": tools,
            "stored": stored,
            "found": found,
            "recalled": recalled,
            "listed": listed,
            "bob_recall": bob_recall,
            "context": context,
            "resources": resources,
            "profile": knowledge,
            "bob_found": bob_found,
            "bob_list": bob_list,
            "bob_delete": bob_delete,
            "bob_correct": bob_correct,
            "bob_profile": bob_profile,
        }

    out = run(scenario)
    assert set(out["tools"]) >= TOOLS
    store_schema = out["tools"]["memory_store"].input_schema
    assert set(store_schema["required"]) == {"key", "value"} and out["tools"]["memory_store"].description
    assert out["stored"]["action"] == "added" and out["stored"]["memory"]["key"] == "favourite-tea"
    assert [r["value"] for r in out["found"]["results"]] == ["Alice drinks jasmine green tea every morning"]
    assert [m["value"] for m in out["recalled"]["memories"]] == ["Alice drinks jasmine green tea every morning"]
    assert [m["id"] for m in out["listed"]["memories"]] == [out["stored"]["memory"]["id"]]
    assert "jasmine green tea" in out["context"]["context"]
    assert out["context"]["tokens"] <= 200
    assert {"engram://user/profile", "engram://user/what-you-know"} <= out["resources"]
    assert json.loads(out["profile"].contents[0].text)["user_id"] == "alice"
    # Bob sees nothing of Alice's, and her ids are errors for him, never data.
    assert out["bob_found"] == {"results": []} and out["bob_list"] == {"memories": []}
    assert out["bob_recall"] == {"memories": []}
    assert "no active memory" in error_text(out["bob_delete"])
    assert "no active memory" in error_text(out["bob_correct"])
    assert json.loads(out["bob_profile"].contents[0].text) == {"user_id": "bob"}
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT m.value, u.external_id FROM memories m JOIN users u ON u.id = m.user_id WHERE m.valid_until IS NULL"
        ).fetchall()
        events = conn.execute("SELECT actor FROM memory_events").fetchall()
    assert rows == [{"value": "Alice drinks jasmine green tea every morning", "external_id": "alice"}]
    assert {e["actor"] for e in events} == {"mcp"}


def test_http_refuses_bad_key_401_and_missing_user_400(gateway: Gateway, api_key: str) -> None:
    async def connect(key: str, user: str | None, statuses: list[int]) -> None:
        async with http_client(gateway, key, user, statuses) as client:
            await client.list_tools()

    bad_key: list[int] = []
    with pytest.raises(Exception):  # noqa: B017 - the SDK's exception for a refused connection is not public
        run(lambda: connect("egm_not-a-key", "alice", bad_key))
    assert bad_key and set(bad_key) == {401}

    no_user: list[int] = []
    with pytest.raises(Exception):  # noqa: B017
        run(lambda: connect(api_key, None, no_user))
    assert no_user and set(no_user) == {400}

    # The same refusals on the wire, with engram's reason.
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        unauthorized = http.post("/mcp", json=ping, headers={"Authorization": "Bearer egm_nope"})
        missing = http.post("/mcp", json=ping, headers={"Authorization": f"Bearer {api_key}"})
    assert unauthorized.status_code == 401 and unauthorized.json()["code"] == "unauthorized"
    assert missing.status_code == 400 and "X-Engram-User" in missing.json()["detail"]


def test_http_key_scopes_and_bound_users(gateway: Gateway, api_key: str) -> None:
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {api_key}"}) as admin:
        reader = admin.post("/v1/admin/keys", json={"scopes": ["memory:read"]}).json()["key"]
        carol = admin.post("/v1/admin/keys", json={"scopes": ["memory:read", "memory:write"], "user_id": "carol"})
    carol_key = carol.json()["key"]

    async def scenario() -> tuple[Any, Any, Any]:
        async with http_client(gateway, reader, "alice") as read_only:
            refused = await read_only.call_tool("memory_store", {"key": "k", "value": "v"})
        async with http_client(gateway, carol_key, None) as bound:  # the key's user, no header needed
            stored = payload(await bound.call_tool("memory_store", {"key": "city", "value": "Carol lives in Porto"}))
            listed = payload(await bound.call_tool("memory_list", {}))
        return refused, stored, listed

    refused, stored, listed = run(scenario)
    assert "lacks the scope 'memory:write'" in error_text(refused)
    assert stored["action"] == "added" and [m["value"] for m in listed["memories"]] == ["Carol lives in Porto"]
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        other = http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {carol_key}", "X-Engram-User": "dave"},
        )
    assert other.status_code == 403 and other.json()["code"] == "wrong_user"


def test_conversation_ingest_stores_the_messages_in_order(gateway: Gateway, api_key: str) -> None:
    messages = [
        {"role": "user", "content": "I moved to Berlin last spring."},
        {"role": "assistant", "content": "Nice! How do you like it?"},
    ]

    async def scenario() -> Any:
        async with http_client(gateway, api_key, "alice") as alice:
            return payload(
                await alice.call_tool("conversation_ingest", {"session_key": "outside-1", "messages": messages})
            )

    out = run(scenario)
    assert out["status"] == "queued" and len(out["message_ids"]) == 2
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {api_key}"}) as http:
        history = http.get("/v1/sessions/outside-1/messages", params={"user_id": "alice"}).json()["messages"]
    assert [(m["role"], m["content"]) for m in history] == [(m["role"], m["content"]) for m in messages]


def test_the_tools_find_what_was_said_and_where_a_memory_came_from(gateway: Gateway, api_key: str) -> None:
    messages = [{"role": "user", "content": "I moved to Berlin last spring.", "created_at": "2023-05-08T10:00:00Z"}]

    async def ingest() -> Any:
        async with http_client(gateway, api_key, "alice") as alice:
            return payload(
                await alice.call_tool("conversation_ingest", {"session_key": "outside-2", "messages": messages})
            )

    (message_id,) = run(ingest)["message_ids"]
    with db.connection() as conn:  # a fact learned from that message, as extraction stores one
        owner = conn.execute("SELECT tenant_id, user_id FROM session_messages WHERE id = %s", (message_id,)).fetchone()
        assert owner is not None
        memory = store_memory(
            conn,
            Scope(owner["tenant_id"], owner["user_id"]),
            MemoryInput(key="user/location", value="User moved to Berlin", source_message_ids=[message_id]),
            "extraction",
        ).memory

    async def scenario() -> tuple[Any, Any, Any]:
        async with http_client(gateway, api_key, "alice") as alice:
            found = payload(await alice.call_tool("memory_search", {"query": "moved to Berlin"}))
            sources = payload(await alice.call_tool("memory_sources", {"id": memory["id"], "excerpts": True}))
            bare = payload(await alice.call_tool("memory_sources", {"id": memory["id"]}))
            return found, sources, bare

    found, sources, bare = run(scenario)
    (said,) = [r for r in found["results"] if r["source"] == "transcript"]
    assert said["value"] == "I moved to Berlin last spring." and said["speaker"] == "user"
    assert said["session_key"] == "outside-2" and said["said_at"].startswith("2023-05-08T10:00")
    (fact,) = [r for r in found["results"] if r["source"] == "memory"]
    assert fact["source_message_ids"] == [message_id]
    (source,) = sources["sources"]
    assert source["excerpt"] == "I moved to Berlin last spring." and source["session_key"] == "outside-2"
    assert bare["sources"][0]["excerpt"] is None


def test_stdio_through_engram_mcp(gateway: Gateway, api_key: str) -> None:
    async def scenario() -> tuple[set[str], Any, Any, Any]:
        async with stdio_client(gateway, api_key, "alice") as alice:
            names = {tool.name for tool in (await alice.list_tools()).tools}
            stored = payload(
                await alice.call_tool("memory_store", {"key": "pet", "value": "Alice has a cat named Miso"})
            )
            found = payload(await alice.call_tool("memory_search", {"query": "cat Miso"}))
        async with stdio_client(gateway, api_key, "bob") as bob:
            bob_found = payload(await bob.call_tool("memory_search", {"query": "cat Miso"}))
        return names, stored, found, bob_found

    names, stored, found, bob_found = run(scenario)
    assert names >= TOOLS
    assert stored["action"] == "added"
    assert [r["value"] for r in found["results"]] == ["Alice has a cat named Miso"]
    assert bob_found == {"results": []}


def test_stdio_refuses_a_bad_key_with_the_reason(gateway: Gateway, clean_state: Any) -> None:
    import subprocess

    env = {**os.environ}
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", "mcp", "--url", f"{gateway.url}/mcp", "--api-key", "egm_nope", "--user", "a"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "engram refused the connection (401)" in done.stderr and "invalid or revoked API key" in done.stderr
