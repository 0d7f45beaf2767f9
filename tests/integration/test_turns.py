"""A chat turn end to end: HTTP gateway → Postgres → Celery worker → fake LLM (real SDKs) → reply."""

from __future__ import annotations

import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from ops.fake_llm import FakeLLM, FakeReply, RecordedRequest, engram_tail
from shared.infra import db
from shared.turns.accept import ensure_session, ensure_user
from tests.conftest import CeleryStack, wait_turn

pytestmark = pytest.mark.integration


def post_turn(api: httpx.Client, session: str, text: str, user: str = "alice", **headers: str) -> httpx.Response:
    return api.post(f"/v1/sessions/{session}/turns", json={"user_id": user, "text": text}, headers=headers)


def user_texts(request: RecordedRequest) -> list[str]:
    """The user-authored texts of a recorded request, in order (both wire formats)."""
    texts = []
    for message in request.body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            # engram's dynamic tail travels as the last text block: not something the user wrote.
            texts.extend(
                block["text"]
                for block in content
                if block.get("type") == "text" and not block["text"].startswith("<turn-context>")
            )
    return texts


def count(table: str) -> int:
    with db.connection() as conn:
        row = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()
    assert row is not None
    return int(row["n"])


def test_turn_end_to_end_with_anthropic(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    fake_llm.script(FakeReply(text="Hello Alice, nice to meet you."), match="Hi, I am Alice.")
    accepted = post_turn(api, "s1", "Hi, I am Alice.")
    assert accepted.status_code == 202
    body = accepted.json()
    assert body["status"] == "queued" and body["turn_id"] > 0 and body["session_id"] > 0

    turn = wait_turn(api, body["turn_id"])
    assert turn["status"] == "done", turn
    assert turn["reply"] == "Hello Alice, nice to meet you."
    assert turn["usage"]["llm_calls"] == 1 and turn["usage"]["provider"] == "anthropic"
    assert turn["usage"]["output_tokens"] > 0
    # First request writes the cached static prefix; usage records it.
    assert turn["usage"]["cache_write_tokens"] > 0
    assert turn["timings"]["llm_ms"] >= 0 and turn["timings"]["run_ms"] >= turn["timings"]["llm_ms"]

    (request,) = fake_llm.requests_matching("Hi, I am Alice.")
    assert request.format == "anthropic"
    (system,) = request.body["system"]  # the static prompt, with the first cache breakpoint
    assert system["cache_control"] == {"type": "ephemeral"} and "Current date and time" not in system["text"]
    assert "Current date and time" in engram_tail(request.body)  # the dynamic context comes last
    assert user_texts(request) == ["Hi, I am Alice."]

    history = api.get("/v1/sessions/s1/messages", params={"user_id": "alice"}).json()["messages"]
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "Hi, I am Alice."),
        ("assistant", "Hello Alice, nice to meet you."),
    ]


def test_second_turn_reads_cache_and_sees_history(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    fake_llm.script(FakeReply(text="First."), FakeReply(text="Second."), match="turn one of s1")
    first = wait_turn(api, post_turn(api, "s1", "turn one of s1").json()["turn_id"])
    second = wait_turn(api, post_turn(api, "s1", "turn two of s1").json()["turn_id"])
    assert (first["reply"], second["reply"]) == ("First.", "Second.")
    assert second["usage"]["cache_read_tokens"] > 0  # the static prefix was byte-identical
    last = fake_llm.requests_matching("turn one of s1")[-1]
    assert [m["role"] for m in last.body["messages"]] == ["user", "assistant", "user"]


def test_turn_end_to_end_with_openai(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM
) -> None:
    celery_stack.ensure("openai")
    fake_llm.script(FakeReply(text="Hi from an OpenAI-compatible model."), match="hello from the openai test")
    turn = wait_turn(api, post_turn(api, "s-openai", "hello from the openai test").json()["turn_id"])
    assert turn["status"] == "done", turn
    assert turn["reply"] == "Hi from an OpenAI-compatible model."
    assert turn["usage"]["provider"] == "openai"
    (request,) = fake_llm.requests_matching("hello from the openai test")
    assert request.format == "openai" and request.body["stream"] is True
    roles = [m["role"] for m in request.body["messages"]]
    assert roles == ["system", "user"]  # the dynamic context ends the user's message
    assert request.body["messages"][-1]["content"].endswith(engram_tail(request.body))


def test_sse_stream_delivers_tokens_in_order(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    text = "one two three four five six seven eight nine ten"
    fake_llm.script(FakeReply(text=text, delay_s=0.5, chunk_delay_s=0.02), match="count to ten")
    turn_id = post_turn(api, "s-sse", "count to ten").json()["turn_id"]
    events: list[tuple[str, dict[str, Any]]] = []
    with connect_sse(api, "GET", f"/v1/turns/{turn_id}/events") as source:
        assert source.response.status_code == 200
        for sse in source.iter_sse():
            events.append((sse.event, json.loads(sse.data)))
            if sse.event in ("done", "error"):
                break
    deltas = [data["text"] for event, data in events if event == "delta"]
    assert len(deltas) > 5  # streamed in pieces, not one blob
    assert "".join(deltas) == text
    assert events[-1][0] == "done" and events[-1][1]["reply"] == text


def test_sse_after_completion_still_ends_with_done(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    fake_llm.script(FakeReply(text="already finished"), match="hi, late listener")
    turn_id = post_turn(api, "s-late", "hi, late listener").json()["turn_id"]
    assert wait_turn(api, turn_id)["status"] == "done"
    with connect_sse(api, "GET", f"/v1/turns/{turn_id}/events") as source:
        events = [(sse.event, json.loads(sse.data)) for sse in source.iter_sse()]
    assert "".join(d["text"] for e, d in events if e == "delta") == "already finished"
    assert events[-1][0] == "done"


def test_tool_call_loop(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        FakeReply(text="Let me check.", tool_calls=[("current_time", {"timezone": "Europe/Lisbon"})]),
        FakeReply(text="It is morning in Lisbon."),
        match="What time is it in Lisbon?",
    )
    turn = wait_turn(api, post_turn(api, "s-tool", "What time is it in Lisbon?").json()["turn_id"])
    assert turn["status"] == "done", turn
    assert turn["reply"] == "Let me check.\n\nIt is morning in Lisbon."
    assert turn["usage"]["llm_calls"] == 2

    first, second = fake_llm.requests_matching("What time is it in Lisbon?")
    names = [tool["name"] for tool in first.body["tools"]]
    assert "current_time" in names and "memory_search" in names and names == sorted(names)
    tool_result = second.body["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result"
    assert "Europe/Lisbon" in tool_result["content"] or "Europe/Lisbon" in json.dumps(tool_result["content"])

    history = api.get("/v1/sessions/s-tool/messages", params={"user_id": "alice"}).json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["tool_calls"][0]["name"] == "current_time"
    assert history[2]["tool_results"]["is_error"] is False


def test_tool_loop_stops_at_max_iterations(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    # A model that asks for a tool forever is cut off; the last call offers no tools.
    fake_llm.default = lambda body: (
        FakeReply(text="done looping") if not body.get("tools") else FakeReply(tool_calls=[("current_time", {})])
    )
    turn = wait_turn(api, post_turn(api, "s-loop", "loop until cut off").json()["turn_id"])
    assert turn["status"] == "done"
    assert turn["usage"]["llm_calls"] == 8  # ENGRAM_MAX_ITERATIONS default
    assert turn["reply"] == "done looping"
    assert "tools" not in fake_llm.requests_matching("loop until cut off")[-1].body


def test_turns_of_one_session_run_in_order_while_another_session_proceeds(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    def slow_for_a(body: dict[str, Any]) -> FakeReply:
        text = json.dumps(body["messages"][-1])
        return FakeReply(text="reply", delay_s=0.6 if "A-" in text else 0.0)

    fake_llm.default = slow_for_a
    a_ids: list[int] = []

    for i in range(5):
        accepted = post_turn(api, "session-a", f"A-{i}")
        assert accepted.status_code == 202, accepted.text
        a_ids.append(accepted.json()["turn_id"])
    b_accepted = post_turn(api, "session-b", "B-0", user="bob")
    assert b_accepted.status_code == 202, b_accepted.text
    b_id = b_accepted.json()["turn_id"]

    a_turns = [wait_turn(api, turn_id) for turn_id in a_ids]
    b_turn = wait_turn(api, b_id)
    assert all(t["status"] == "done" for t in [*a_turns, b_turn])
    # One at a time, in the order sent: each starts after the previous one finished.
    for earlier, later in itertools.pairwise(a_turns):
        assert later["started_at"] >= earlier["finished_at"]
    # Session B did not wait for A's queue to drain.
    assert b_turn["finished_at"] < a_turns[-1]["finished_at"]
    # Each A turn saw exactly the user messages up to its own, never a later one.
    a_requests = [r for r in fake_llm.requests if any(t.startswith("A-") for t in user_texts(r))]
    assert [user_texts(r) for r in a_requests] == [[f"A-{j}" for j in range(i + 1)] for i in range(5)]


def test_idempotency_key_returns_the_original_turn(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    first = post_turn(api, "s-idem", "hello once", **{"Idempotency-Key": "key-1"})
    again = post_turn(api, "s-idem", "hello once", **{"Idempotency-Key": "key-1"})
    assert first.status_code == again.status_code == 202
    assert again.json()["turn_id"] == first.json()["turn_id"]
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert wait_turn(api, first.json()["turn_id"])["status"] == "done"
    assert count("turns") == 1
    assert count("session_messages") == 2  # one user message, one reply

    conflict = post_turn(api, "s-idem", "something else", **{"Idempotency-Key": "key-1"})
    assert conflict.status_code == 409 and "Idempotency-Key" in conflict.json()["detail"]
    assert count("turns") == 1


def test_concurrent_requests_with_one_idempotency_key_make_one_turn(api: httpx.Client, workers: CeleryStack) -> None:
    start = threading.Barrier(6)

    def send(_: int) -> httpx.Response:
        start.wait()
        return post_turn(api, "s-race", "same", **{"Idempotency-Key": "race"})

    with ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(send, range(6)))
    assert [r.status_code for r in responses] == [202] * 6, [r.text for r in responses]
    assert len({r.json()["turn_id"] for r in responses}) == 1
    # Exactly one request created the turn; the others were told they got the original.
    assert sorted(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == [False] + [True] * 5
    assert count("turns") == 1
    # Finished here, not under the next test's truncate (which it would deadlock with or outlive).
    assert wait_turn(api, responses[0].json()["turn_id"])["status"] == "done"


def _wait_for_a_lock_wait(turn_id: int, workers: CeleryStack, fake_llm: FakeLLM, timeout: float = 60) -> None:
    """Until some backend (the worker finishing its turn) waits on a row lock. A turn that ends first
    can never wait: fail at once, saying how it ended."""
    deadline = time.monotonic() + timeout
    with db.connect(autocommit=True) as watcher:
        while True:
            row = watcher.execute(
                "SELECT count(*) AS n FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            if row is not None and row["n"] > 0:
                return
            turn = watcher.execute("SELECT status, attempts, error FROM turns WHERE id = %s", (turn_id,)).fetchone()
            ended = turn is not None and turn["status"] in ("done", "failed")
            if ended or time.monotonic() >= deadline:
                activity = watcher.execute(
                    "SELECT pid, state, wait_event_type, wait_event, left(query, 80) AS query FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchall()
                log_tail = workers.worker.log_path.read_text(errors="replace")[-4000:] if workers.worker else ""
                raise AssertionError(
                    "the worker never waited on the session row: "
                    f"turn {dict(turn) if turn else None}, "
                    f"{len(fake_llm.requests_matching('deadlock probe'))} model request(s), "
                    f"backends {[dict(a) for a in activity]}\nworker log tail:\n{log_tail}"
                )
            time.sleep(0.05)


def _wait_for_model_request(text: str, fake_llm: FakeLLM, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not fake_llm.requests_matching(text):
        assert time.monotonic() < deadline, f"no model request for {text!r}"
        time.sleep(0.02)


def test_a_request_holding_the_session_does_not_deadlock_with_the_worker_finishing_a_turn(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    """A request that lost an Idempotency-Key race holds the session row (ensure_session) and then inserts
    the turn with the same key, which waits on that turn's row if someone holds it. The worker finishing
    the turn takes the session row first, so it never holds the turn while waiting for the session: no
    deadlock, no 503 for the request, no second (paid) model call for the turn."""
    # The reply is held until the request below holds the session: otherwise a fast worker may finish the
    # turn before the request takes the row, and nothing is ever contended.
    reply_due = threading.Event()
    fake_llm.script(FakeReply(text="finished", hold=reply_due), match="deadlock probe")
    accepted = post_turn(api, "s-probe", "deadlock probe", **{"Idempotency-Key": "probe"})
    assert accepted.status_code == 202
    turn_id = accepted.json()["turn_id"]
    _wait_for_model_request("deadlock probe", fake_llm)  # the worker has claimed the turn and is in its call
    with db.connection() as request:
        tenant_id = request.execute("SELECT tenant_id FROM turns WHERE id = %s", (turn_id,)).fetchone()["tenant_id"]  # type: ignore[index]
        user_id = ensure_user(request, tenant_id, "alice")
        session_id = ensure_session(request, tenant_id, user_id, "s-probe")  # the session row is ours now
        reply_due.set()
        _wait_for_a_lock_wait(turn_id, workers, fake_llm)  # the worker got its reply and is finishing the turn
        request.execute("SET LOCAL lock_timeout = '60s'")
        lost = request.execute(
            """INSERT INTO turns (tenant_id, user_id, session_id, idempotency_key, request_hash)
               VALUES (%s, %s, %s, 'probe', 'x')
               ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
               RETURNING id""",
            (tenant_id, user_id, session_id),
        ).fetchone()
        assert lost is None  # the key is taken: the request replays the first turn
    turn = wait_turn(api, turn_id)
    assert turn["status"] == "done" and turn["reply"] == "finished"
    assert len(fake_llm.requests_matching("deadlock probe")) == 1


def test_failed_llm_call_marks_turn_failed_with_reason(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    fake_llm.script(FakeReply(status=401), match="hi, this call fails")
    turn = wait_turn(api, post_turn(api, "s-fail", "hi, this call fails").json()["turn_id"])
    assert turn["status"] == "failed"
    assert "401" in turn["error"]
    assert len(fake_llm.requests_matching("hi, this call fails")) == 1  # 4xx is not retried
    history = api.get("/v1/sessions/s-fail/messages", params={"user_id": "alice"}).json()["messages"]
    assert [m["role"] for m in history] == ["user"]


def test_rate_limited_call_is_retried(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        FakeReply(status=429, headers={"retry-after": "0.1"}), FakeReply(text="after retry"), match="hi, rate limited"
    )
    turn = wait_turn(api, post_turn(api, "s-429", "hi, rate limited").json()["turn_id"])
    assert turn["status"] == "done" and turn["reply"] == "after retry"
    assert len(fake_llm.requests_matching("hi, rate limited")) == 2


def test_sse_resumes_after_last_event_id(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    fake_llm.script(FakeReply(text="alpha beta gamma delta epsilon"), match="go, resume test")
    turn_id = post_turn(api, "s-resume", "go, resume test").json()["turn_id"]
    assert wait_turn(api, turn_id)["status"] == "done"
    with connect_sse(api, "GET", f"/v1/turns/{turn_id}/events") as source:
        everything = [(sse.id, sse.event, json.loads(sse.data)) for sse in source.iter_sse()]
    resume_after = everything[1][0]
    with connect_sse(api, "GET", f"/v1/turns/{turn_id}/events", headers={"Last-Event-ID": resume_after}) as source:
        rest = [(sse.id, sse.event, json.loads(sse.data)) for sse in source.iter_sse()]
    assert rest == everything[2:]
