"""Prompt-cache benchmark: scripted sessions on a private stack whose model is the fake Anthropic server, in this
process to read back every request: prefix stability, cache reads by ops/fake_cache.py's rules, input tokens."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ops.bench.harness import BenchRun, bench_parser, distribution, emit, outline, ratio, run_main
from ops.bench.stack import BenchError
from ops.bench.turns import wait_turn
from ops.client import EngramAPIError, EngramClient

# The fake's own accounting, so engram's side is counted exactly as the fake bills a prompt.
from ops.fake_cache import AnthropicCache, anthropic_parts, canonical, part_tokens
from ops.fake_llm import FakeLLM, FakeReply, Json, RecordedRequest, echo_reply, last_user_text
from shared.context.tail import OPEN as TAIL_OPEN

PREFIX_TARGET = 0.95
# Goals of issue 13: the share of input tokens read from cache over the session.
CACHED_SHARE_GOAL_WITH_MEMORY = 0.85
CACHED_SHARE_GOAL_WITHOUT_MEMORY = 0.90
TIME_EVERY = 8  # turns 3, 11, 19, ... ask for the time
TIME_PATTERN = re.compile(r"what time is it", re.IGNORECASE)
_SCRIPT = json.loads((Path(__file__).parent / "data" / "context_script.json").read_text(encoding="utf-8"))
USER_MESSAGES: tuple[str, ...] = tuple(_SCRIPT["user_messages"])
TIME_QUESTIONS: tuple[str, ...] = tuple(_SCRIPT["time_questions"])
MEMORIES: tuple[tuple[str, str, str], ...] = tuple((kind, key, text) for kind, key, text in _SCRIPT["memories"])
ASSISTANT_REPLIES: tuple[str, ...] = tuple(_SCRIPT["assistant_replies"])


def user_message(turn: int) -> str:
    """The user's text for 1-based `turn`: a time question every TIME_EVERY turns, else the next message."""
    if turn % TIME_EVERY == 3:
        return TIME_QUESTIONS[(turn // TIME_EVERY) % len(TIME_QUESTIONS)]
    return USER_MESSAGES[(turn - 1) % len(USER_MESSAGES)]


def tail_text(body: Json) -> str | None:
    """The dynamic tail of an agent-loop call (the last block of its last message); background work sends none."""
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages else None
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        text = content[-1].get("text")
        if isinstance(text, str) and text.startswith(TAIL_OPEN):
            return text
    return None


def scripted_reply(body: Json) -> FakeReply:
    """A `current_time` call for a time question, an answer after its result, else a canned reply picked by
    the user's text: decided from the request itself, so a background call in between takes no turn's reply."""
    if tail_text(body) is None:
        return echo_reply(body)
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages else None
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content")
            return FakeReply(text=f"It's {inner if isinstance(inner, str) else json.dumps(inner)}.")
    text = last_user_text(body)
    if "current_time" in {tool.get("name") for tool in body.get("tools") or []} and TIME_PATTERN.search(text):
        return FakeReply(tool_calls=[("current_time", {})])
    # hash() is salted per process; the replies must not change from run to run.
    index = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") % len(ASSISTANT_REPLIES)
    return FakeReply(text=ASSISTANT_REPLIES[index])


def _blocks(body: Json, end: int | None = None) -> list[str]:
    parts, _ = anthropic_parts(body)
    return [canonical({k: v for k, v in p.items() if k != "cache_control"}) for p in parts[:end]]


def keeps_prefix(before: Json, after: Json) -> bool:
    """Whether `after` repeats, byte for byte, `before`'s blocks up to its last cache breakpoint."""
    breakpoints = anthropic_parts(before)[1]
    old = _blocks(before, breakpoints[-1] + 1 if breakpoints else 0)
    return _blocks(after, len(old)) == old


def static_prefix(body: Json) -> str:
    """Tools, then the first system block: what precedes the static cache breakpoint."""
    return json.dumps(body.get("tools") or [], sort_keys=True) + "\x00" + str(body["system"][0]["text"])


@dataclass
class TurnRecord:
    number: int  # 1-based
    turn: dict[str, Any]  # as the API returned it when done, with the client's e2e_ms
    calls: list[RecordedRequest]  # this turn's agent-loop requests, in order
    memory_added: bool  # a memory was written through REST just before this turn


def add_memory(client: EngramClient, user_id: str, number: int) -> None:
    kind, key, value = MEMORIES[number % len(MEMORIES)]
    if number >= len(MEMORIES):  # more writes than facts: new keys, so each one is a new line
        key = f"{key}-{number // len(MEMORIES) + 1}"
    response = client.http.post(f"/v1/users/{user_id}/memories", json={"kind": kind, "key": key, "value": value})
    if response.status_code >= 400 or response.json().get("action") != "added":
        raise BenchError(f"memory {key!r} was not added: {response.status_code} {response.text}")


def run_turn(client: EngramClient, session_key: str, user_id: str, text: str, timeout: float) -> dict[str, Any]:
    try:
        turn, _, e2e_s = wait_turn(client, session_key, user_id, text, timeout)
    except (EngramAPIError, httpx.HTTPError) as exc:
        raise BenchError(f"turn {text[:40]!r}: {type(exc).__name__}: {exc}") from exc
    return {**turn, "e2e_ms": e2e_s * 1000}


def run_session(
    client: EngramClient, fake: FakeLLM, user_id: str, session_key: str, turns: int, memory_every: int, timeout: float
) -> list[TurnRecord]:
    records: list[TurnRecord] = []
    for number in range(1, turns + 1):
        memory = bool(memory_every) and number % memory_every == 0
        if memory:
            add_memory(client, user_id, number // memory_every - 1)
        # Turns run one at a time, so the agent-loop requests recorded while this one ran are its own.
        seen = len(fake.requests)
        turn = run_turn(client, session_key, user_id, user_message(number), timeout)
        calls = [r for r in fake.requests[seen:] if r.path == "/v1/messages" and tail_text(r.body) is not None]
        records.append(TurnRecord(number, turn, calls, memory))
    return records


def analyse(records: list[TurnRecord], wall_s: float) -> dict[str, Any]:
    calls = [(record, iteration, call) for record in records for iteration, call in enumerate(record.calls)]
    # 1. Prefix stability, request to request. A REST write lands between turns, so only a turn's first
    # call can legitimately show it.
    changes = []
    for (_, _, before), (record, iteration, after) in itertools.pairwise(calls):
        if static_prefix(before.body) != static_prefix(after.body) or not keeps_prefix(before.body, after.body):
            after_write = record.memory_added and iteration == 0
            changes.append({"turn": record.number, "call": iteration, "after_memory_write": after_write})
    comparisons = max(len(calls) - 1, 0)
    unexpected = sum(not c["after_memory_write"] for c in changes)

    # 2. The fake's cache rules replayed over the session's calls in order (its live cache also saw the
    # warm-up, whose prefixes cannot match: fences are per session).
    cache = AnthropicCache()
    usages = [cache.usage(call.body, call.received_at) for _, _, call in calls]
    read = sum(u.cache_read_tokens for u in usages)
    write = sum(u.cache_write_tokens for u in usages)
    uncached = sum(u.input_tokens for u in usages)
    turns = len(records) or 1
    identical = comparisons - len(changes)
    return {
        "cached_input_share": ratio(read, read + write + uncached, 4),
        "prefix_changes": len(changes),
        "unexpected_prefix_changes": unexpected,
        "input_tokens_per_turn": round(
            sum(part_tokens(p) for *_, c in calls for p in anthropic_parts(c.body)[0]) / turns
        ),
        "turns": len(records),
        "turns_done": sum(r.turn["status"] == "done" for r in records),
        "memories_added": sum(r.memory_added for r in records),
        "llm_calls": len(calls),
        "llm_calls_per_turn": round(len(calls) / turns, 3),
        "turns_with_tool_iteration": sum(len(r.calls) > 1 for r in records),
        "static_prefix": {
            "comparisons": comparisons,
            "identical_share": ratio(identical, comparisons, 4),
            "target": PREFIX_TARGET,
            "meets_target": comparisons > 0 and identical / comparisons >= PREFIX_TARGET,
            "changes": changes,
        },
        "cache": {
            "requests": len(usages),
            "requests_with_hit": sum(u.cache_read_tokens > 0 for u in usages),
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "uncached_tokens": uncached,
        },
        "wall_s": round(wall_s, 2),
        "turn_e2e_ms": distribution([r.turn["e2e_ms"] for r in records], (50, 95)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.context", __doc__, keep=True)
    parser.add_argument("--turns", type=int, default=50, help="turns of the scripted session")
    parser.add_argument("--memory-every", type=int, default=10, help="write a memory before every Nth turn (0: never)")
    parser.add_argument("--worker-concurrency", type=int, default=2, help="Celery pool processes")
    parser.add_argument("--turn-timeout", type=float, default=120.0, help="give up on a turn after this many s")
    args = parser.parse_args(argv)
    if args.turns < 2 or args.memory_every < 0:
        parser.error("--turns must be at least 2 (stability compares consecutive requests), --memory-every 0 or more")
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    # The fake runs in this process: only so can it decide replies per request and hand back what it got.
    with BenchRun(keep=args.keep) as cleanup:
        fake = cleanup.enter_context(FakeLLM())
        fake.default = scripted_reply
        stack, api_key = cleanup.stack(
            "engram-bench-context-", args.worker_concurrency, llm_url=fake.anthropic_base_url
        )
        client = EngramClient(stack.url, api_key, timeout=30)
        runs: list[dict[str, Any]] = []
        try:
            # Imports, pools and the embedding model load before the measured sessions; the warm-up
            # session's static prompt is its own (fences are per session), so it leaves nothing to hit.
            add_memory(client, "warmup-user", len(MEMORIES) - 1)
            for text in ("Hello!", TIME_QUESTIONS[0]):
                turn = run_turn(client, f"warmup-{uuid.uuid4().hex[:8]}", "warmup-user", text, args.turn_timeout)
                if turn["status"] != "done":
                    raise BenchError(f"warm-up turn failed: {turn.get('error')}")
            # A second user writes no memories (the two goals differ); fences are per session.
            plans = [("bench-user", args.memory_every)] + ([("bench-user-quiet", 0)] if args.memory_every else [])
            for user_id, every in plans:
                session_key = f"context-{uuid.uuid4().hex[:8]}"
                started = time.perf_counter()
                records = run_session(client, fake, user_id, session_key, args.turns, every, args.turn_timeout)
                wall_s = time.perf_counter() - started
                stack.check_alive()
                runs.append(analyse(records, wall_s))
        finally:
            client.close()
        summary, quiet = runs[0], runs[-1]
        summary["cached_input_share_without_memory_writes"] = quiet["cached_input_share"]
        summary["unexpected_prefix_changes_without_memory_writes"] = quiet["unexpected_prefix_changes"]
        summary["goals"] = {
            "cached_input_share_with_memory_writes": CACHED_SHARE_GOAL_WITH_MEMORY,
            "cached_input_share_without_memory_writes": CACHED_SHARE_GOAL_WITHOUT_MEMORY,
            "met": (summary["cached_input_share"] or 0) >= CACHED_SHARE_GOAL_WITH_MEMORY
            and (quiet["cached_input_share"] or 0) >= CACHED_SHARE_GOAL_WITHOUT_MEMORY
            and summary["unexpected_prefix_changes"] == 0
            and quiet["unexpected_prefix_changes"] == 0,
        }
        if len(runs) > 1:
            summary["without_memory_writes"] = quiet
        summary["config"] = {"turns": args.turns, "memory_every": args.memory_every, "cpus": os.cpu_count()}
        title = f"engram context benchmark: 1 user, {args.turns} turns, a memory every {args.memory_every} turns"
        emit(outline(title, summary), summary, args.json)
        complete = all(run["turns_done"] == run["turns"] for run in runs)
        cleanup.keep = cleanup.keep or not complete
        return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
