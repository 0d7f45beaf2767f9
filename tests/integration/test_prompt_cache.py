"""The prompt cache over a real session: the history is served from cache from the second turn on, and
a memory written mid-session reaches the model in the dynamic tail without touching the cached prefix
("What You Know" is frozen per session epoch, shared/context/epoch.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from ops.fake_cache import anthropic_parts, part_tokens
from ops.fake_llm import FakeLLM, FakeReply, RecordedRequest, engram_tail
from shared.context.compiler import TurnContext, compile_request, prepare_turn
from shared.context.epoch import COMPACTED, DELTA_BOUND, FIRST, MEMORY_CHANGED, PROMPT_CHANGED
from shared.infra.db import Conn
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from shared.tools import default_registry
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_context import session_row
from tests.integration.test_memory_store import make_scope
from tests.integration.test_turns import post_turn

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 4, 13, 5, tzinfo=UTC)


def turn_calls(fake: FakeLLM, marker: str) -> list[RecordedRequest]:
    """The agent-loop requests of one conversation (background calls carry no dynamic tail)."""
    return [r for r in fake.requests_matching(marker) if engram_tail(r.body)]


def before_tail_tokens(body: dict[str, Any]) -> int:
    """Tokens of everything a request sends before its tail (the tail is its last block)."""
    parts, _ = anthropic_parts(body)
    return sum(part_tokens(p) for p in parts[:-1])


def tail_tokens(body: dict[str, Any]) -> int:
    parts, _ = anthropic_parts(body)
    return part_tokens(parts[-1])


def test_ten_turn_session_reads_the_whole_history_from_cache(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    marker = "cachetest-ten"
    turns = []
    for n in range(10):
        fake_llm.script(FakeReply(text=f"Reply {n}: " + "some words " * (5 + n)), match=f"{marker} {n}:")
        turn = wait_turn(api, post_turn(api, "s-cache", f"{marker} {n}: tell me more about it").json()["turn_id"])
        assert turn["status"] == "done", turn
        turns.append(turn)
    calls = turn_calls(fake_llm, marker)
    assert len(calls) == 10
    assert turns[0]["usage"]["cache_read_tokens"] == 0 and turns[0]["usage"]["cache_write_tokens"] > 0
    for n in range(1, 10):
        usage, before, now = turns[n]["usage"], calls[n - 1].body, calls[n].body
        # Everything the previous request sent before its tail — tools, static prompt, all history
        # — is read from cache; only the new messages are written, and only the tail is uncached.
        assert usage["cache_read_tokens"] == before_tail_tokens(before), n
        assert usage["cache_write_tokens"] == before_tail_tokens(now) - before_tail_tokens(before), n
        assert usage["input_tokens"] == tail_tokens(now), n


def test_memory_written_mid_session_shows_in_the_tail_and_keeps_the_prefix(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    marker = "cachetest-memory"
    turns = [wait_turn(api, post_turn(api, "s-mem", f"{marker} {n}: hello").json()["turn_id"]) for n in range(3)]
    written = api.post(
        "/v1/users/alice/memories", json={"kind": "preference", "key": "drink", "value": "Drinks smoky lapsang tea"}
    )
    assert written.status_code in (200, 201) and written.json()["action"] == "added"
    turns.append(wait_turn(api, post_turn(api, "s-mem", f"{marker} 3: what do I drink?").json()["turn_id"]))
    assert all(t["status"] == "done" for t in turns), turns
    before, after = (r.body for r in turn_calls(fake_llm, marker)[-2:])
    assert after["system"] == before["system"]  # the static prompt, "What You Know" included, unchanged
    assert "lapsang" not in after["system"][0]["text"]
    tail = engram_tail(after)
    assert "learned since this conversation's prompt was built" in tail and "drink: Drinks smoky lapsang tea" in tail
    assert turns[-1]["usage"]["cache_read_tokens"] == before_tail_tokens(before)


# --- the epoch rules, at the compiler --------------------------------------------------------------


def prepare(
    conn: Conn, session: dict[str, Any], *, max_delta: int = 10, persist: bool = True, turn_id: int | None = None
) -> TurnContext:
    return prepare_turn(
        conn,
        session=session,
        user_timezone=None,
        turn_id=turn_id,
        tools=default_registry().specs(),
        provider="anthropic",
        model="claude-sonnet-4-6",
        now=NOW,
        context_dir=None,
        relevant=[],
        epoch_max_delta=max_delta,
        persist_epoch=persist,
    )


def remember(conn: Conn, scope: Scope, key: str, value: str) -> None:
    assert store_memory(conn, scope, MemoryInput(key=key, value=value, kind="preference"), "api").action == "added"


def epochs(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM session_prompt_epochs").fetchone()
    assert row is not None
    return int(row["n"])


def test_what_you_know_is_frozen_until_a_rebuild_reason(conn: Conn) -> None:
    scope = make_scope(conn)
    remember(conn, scope, "city", "Lives in Lisbon")
    session = session_row(conn, scope)
    first = prepare(conn, session)
    assert first.knowledge is not None and first.knowledge.rebuilt == FIRST and "Lisbon" in first.static.text

    # A new memory: same static prompt, the memory in the tail.
    remember(conn, scope, "drink", "Drinks green tea")
    kept = prepare(conn, session)
    assert kept.knowledge is not None and kept.knowledge.rebuilt is None
    assert kept.static.text == first.static.text
    assert "drink: Drinks green tea" in compile_request(kept, [], iteration=0, now=NOW).tail()

    # More new memories than the bound: rebuilt, all in the static prompt, none in the tail.
    remember(conn, scope, "food", "Likes ramen")
    grown = prepare(conn, session, max_delta=1)
    assert grown.knowledge is not None and grown.knowledge.rebuilt == DELTA_BOUND
    assert "green tea" in grown.static.text and "ramen" in grown.static.text and not grown.knowledge.since

    conn.execute("UPDATE sessions SET compaction_count = compaction_count + 1 WHERE id = %s", (session["id"],))
    session = session_row(conn, scope)
    compacted = prepare(conn, session)
    assert compacted.knowledge is not None and compacted.knowledge.rebuilt == COMPACTED

    conn.execute("UPDATE users SET occupation = 'nurse' WHERE id = %s", (scope.user_id,))
    profile = prepare(conn, session)
    assert profile.knowledge is not None and profile.knowledge.rebuilt == PROMPT_CHANGED

    # A frozen memory that is no longer valid is not shown on: rebuilt without it.
    conn.execute("UPDATE memories SET valid_until = now() WHERE key = 'city' AND user_id = %s", (scope.user_id,))
    removed = prepare(conn, session)
    assert removed.knowledge is not None and removed.knowledge.rebuilt == MEMORY_CHANGED
    assert "Lisbon" not in removed.static.text
    again = prepare(conn, session)
    assert again.knowledge is not None and again.knowledge.rebuilt is None


def test_inspection_does_not_start_an_epoch(conn: Conn) -> None:
    scope = make_scope(conn)
    session = session_row(conn, scope)
    prepare(conn, session, persist=False)
    assert epochs(conn) == 0
    prepare(conn, session)
    assert epochs(conn) == 1
