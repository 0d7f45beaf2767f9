"""engramhq_client (clients/python) against the real gateway: every operation sync and async, typed results,
errors with engram's codes, and the flow of docs/integrations/python-client.md (ingest → wait until idle →
context) with real workers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engramhq_client import AsyncEngramClient, EngramAPIError, EngramClient
from engramhq_client.models import ContextOut, MemoryDetailOut, MemoryOut, SearchResultOut

from tests.conftest import Gateway
from tests.integration.test_ingest_pipeline import gateway_memory, pipeline  # noqa: F401  (fixtures used here)

pytestmark = pytest.mark.integration

TALK = [
    {"role": "user", "content": "I live in Lisbon."},
    {"role": "assistant", "content": "Nice!"},
    {"role": "user", "content": "I prefer green tea."},
]


def test_sync_client_covers_ingest_context_search_and_memories(gateway: Gateway, api_key: str) -> None:
    with EngramClient(gateway.url, api_key) as engram:
        first = engram.ingest("alice", "c1", TALK, metadata={"app": "test"}, idempotency_key="k1")
        again = engram.ingest("alice", "c1", TALK, metadata={"app": "test"}, idempotency_key="k1")
        assert len(first.message_ids) == 3 and not first.replayed
        assert again.replayed and again.message_ids == first.message_ids
        status = engram.memory_status("alice", "c1")
        assert status.pending_messages == 3 and not status.idle

        written = engram.add_memory("alice", "drink", "Prefers green tea", namespace="tacit/preferences", tags=["x"])
        assert written.action == "added" and isinstance(written.memory, MemoryOut)
        memory_id = written.memory.id
        detail = engram.get_memory("alice", memory_id)
        assert isinstance(detail, MemoryDetailOut) and detail.value == "Prefers green tea" and detail.sources == []
        assert [m.id for m in engram.memories("alice", namespace="tacit")] == [memory_id]
        results = engram.search("alice", "green tea")
        assert results and all(isinstance(r, SearchResultOut) for r in results)
        # The memory, and the message that said it (the transcript is searched too).
        assert memory_id in [r.id for r in results]
        assert [(r.value, r.speaker, r.session_key) for r in results if r.source == "transcript"] == [
            ("I prefer green tea.", "user", "c1")
        ]
        packed = engram.context("alice", query="green tea", max_tokens=200)
        assert isinstance(packed, ContextOut) and "Prefers green tea" in packed.context and packed.tokens <= 200

        changed = engram.update_memory("alice", memory_id, value="Prefers jasmine tea")
        assert changed.action == "superseded" and changed.replaced_id == memory_id
        engram.delete_memory("alice", changed.memory.id)
        assert engram.memories("alice") == []
        exported = engram.export("alice")
        assert [m["content"] for m in exported["messages"]] == [m["content"] for m in TALK]

        with pytest.raises(EngramAPIError) as missing:
            engram.get_memory("alice", 999_999)
        assert missing.value.status_code == 404 and missing.value.code == "not_found"
        with pytest.raises(EngramAPIError) as invalid:
            engram.ingest("alice", "c1", [{"role": "robot", "content": "beep"}])
        assert invalid.value.status_code == 422 and invalid.value.code == "validation_error"
    with pytest.raises(EngramAPIError) as unauthorized, EngramClient(gateway.url, "egm_wrong") as stranger:
        stranger.memories("alice")
    assert unauthorized.value.code == "unauthorized"


def test_async_client_has_the_same_operations(gateway: Gateway, api_key: str) -> None:
    async def run() -> dict[str, Any]:
        async with AsyncEngramClient(gateway.url, api_key) as engram:
            accepted = await engram.ingest("bob", "c2", TALK)
            status = await engram.memory_status("bob", "c2")
            written = await engram.add_memory("bob", "city", "Lives in Porto")
            found = await engram.search("bob", "Porto")
            packed = await engram.context("bob", query="Porto", max_tokens=100)
            listed = await engram.memories("bob")
            one = await engram.get_memory("bob", written.memory.id)
            await engram.update_memory("bob", written.memory.id, tags=["home"])
            await engram.delete_memory("bob", written.memory.id)
            exported = await engram.export("bob")
            try:
                await engram.get_memory("bob", written.memory.id + 1000)
                error = None
            except EngramAPIError as exc:
                error = exc.code
            return {
                "ids": accepted.message_ids,
                "pending": status.pending_messages,
                "found": [r.value for r in found],
                "context": packed.context,
                "tokens": packed.tokens,
                "listed": [m.key for m in listed],
                "one": one.value,
                "after": exported["memories"][-1]["tags"],
                "error": error,
            }

    result = asyncio.run(run())
    assert len(result["ids"]) == 3 and result["pending"] == 3
    # The memory naming the query's word first; the transcript may follow with what is near it in meaning.
    assert result["found"][0] == "Lives in Porto" and "Lives in Porto" in result["context"] and result["tokens"] <= 100
    assert result["listed"] == ["city"] and result["one"] == "Lives in Porto"
    assert result["after"] == ["home"] and result["error"] == "not_found"


@pytest.mark.usefixtures("pipeline")
def test_the_readme_flow_ingest_wait_context(gateway: Gateway, api_key: str) -> None:
    with EngramClient(gateway.url, api_key) as engram:
        engram.ingest("alice", "outside", TALK)
        status = engram.wait_until_idle("alice", "outside", timeout=60)
        assert status.memories_created == 2
        packed = engram.context("alice", query="tea in Lisbon", session_key="outside", max_tokens=500)
    # The fact, or the message it was taken from (never both): what the user said reaches the prompt.
    assert ("Prefers green tea" in packed.context) != ("I prefer green tea." in packed.context)
    assert packed.tokens <= 500


def test_the_client_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ENGRAM_API_KEY"):
        EngramClient("http://127.0.0.1:1")
