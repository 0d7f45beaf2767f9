"""Ingested messages go through the same memory pipeline as chat turns (real Celery workers, the fake
model behind the official anthropic SDK): debounced extraction, memory status until idle, and a
session that mixes ingested batches with chat turns keeps the order they arrived in."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM
from shared.infra import db
from shared.infra.config import get_settings
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_pipeline import PIPELINE_ENV, eventually, ledger, requests_of, responder
from tests.integration.test_turns import post_turn

pytestmark = pytest.mark.integration


@pytest.fixture
def gateway_memory() -> Iterator[None]:
    """The in-process gateway schedules the memory work of an ingested batch: turn it on there too."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in PIPELINE_ENV.items():
            patch.setenv(name, value)
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()


@pytest.fixture
def pipeline(celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM, gateway_memory: None) -> CeleryStack:
    fake_llm.default = responder()
    celery_stack.ensure("anthropic", **PIPELINE_ENV)
    return celery_stack


def status(api: httpx.Client, session: str) -> dict[str, Any]:
    response = api.get(f"/v1/users/alice/sessions/{session}/memory-status")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_idle(api: httpx.Client, session: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def idle() -> bool:
        found.update(status(api, session))
        return bool(found["idle"])

    eventually(idle, timeout=60, message=f"session {session} never became idle: {found}")
    return found


def ingest(api: httpx.Client, session: str, *messages: tuple[str, str]) -> dict[str, Any]:
    body = {"messages": [{"role": role, "content": content} for role, content in messages]}
    response = api.post(f"/v1/users/alice/sessions/{session}/messages", json=body)
    assert response.status_code == 202, response.text
    accepted: dict[str, Any] = response.json()
    return accepted


def test_ingested_messages_are_extracted_once_after_the_debounce(
    api: httpx.Client, pipeline: CeleryStack, fake_llm: FakeLLM
) -> None:
    first = ingest(api, "outside", ("user", "I live in Lisbon."), ("assistant", "Nice city!"))
    ingest(api, "outside", ("user", "I prefer green tea."))
    assert status(api, "outside")["pending_messages"] == 3
    done = wait_idle(api, "outside")
    assert done["pending_messages"] == 0 and done["messages"] == 3 and done["last_extracted_at"] is not None
    assert done["memories_created"] == 2 and done["memories_pending_embedding"] == 0
    # One extraction for both batches (debounced), and it saw every ingested message.
    assert ledger(first["session_id"], "extraction") == 1
    (request,) = requests_of(fake_llm, "extraction")
    prompt = json.dumps(request["messages"])
    assert "I live in Lisbon." in prompt and "I prefer green tea." in prompt
    found = api.post("/v1/users/alice/memories/search", json={"query": "green tea"}).json()["results"]
    assert any("green tea" in r["value"] for r in found)
    # What the outside agent puts in its next prompt now carries the extracted facts, within budget.
    packed = api.post(
        "/v1/users/alice/context", json={"query": "tea in Lisbon", "session_key": "outside", "max_tokens": 300}
    ).json()
    # Each fact, or the message it was taken from (never both).
    for fact, said in (("Prefers green tea", "I prefer green tea."), ("Lives in Lisbon", "I live in Lisbon.")):
        assert (fact in packed["context"]) != (said in packed["context"]), packed["context"]
    assert packed["tokens"] <= 300


def test_a_session_mixing_batches_and_turns_keeps_arrival_order(
    api: httpx.Client, pipeline: CeleryStack, fake_llm: FakeLLM
) -> None:
    ingest(api, "mixed", ("user", "Earlier: I am planning a trip to Kyoto."), ("tool", '{"flights": 3}'))
    turn = post_turn(api, "mixed", "What do you know about my trip?").json()
    assert wait_turn(api, turn["turn_id"])["status"] == "done"
    ingest(api, "mixed", ("user", "Later: I booked the hotel."))
    history = api.get("/v1/sessions/mixed/messages", params={"user_id": "alice"}).json()["messages"]
    assert [m["role"] for m in history] == ["user", "tool", "user", "assistant", "user"]
    assert history[2]["content"] == "What do you know about my trip?"
    assert history[-1]["content"] == "Later: I booked the hotel."
    # The turn's model call carried the ingested messages before the user's question; the outside tool
    # output travelled as text (the provider accepted the request).
    (chat,) = requests_of(fake_llm, "chat")
    sent = json.dumps(chat["messages"])
    assert sent.index("Earlier: I am planning") < sent.index("flights") < sent.index("What do you know")
    assert "Later: I booked" not in sent


@contextlib.contextmanager
def configured(stack: CeleryStack, provider: str, env: dict[str, str]) -> Iterator[CeleryStack]:
    """These settings in the workers and in the in-process gateway (memory-status and context read them)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        get_settings.cache_clear()
        stack.ensure(provider, **env)
        yield stack
    get_settings.cache_clear()


@pytest.fixture
def compacting(celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM) -> Iterator[CeleryStack]:
    """A low compaction threshold."""
    fake_llm.default = responder()
    with configured(celery_stack, "anthropic", {**PIPELINE_ENV, "ENGRAM_COMPACTION_THRESHOLD_TOKENS": "600"}) as stack:
        yield stack


def test_memory_status_is_idle_only_once_a_due_compaction_and_every_transcript_vector_are_done(
    api: httpx.Client, compacting: CeleryStack
) -> None:
    said = [
        ("user", f"Note {n}: the quarterly report for region {n} " + "lists several figures. " * 12) for n in range(8)
    ]
    accepted = ingest(api, "long", *said)
    before = status(api, "long")
    assert before["compaction_due"] is True and before["idle"] is False
    done = wait_idle(api, "long")
    assert done["compaction_count"] >= 1 and done["compaction_due"] is False
    assert done["transcript_pending_messages"] == 0 and done["pending_messages"] == 0
    # Idle means every message is searchable by meaning too: each has its transcript unit with a vector,
    # compacted or not (compaction indexes nothing: the units were there from the start).
    with db.connection() as conn:
        units = conn.execute(
            """SELECT count(*) AS n, count(*) FILTER (WHERE embedding IS NOT NULL) AS embedded
               FROM memory_chunks WHERE session_id = %s AND message_id IS NOT NULL""",
            (accepted["session_id"],),
        ).fetchone()
    assert units is not None and units["n"] == units["embedded"] == len(said)
