"""What the stream shows and what the ledger counts: fence markers never reach SSE deltas, and every
LLM call is counted — also those of a turn that fails and of an extraction that loses its race."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis
from httpx_sse import connect_sse

from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import ensure_tenant
from shared.context.fences import strip_markers
from shared.infra import db
from shared.infra.config import Settings
from shared.infra.events import FINISHED_STREAM_TTL_SECONDS, TurnEventPublisher, stream_key
from shared.llm.factory import chat_provider
from shared.llm.types import ChatProvider, ChatRequest, ChatResult, DeltaCallback
from shared.pipeline.jobs import extract_session
from shared.turns.accept import submit_turn
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_turns import post_turn
from tests.support.services import TestServices

pytestmark = pytest.mark.integration


def stream(api: httpx.Client, turn_id: int) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    with connect_sse(api, "GET", f"/v1/turns/{turn_id}/events") as source:
        assert source.response.status_code == 200
        for sse in source.iter_sse():
            events.append((sse.event, json.loads(sse.data)))
            if sse.event in ("done", "error"):
                break
    return events


def test_sse_deltas_never_carry_fence_markers_even_split_across_deltas(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    # The fake streams word by word, so a marker with spaces inside arrives in several deltas.
    text = "Hello ⟦ F : 3fa9c2d17e0b : A ⟧ there.\n⟦F:0123456789ab:B⟧\nBye ⟦ F :forged⟧!"
    fake_llm.script(FakeReply(text=text, chunk_delay_s=0.01), match="hi, fenced stream")
    turn_id = post_turn(api, "s-fence", "hi, fenced stream").json()["turn_id"]
    events = stream(api, turn_id)
    deltas = [data["text"] for event, data in events if event == "delta"]
    assert len(deltas) > 3  # it did stream in pieces
    assert events[-1][0] == "done"
    stored = wait_turn(api, turn_id)["reply"]
    assert stored == strip_markers(text) == "Hello there.\n\nBye!"
    assert "".join(deltas) == stored
    assert not any("⟦" in d or "⟧" in d for d in deltas)


def test_a_failed_turn_still_counts_its_llm_calls(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    # The first call succeeds (and asks for a tool); the second is refused: the turn fails.
    fake_llm.script(
        FakeReply(text="Let me check.", tool_calls=[("current_time", {})]),
        FakeReply(status=400),
        match="What time is it?",
    )
    turn = wait_turn(api, post_turn(api, "s-fails", "What time is it?").json()["turn_id"])
    assert turn["status"] == "failed" and "400" in turn["error"]
    assert turn["llm_calls"]["chat"]["calls"] == 2
    assert turn["llm_calls"]["chat"]["input_tokens"] > 0  # the successful call's tokens are there
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT ok, session_id FROM llm_calls WHERE turn_id = %s ORDER BY id", (turn["turn_id"],)
        ).fetchall()
    assert [row["ok"] for row in rows] == [True, False]
    assert all(row["session_id"] == turn["session_id"] for row in rows)


class RivalWinsDuringTheCall:
    """A real provider; while its call is in flight another extraction marks the messages done."""

    def __init__(self, inner: ChatProvider, session_id: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.session_id = session_id

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        result = self.inner.chat(request, on_delta)
        with db.connection() as conn:
            conn.execute("UPDATE session_messages SET extracted_at = now() WHERE session_id = %s", (self.session_id,))
        return result


def test_an_extraction_that_loses_its_race_still_counts_its_llm_call(
    clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        turn = submit_turn(
            conn, tenant_id=tenant_id, session_key="race", user_external_id="alice", text="I live in Lisbon"
        ).turn
    session_id = turn["session_id"]
    fake_llm.script(FakeReply(text=json.dumps({"entities": [{"key": "user/city", "value": "Lives in Lisbon"}]})))
    settings = Settings(
        llm_provider="anthropic",
        anthropic_api_key="test-key",  # type: ignore[arg-type]
        anthropic_base_url=fake_llm.anthropic_base_url,
        llm_max_attempts=1,
    )
    provider = RivalWinsDuringTheCall(chat_provider(settings), session_id)

    outcome = extract_session(session_id, settings, provider=provider)

    assert outcome.skipped == "raced with another extraction" and outcome.changed_memory_ids == []
    assert len(fake_llm.requests) == 1
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT purpose, ok, output_tokens, user_id, tenant_id FROM llm_calls WHERE session_id = %s",
            (session_id,),
        ).fetchall()
        memories = conn.execute("SELECT count(*) AS n FROM memories").fetchone()
    assert [(r["purpose"], r["ok"]) for r in rows] == [("extraction", True)]
    assert rows[0]["output_tokens"] > 0 and rows[0]["tenant_id"] == tenant_id
    assert memories is not None and memories["n"] == 0  # the loser wrote nothing else


def _entries(client: Any, turn_id: int) -> list[tuple[str, dict[str, Any]]]:
    rows = client.xrange(stream_key(turn_id))
    return [(fields[b"event"].decode(), json.loads(fields[b"data"])) for _id, fields in rows]


def test_a_burst_of_deltas_is_written_in_one_round_trip_in_order(clean_state: TestServices) -> None:
    """Deltas within the batch window are held, then written together — each its own entry, in order —
    by the next other event or flush; nothing is held past them."""
    client = redis.Redis.from_url(clean_state.redis_url)
    events = TurnEventPublisher(client, 990001, batch_window=3600)  # everything after the first write is "soon"
    events.publish("delta", text="a")
    assert _entries(client, 990001) == [("delta", {"text": "a"})]  # the first delta goes out at once
    events.publish("delta", text="b")
    events.publish("delta", text="c")
    assert len(_entries(client, 990001)) == 1  # held
    events.publish("tool_call", id="t1", name="memory_search", arguments={})
    assert _entries(client, 990001) == [
        ("delta", {"text": "a"}),
        ("delta", {"text": "b"}),
        ("delta", {"text": "c"}),
        ("tool_call", {"id": "t1", "name": "memory_search", "arguments": {}}),
    ]
    events.publish("delta", text="d")
    events.flush()
    assert _entries(client, 990001)[-1] == ("delta", {"text": "d"})
    assert client.ttl(stream_key(990001)) > 0  # the stream still expires on its own
    unbatched = TurnEventPublisher(client, 990002, batch_window=0)
    for text in "xyz":
        unbatched.publish("delta", text=text)
    assert [data["text"] for _, data in _entries(client, 990002)] == ["x", "y", "z"]
    client.close()


def test_a_finished_turns_stream_leaves_redis_minutes_after_its_end(clean_state: TestServices) -> None:
    """A running turn's stream lives an hour past its last event; once it is done (or failed), five minutes:
    Redis holds the events of recent turns, not of every turn of the last hour."""
    client = redis.Redis.from_url(clean_state.redis_url)
    for turn_id, end in ((990003, "done"), (990004, "error")):
        events = TurnEventPublisher(client, turn_id, batch_window=0)
        events.publish("delta", text="Hi")
        assert client.ttl(stream_key(turn_id)) > FINISHED_STREAM_TTL_SECONDS  # still running
        events.publish(end, status=end)
        assert 0 < client.ttl(stream_key(turn_id)) <= FINISHED_STREAM_TTL_SECONDS
        assert [event for event, _ in _entries(client, turn_id)] == ["delta", end]  # the tail is still there
    client.close()
