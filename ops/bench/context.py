"""Prompt-cache benchmark: one user, one scripted session, and what the model provider sees.

    python -m ops.bench.context [--turns 50] [--memory-every 10] [--json]

Starts a private stack (ops/bench/stack.py) whose model is the fake Anthropic server of
ops/fake_llm.py, run in this process: that is what lets the script answer "what time is it"
questions with a `current_time` tool call (a second iteration, as a real model would) and read
back every request engram sent (`fake.requests`). The fake answers at once; turns are sent one
after another, each waiting for the previous to finish, as one person chatting would.

Two sessions, by two users: one with a fact written through the REST API every `--memory-every`
turns before the turn (POST /v1/users/{user}/memories; a tacit memory, so it belongs in "What You
Know" — which is frozen per session epoch, so it shows in the dynamic tail), and one without.

Reported, per session:
1. prefix stability: the share of model requests that repeat, byte for byte, what the previous
   request asked to have cached (tools, static prompt, history up to its last breakpoint); every
   change is attributed to the static prompt section it touched, or to the history; a change is
   expected only on the first call after a memory write (an epoch rebuilt past its delta bound);
2. prompt cache, by the fake's cache rules (ops/fake_cache.py; the model family's minimum, the TTL
   on the fake's clock): the share of input tokens read from cache (read / (uncached + read +
   write)) and the share of requests with a cache hit;
3. input tokens per turn, engram vs a naive agent that sends the same tools, static prompt and
   dynamic context (in the system prompt, after the static part, as a typical client does) with the
   complete transcript on every call, cached by the same rules with only the static breakpoint;
   and a cost-weighted ratio using Anthropic's cache prices (read 0.1x, write 1.25x);
plus LLM calls per turn and wall time. `--json` prints one JSON object last: the headline figures
(`cached_input_share`, `prefix_changes`, `unexpected_prefix_changes`, `input_tokens_per_turn`,
`naive_input_tokens_per_turn`, ...) of the session with memory writes, the same for the one
without under `without_memory_writes`, and the goals.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ops.bench.harness import BenchRun, bench_parser, emit, percentile, run_main
from ops.bench.stack import BenchError, LocalStack
from ops.client import EngramAPIError, EngramClient

# The fake's own accounting, so engram's side and the baseline are counted exactly as the fake
# counts (and bills) a prompt; these are private to the fake because only benchmarks need them.
from ops.fake_cache import AnthropicCache, PromptUsage, anthropic_parts, canonical, estimate_tokens, part_tokens
from ops.fake_llm import FakeLLM, FakeReply, Json, RecordedRequest, echo_reply, last_user_text
from shared.adapters.llm.anthropic_layout import build_messages
from shared.context.history import row_to_message
from shared.context.tail import OPEN as TAIL_OPEN

TERMINAL = ("done", "failed")
PREFIX_TARGET = 0.95
# Goals of issue 13: the share of input tokens read from cache over the session.
CACHED_SHARE_GOAL_WITH_MEMORY = 0.85
CACHED_SHARE_GOAL_WITHOUT_MEMORY = 0.90
# Anthropic's prices relative to uncached input: reads 0.1x, 5-minute cache writes 1.25x.
CACHE_READ_PRICE = 0.1
CACHE_WRITE_PRICE = 1.25
TRANSCRIPT_LIMIT = 1000  # the messages endpoint's maximum
BUCKET_TURNS = 10

# ---------------------------------------------------------------------------------------------------
# The script

# The script's texts are data, beside this module.
_SCRIPT = json.loads((Path(__file__).parent / "data" / "context_script.json").read_text(encoding="utf-8"))
# Everyday requests of varied length: one-liners, questions, and pasted drafts, because the
# history's growth per turn (what the naive baseline pays for again and again) depends on it.
USER_MESSAGES: tuple[str, ...] = tuple(_SCRIPT["user_messages"])
TIME_QUESTIONS: tuple[str, ...] = tuple(_SCRIPT["time_questions"])
TIME_EVERY = 8  # turns 3, 11, 19, ... ask for the time
TIME_PATTERN = re.compile(r"what time is it", re.IGNORECASE)

# Facts written through the REST API; tacit namespaces, so each one is shown in "What You Know".
MEMORIES: tuple[tuple[str, str, str], ...] = tuple((kind, key, text) for kind, key, text in _SCRIPT["memories"])

ASSISTANT_REPLIES: tuple[str, ...] = tuple(_SCRIPT["assistant_replies"])


def user_message(turn: int) -> str:
    """The user's text for 1-based `turn`: a time question every TIME_EVERY turns, else the next message."""
    if turn % TIME_EVERY == 3:
        return TIME_QUESTIONS[(turn // TIME_EVERY) % len(TIME_QUESTIONS)]
    return USER_MESSAGES[(turn - 1) % len(USER_MESSAGES)]


def _stable_index(text: str, size: int) -> int:
    # hash() is salted per process; the replies must not change from run to run.
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") % size


def _tool_result_text(message: Json) -> str | None:
    content = message.get("content")
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content")
            return inner if isinstance(inner, str) else json.dumps(inner)
    return None


def scripted_reply(body: Json) -> FakeReply:
    """The fake model: a `current_time` call for a time question, an answer after its result, else
    a canned reply picked by the user's text.

    Decided from the request itself rather than from a queue of scripted replies, so that a
    background call (extraction, summaries) arriving in between cannot take a reply meant for
    the turn."""
    if not is_turn_call(body):
        return echo_reply(body)
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    result = _tool_result_text(last)
    if result is not None:
        return FakeReply(text=f"It's {result}.")
    tools = {tool.get("name") for tool in body.get("tools") or []}
    text = last_user_text(body)
    if "current_time" in tools and TIME_PATTERN.search(text):
        return FakeReply(tool_calls=[("current_time", {})])
    return FakeReply(text=ASSISTANT_REPLIES[_stable_index(text, len(ASSISTANT_REPLIES))])


# ---------------------------------------------------------------------------------------------------
# Reading requests


def tail_text(body: Json) -> str | None:
    """The dynamic tail of an agent-loop call: the last block of its last message."""
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages else None
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        text = content[-1].get("text")
        if isinstance(text, str) and text.startswith(TAIL_OPEN):
            return text
    return None


def is_turn_call(body: Json) -> bool:
    """A call of the agent loop: it ends with the dynamic tail; background work (extraction,
    summaries) sends none."""
    return tail_text(body) is not None


def static_prefix(body: Json) -> str:
    """Tools, then the first system block: what precedes the cache breakpoint, in Anthropic's order."""
    tools = json.dumps(body.get("tools") or [], sort_keys=True, separators=(",", ":"))
    return tools + "\x00" + str(body["system"][0]["text"])


_STEERING = re.compile(r"<steering .*?</steering>", re.DOTALL)


def steering_tokens(body: Json) -> int:
    """Tokens of the steering notes in a request: engram puts them in the tail of the calls where
    they fire; they are never stored, so the transcript (and the naive baseline) does not have them."""
    return sum(estimate_tokens(note) for note in _STEERING.findall(tail_text(body) or ""))


def prompt_tokens(body: Json) -> int:
    """Input tokens of a request as the fake counts them (uncached + cache read + cache write)."""
    parts, _ = anthropic_parts(body)
    return sum(part_tokens(part) for part in parts)


def cached_prefix(body: Json) -> list[str]:
    """The request's blocks up to its last cache breakpoint, without the markers: what it asks to
    have cached, and what the next request must repeat byte for byte to read it."""
    parts, breakpoints = anthropic_parts(body)
    end = breakpoints[-1] + 1 if breakpoints else 0
    return [canonical({k: v for k, v in p.items() if k != "cache_control"}) for p in parts[:end]]


def keeps_prefix(before: Json, after: Json) -> bool:
    old = cached_prefix(before)
    parts, _ = anthropic_parts(after)
    new = [canonical({k: v for k, v in p.items() if k != "cache_control"}) for p in parts[: len(old)]]
    return new == old


_HEADING = re.compile(r"^#{1,6} ")


def _section_of(lines: list[str], index: int) -> str:
    """The markdown heading a line belongs to (the nearest one at or above it)."""
    for line in reversed(lines[: index + 1]):
        if _HEADING.match(line):
            return line
    return "(persona, before the first heading)"


def _first_non_blank(lines: list[str], start: int, end: int) -> int:
    return next((i for i in range(start, end) if lines[i].strip()), start)


def _clip(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class PrefixChange:
    request: int  # index among the session's turn calls
    turn: int
    iteration: int
    after_memory_write: bool
    tools_changed: bool
    sections: list[str]
    added: list[str]
    removed: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "turn": self.turn,
            "iteration": self.iteration,
            "after_memory_write": self.after_memory_write,
            "tools_changed": self.tools_changed,
            "sections": self.sections,
            "added": [_clip(line) for line in self.added[:3]],
            "removed": [_clip(line) for line in self.removed[:3]],
        }


def diff_static(old: Json, new: Json) -> tuple[bool, list[str], list[str], list[str]]:
    """(tools changed, sections touched, lines added, lines removed) between two requests' static prefixes."""
    tools_changed = (old.get("tools") or []) != (new.get("tools") or [])
    old_lines = str(old["system"][0]["text"]).splitlines()
    new_lines = str(new["system"][0]["text"]).splitlines()
    sections: list[str] = []
    added: list[str] = []
    removed: list[str] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        # Attribute by where the change lands: new lines by the new text, pure removals by the old;
        # from the first non-blank changed line, since a new section starts with the blank line
        # that separates it from the one above.
        if j2 > j1:
            section = _section_of(new_lines, _first_non_blank(new_lines, j1, j2))
        else:
            section = _section_of(old_lines, _first_non_blank(old_lines, i1, i2))
        if section not in sections:
            sections.append(section)
        removed.extend(old_lines[i1:i2])
        added.extend(new_lines[j1:j2])
    return tools_changed, sections, added, removed


# ---------------------------------------------------------------------------------------------------
# Running the session


@dataclass
class TurnRecord:
    number: int  # 1-based, within the measured session
    text: str
    turn_id: int
    status: str
    e2e_ms: float
    usage: dict[str, Any]
    error: str | None
    timings: dict[str, Any] = field(default_factory=dict)  # the worker's: run_ms, llm_ms, overhead_ms
    calls: list[RecordedRequest] = field(default_factory=list)  # this turn's agent-loop requests, in order
    background_calls: int = 0  # other model requests that arrived meanwhile
    memory_added: str | None = None  # key of the memory written through REST just before this turn


def _check(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        raise BenchError(
            f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}"
        )
    body: dict[str, Any] = response.json()
    return body


def add_memory(client: EngramClient, user_id: str, number: int) -> str:
    kind, key, value = MEMORIES[number % len(MEMORIES)]
    if number >= len(MEMORIES):  # more writes than facts: new keys, so each one is a new line
        key = f"{key}-{number // len(MEMORIES) + 1}"
    written = _check(client.http.post(f"/v1/users/{user_id}/memories", json={"kind": kind, "key": key, "value": value}))
    if written.get("action") != "added":
        raise BenchError(f"memory {key!r} was not added: {written.get('action')}")
    return f"{written['memory']['namespace']}/{key}"


def run_turn(client: EngramClient, session_key: str, user_id: str, text: str, timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        turn = client.submit_turn(session_key, user_id, text)
        turn_id = turn["turn_id"]
        while turn["status"] not in TERMINAL:
            if time.perf_counter() - started > timeout:
                raise BenchError(f"turn {turn_id} not finished after {timeout:.0f}s")
            turn = client.get_turn(turn_id, wait=30)
    except (EngramAPIError, httpx.HTTPError) as exc:
        raise BenchError(f"turn {text[:40]!r}: {type(exc).__name__}: {exc}") from exc
    turn["turn_id"] = turn_id
    turn["e2e_ms"] = (time.perf_counter() - started) * 1000
    return turn


def run_session(
    client: EngramClient,
    fake: FakeLLM,
    user_id: str,
    session_key: str,
    turns: int,
    memory_every: int,
    timeout: float,
) -> list[TurnRecord]:
    records: list[TurnRecord] = []
    memories = 0
    for number in range(1, turns + 1):
        memory = None
        if memory_every and number % memory_every == 0:
            memory = add_memory(client, user_id, memories)
            memories += 1
        # Turns run one at a time, so the requests recorded while this one ran are its own (and
        # any background call, which `is_turn_call` tells apart).
        seen = len(fake.requests)
        text = user_message(number)
        turn = run_turn(client, session_key, user_id, text, timeout)
        new = [r for r in fake.requests[seen:] if r.path == "/v1/messages"]
        calls = [r for r in new if is_turn_call(r.body)]
        records.append(
            TurnRecord(
                number=number,
                text=text,
                turn_id=turn["turn_id"],
                status=turn["status"],
                e2e_ms=turn["e2e_ms"],
                usage=turn.get("usage") or {},
                timings=turn.get("timings") or {},
                error=turn.get("error"),
                calls=calls,
                background_calls=len(new) - len(calls),
                memory_added=memory,
            )
        )
    return records


def fetch_transcript(client: EngramClient, session_key: str, user_id: str) -> list[dict[str, Any]]:
    body = _check(
        client.http.get(f"/v1/sessions/{session_key}/messages", params={"user_id": user_id, "limit": TRANSCRIPT_LIMIT})
    )
    messages: list[dict[str, Any]] = body["messages"]
    if len(messages) >= TRANSCRIPT_LIMIT:
        raise BenchError(f"the transcript has {TRANSCRIPT_LIMIT}+ messages; the baseline needs all of them")
    return messages


# ---------------------------------------------------------------------------------------------------
# The naive baseline


def baseline_bodies(records: list[TurnRecord], transcript: list[dict[str, Any]]) -> dict[int, list[Json]]:
    """Per turn number, the request a naive agent would send on each of the turn's calls, as a typical
    client lays it out: the same tools, the static system prompt with its cache breakpoint, the same
    dynamic context as a second system block (so the breakpoint is the only one: static-only
    caching), and every message of the transcript so far (all earlier turns, this turn's user
    message, and what this turn produced before this call) with no breakpoint."""
    rows = [r for r in transcript if r["role"] in ("user", "assistant", "tool")]
    out: dict[int, list[Json]] = {}
    for record in records:
        earlier = [row_to_message(r) for r in rows if r["turn_id"] is not None and r["turn_id"] < record.turn_id]
        own = [r for r in rows if r["turn_id"] == record.turn_id]
        users = [row_to_message(r) for r in own if r["role"] == "user"]
        produced = [r for r in own if r["role"] != "user"]
        # Each call starts where an assistant message of this turn starts.
        starts = [i for i, r in enumerate(produced) if r["role"] == "assistant"]
        if len(starts) != len(record.calls):
            raise BenchError(
                f"turn {record.number}: {len(record.calls)} model calls recorded, "
                f"{len(starts)} assistant messages stored"
            )
        bodies = []
        for call, start in zip(record.calls, starts, strict=True):
            history = earlier + users + [row_to_message(r) for r in produced[:start]]
            bodies.append(
                {
                    "model": call.body.get("model"),
                    "tools": call.body.get("tools"),
                    "system": [*call.body["system"], {"type": "text", "text": tail_text(call.body)}],
                    "messages": build_messages(tuple(history)),
                }
            )
        out[record.number] = bodies
    return out


# ---------------------------------------------------------------------------------------------------
# Figures


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def analyse(records: list[TurnRecord], transcript: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    calls = [(record, iteration, call) for record in records for iteration, call in enumerate(record.calls)]

    # 1. Prefix stability, request to request: is what the previous request asked to have cached (up
    # to its last breakpoint: tools, static prompt, history) repeated byte for byte? A change is
    # attributed to the static prompt's sections it touched, or to the history.
    changes: list[PrefixChange] = []
    static_changes = 0
    for index in range(1, len(calls)):
        (_, _, before), (record, iteration, after) = calls[index - 1], calls[index]
        static_same = static_prefix(before.body) == static_prefix(after.body)
        static_changes += not static_same
        if static_same and keeps_prefix(before.body, after.body):
            continue
        added: list[str] = []
        removed: list[str] = []
        if static_same:
            tools_changed, sections = False, ["(conversation history)"]
        else:
            tools_changed, sections, added, removed = diff_static(before.body, after.body)
        # A REST write lands between turns, so only a turn's first call can legitimately show it.
        expected = record.memory_added is not None and iteration == 0
        changes.append(PrefixChange(index, record.number, iteration, expected, tools_changed, sections, added, removed))
    comparisons = max(len(calls) - 1, 0)
    writes_between = sum(
        1 for i, (record, iteration, _) in enumerate(calls) if i and iteration == 0 and record.memory_added
    )
    unexpected = [c for c in changes if not c.after_memory_write]

    # 2. The fake's cache model, replayed over the session's calls in order: the per-request usage
    # the fake reported (its live cache also saw the warm-up, whose prefixes cannot match: fences
    # are per session). Cross-checked below against the usage engram recorded per turn.
    # The minimum cacheable length is the model family's; the TTL runs on the fake's clock at receipt.
    cache = AnthropicCache()
    usages = [cache.usage(call.body, call.received_at) for _, _, call in calls]
    read = sum(u.cache_read_tokens for u in usages)
    write = sum(u.cache_write_tokens for u in usages)
    uncached = sum(u.input_tokens for u in usages)
    total = read + write + uncached
    recorded = {
        key: sum(int(record.usage.get(key) or 0) for record in records)
        for key in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
    }
    matches = recorded == {"input_tokens": uncached, "cache_read_tokens": read, "cache_write_tokens": write}

    # 3. Tokens per turn against the naive baseline.
    naive = baseline_bodies(records, transcript)
    naive_cache = AnthropicCache()  # the same rules, its own entries (the naive client's prompts)
    naive_usages: list[PromptUsage] = [
        naive_cache.usage(body, call.received_at)
        for record in records
        for body, call in zip(naive[record.number], record.calls, strict=True)
    ]
    naive_read = sum(u.cache_read_tokens for u in naive_usages)
    naive_write = sum(u.cache_write_tokens for u in naive_usages)
    naive_prompt = sum(u.prompt_tokens for u in naive_usages)
    engram_per_turn = {r.number: sum(prompt_tokens(c.body) for c in r.calls) for r in records}
    naive_per_turn = {number: sum(prompt_tokens(b) for b in bodies) for number, bodies in naive.items()}
    engram_total, naive_total = sum(engram_per_turn.values()), sum(naive_per_turn.values())
    steering_total = sum(steering_tokens(call.body) for _, _, call in calls)
    cost_weighted = uncached + CACHE_READ_PRICE * read + CACHE_WRITE_PRICE * write

    buckets = []
    position = 0
    for first in range(0, len(records), BUCKET_TURNS):
        chunk = records[first : first + BUCKET_TURNS]
        n_calls = sum(len(r.calls) for r in chunk)
        chunk_usage = usages[position : position + n_calls]
        position += n_calls
        chunk_total = sum(u.prompt_tokens for u in chunk_usage)
        buckets.append(
            {
                "turns": f"{chunk[0].number}-{chunk[-1].number}",
                "calls": n_calls,
                "engram_tokens_per_turn": round(sum(engram_per_turn[r.number] for r in chunk) / len(chunk)),
                "naive_tokens_per_turn": round(sum(naive_per_turn[r.number] for r in chunk) / len(chunk)),
                "cache_read_share": _share(sum(u.cache_read_tokens for u in chunk_usage), chunk_total),
                "prefix_changes": sum(1 for c in changes if chunk[0].number <= c.turn <= chunk[-1].number),
            }
        )

    e2e = [r.e2e_ms for r in records]
    last = records[-1].number if records else 0
    naive_uncached = naive_prompt - naive_read - naive_write
    naive_cost = naive_uncached + CACHE_READ_PRICE * naive_read + CACHE_WRITE_PRICE * naive_write
    return {
        # The headline figures (issue 13): one flat object, the details follow.
        "cached_input_share": _share(read, total),
        "prefix_changes": len(changes),
        "unexpected_prefix_changes": len(unexpected),
        "input_tokens_per_turn": round(engram_total / len(records)) if records else None,
        "naive_input_tokens_per_turn": round(naive_total / len(records)) if records else None,
        "naive_cached_input_share": _share(naive_read, naive_prompt),
        "cost_weighted_vs_naive": _share(cost_weighted, naive_cost),
        "turns": len(records),
        "turns_done": sum(r.status == "done" for r in records),
        "memories_added": sum(r.memory_added is not None for r in records),
        "llm_calls": len(calls),
        "llm_calls_per_turn": round(len(calls) / len(records), 3) if records else None,
        "turns_with_tool_iteration": sum(len(r.calls) > 1 for r in records),
        "llm_calls_recorded_by_engram": sum(int(r.usage.get("llm_calls") or 0) for r in records),
        "background_llm_calls": sum(r.background_calls for r in records),
        "static_prefix": {
            "comparisons": comparisons,
            "identical": comparisons - len(changes),
            "identical_share": _share(comparisons - len(changes), comparisons),
            "target": PREFIX_TARGET,
            "meets_target": comparisons > 0 and (comparisons - len(changes)) / comparisons >= PREFIX_TARGET,
            "memory_writes_between_requests": writes_between,
            "static_prefix_changes": static_changes,
            "changes_after_memory_write": len(changes) - len(unexpected),
            "unexpected_changes": len(unexpected),
            # The best any layout can do when the prompt must show each new memory.
            "identical_share_ceiling": _share(comparisons - writes_between, comparisons),
            "identical_share_excluding_memory_writes": _share(
                comparisons - writes_between - len(unexpected), comparisons - writes_between
            ),
            "changes": [c.as_dict() for c in changes],
        },
        "cache": {
            "requests": len(usages),
            "requests_with_hit": sum(u.cache_read_tokens > 0 for u in usages),
            "request_hit_share": _share(sum(u.cache_read_tokens > 0 for u in usages), len(usages)),
            "input_tokens_total": total,
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "uncached_tokens": uncached,
            "token_cache_share": _share(read, total),
            "matches_usage_recorded_by_engram": matches,
        },
        "tokens_per_turn": {
            "engram_mean": round(engram_total / len(records)) if records else None,
            "naive_mean": round(naive_total / len(records)) if records else None,
            "ratio": _share(engram_total, naive_total),
            "engram_last_turn": engram_per_turn.get(last),
            "naive_last_turn": naive_per_turn.get(last),
            "engram_steering_mean": round(steering_total / len(records)) if records else None,
            "engram_total": engram_total,
            "naive_total": naive_total,
            "cost_weighted_engram": round(cost_weighted),
            "cost_weighted_naive": round(naive_cost),
            "naive_cache_read_tokens": naive_read,
            "naive_cache_write_tokens": naive_write,
        },
        "buckets": buckets,
        "wall_s": round(wall_s, 2),
        "turn_e2e_ms": {
            "p50": round(percentile(e2e, 50) or 0, 1),
            "p95": round(percentile(e2e, 95) or 0, 1),
            "max": round(max(e2e), 1) if e2e else None,
            "slowest_turn": max(records, key=lambda r: r.e2e_ms).number if records else None,
        },
        "worker_run_ms_p50": round(percentile([float(r.timings.get("run_ms") or 0) for r in records], 50) or 0, 1),
        "worker_overhead_ms_p50": round(
            percentile([float(r.timings.get("overhead_ms") or 0) for r in records], 50) or 0, 1
        ),
        "failed_turns": [{"turn": r.number, "error": r.error} for r in records if r.status != "done"],
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def render(summary: dict[str, Any], header: str) -> str:
    sp, cache, tok = summary["static_prefix"], summary["cache"], summary["tokens_per_turn"]
    verdict = "meets" if sp["meets_target"] else "BELOW"
    lines = [
        header,
        f"turns: {summary['turns_done']}/{summary['turns']} done in {summary['wall_s']:.2f} s "
        f"(per turn p50 {summary['turn_e2e_ms']['p50']:.0f} ms, p95 {summary['turn_e2e_ms']['p95']:.0f} ms, "
        f"max {summary['turn_e2e_ms']['max']:.0f} ms at turn {summary['turn_e2e_ms']['slowest_turn']})",
        f"LLM calls: {summary['llm_calls']} ({summary['llm_calls_per_turn']:.2f} per turn; "
        f"{summary['turns_with_tool_iteration']} turns with a tool iteration; engram's own count "
        f"{summary['llm_calls_recorded_by_engram']}; background calls {summary['background_llm_calls']})",
        f"memories added through REST: {summary['memories_added']}",
        "",
        "1. cached prefix (tools, static prompt, history up to the last breakpoint) repeated by the next request",
        f"   identical                          {sp['identical']:>5}/{sp['comparisons']:<5} "
        f"{_pct(sp['identical_share']):>8}   {verdict} target {_pct(sp['target'])}",
        f"   changes after a memory write       {sp['changes_after_memory_write']:>5}  "
        f"(memory writes between requests: {sp['memory_writes_between_requests']}; "
        f"static prompt changes: {sp['static_prefix_changes']})",
        f"   unexpected changes                 {sp['unexpected_changes']:>5}",
        f"   ceiling with these memory writes   {_pct(sp['identical_share_ceiling']):>11}",
        f"   identical, memory writes excluded  {_pct(sp['identical_share_excluding_memory_writes']):>11}",
    ]
    for change in sp["changes"]:
        why = "after memory write" if change["after_memory_write"] else "UNEXPECTED"
        tools = "; tools changed" if change["tools_changed"] else ""
        lines.append(
            f"   - turn {change['turn']:>3} call {change['iteration']}: {why}{tools}; "
            f"section(s) {', '.join(repr(s) for s in change['sections'])}"
        )
        lines.extend(f"       + {line}" for line in change["added"])
        lines.extend(f"       - {line}" for line in change["removed"])
    lines += [
        "",
        "2. prompt cache (the fake's model)",
        f"   requests with a cache hit          {cache['requests_with_hit']:>5}/{cache['requests']:<5} "
        f"{_pct(cache['request_hit_share']):>8}",
        f"   input tokens served from cache     {_pct(cache['token_cache_share']):>11}   "
        f"(read {cache['cache_read_tokens']}, write {cache['cache_write_tokens']}, "
        f"uncached {cache['uncached_tokens']}; total {cache['input_tokens_total']})",
        f"   matches usage engram recorded      {'yes' if cache['matches_usage_recorded_by_engram'] else 'NO'}",
        "",
        "3. input tokens per turn: engram vs naive (same system + tools + dynamic context in the system "
        "prompt, full transcript, static-only caching by the same rules)",
        f"   mean per turn                      {tok['engram_mean']:>8} vs {tok['naive_mean']:>8}   "
        f"ratio {tok['ratio']:.3f}",
        f"   naive: input served from cache     {_pct(summary['naive_cached_input_share']):>11}",
        f"   of which steering notes            {tok['engram_steering_mean']:>8}        -   (engram only)",
        f"   last turn                          {tok['engram_last_turn']:>8} vs {tok['naive_last_turn']:>8}",
        f"   cost-weighted (read {CACHE_READ_PRICE}x, write {CACHE_WRITE_PRICE}x)  "
        f"{tok['cost_weighted_engram']:>8} vs {tok['cost_weighted_naive']:>8}   "
        f"ratio {summary['cost_weighted_vs_naive']:.3f}  (session totals)",
        "",
        f"   {'turns':<9}{'calls':>6}{'engram tok/turn':>17}{'naive tok/turn':>16}{'cache read':>12}{'prefix chg':>12}",
    ]
    for b in summary["buckets"]:
        lines.append(
            f"   {b['turns']:<9}{b['calls']:>6}{b['engram_tokens_per_turn']:>17}{b['naive_tokens_per_turn']:>16}"
            f"{_pct(b['cache_read_share']):>12}{b['prefix_changes']:>12}"
        )
    for failed in summary["failed_turns"]:
        lines.append(f"failed turn {failed['turn']}: {failed['error']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.context", __doc__, keep=True)
    parser.add_argument("--turns", type=int, default=50, help="turns of the scripted session")
    parser.add_argument("--memory-every", type=int, default=10, help="write a memory before every Nth turn (0: never)")
    parser.add_argument("--worker-concurrency", type=int, default=2, help="Celery pool processes")
    parser.add_argument("--turn-timeout", type=float, default=120.0, help="give up on a turn after this many s")
    args = parser.parse_args(argv)
    if args.turns < 2:
        parser.error("--turns must be at least 2 (stability compares consecutive requests)")
    if args.memory_every < 0:
        parser.error("--memory-every must be 0 or more")
    return args


def warm_up(client: EngramClient, timeout: float) -> None:
    """Imports, pools and the embedding model load in the worker before the measured session; the
    warm-up user and session have their own static prompt (fences are per session), so they leave
    nothing in the cache that the session could hit."""
    add_memory(client, "warmup-user", len(MEMORIES) - 1)
    for text in ("Hello!", TIME_QUESTIONS[0]):
        turn = run_turn(client, f"warmup-{uuid.uuid4().hex[:8]}", "warmup-user", text, timeout)
        if turn["status"] != "done":
            raise BenchError(f"warm-up turn failed: {turn.get('error')}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    # In this process, not a subprocess: only in-process can the fake decide replies per request
    # (the tool iteration) and hand back what it received. It competes with this thread for the GIL,
    # which only matters for the wall time, not for the figures this benchmark is about.
    fake = FakeLLM()  # the cache rules of ops/fake_cache.py, the model family's minimum included
    fake.default = scripted_reply
    with BenchRun(keep=args.keep) as cleanup:
        cleanup.callback(fake.stop)
        fake.start()
        workdir = cleanup.workdir("engram-bench-context-")
        stack = LocalStack(workdir, args.worker_concurrency, llm_url=fake.anthropic_base_url)
        cleanup.callback(stack.stop)
        print(f"starting a private stack in {workdir} ...", file=sys.stderr, flush=True)
        api_key = stack.start()
        client = EngramClient(stack.url, api_key, timeout=30)
        # The measured run writes a memory every --memory-every turns; a second one, by another user,
        # writes none (the two goals differ). Each run's requests are its own: fences are per session.
        plans = [("bench-user", args.memory_every)]
        if args.memory_every:
            plans.append(("bench-user-quiet", 0))
        runs: list[dict[str, Any]] = []
        try:
            warm_up(client, args.turn_timeout)
            for user_id, every in plans:
                session_key = f"context-{uuid.uuid4().hex[:8]}"
                started = time.perf_counter()
                records = run_session(client, fake, user_id, session_key, args.turns, every, args.turn_timeout)
                wall_s = time.perf_counter() - started
                stack.check_alive()
                runs.append(analyse(records, fetch_transcript(client, session_key, user_id), wall_s))
        finally:
            client.close()
        summary = runs[0]
        quiet = runs[1] if len(runs) > 1 else runs[0]
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
        summary["config"] = {
            "turns": args.turns,
            "memory_every": args.memory_every,
            "worker_concurrency": args.worker_concurrency,
            "fake_llm": "in-process, 0 ms, scripted current_time calls",
            "cache_rules": "ops/fake_cache.py: model family minimum, 5 min TTL, 20-block lookback",
            "cpus": os.cpu_count(),
        }
        reports = []
        for run, (_, every) in zip(runs, plans, strict=True):
            header = (
                f"engram context benchmark: 1 user, {args.turns} turns, "
                + (f"a memory every {every} turns" if every else "no memory writes")
                + f"; fake Anthropic in-process (0 ms); worker x{args.worker_concurrency}; {os.cpu_count()} CPUs"
            )
            reports.append(render(run, header))
        emit("\n\n".join(reports) + "\n", summary, args.json)
        complete = all(run["turns_done"] == run["turns"] for run in runs)
        cleanup.keep = cleanup.keep or not complete
        return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
