"""Background memory pipeline under load on `engram up`'s process layout, a fake model's extractions keyed by each
message's reference token ("ref pq…") to trace every fact. Figures: docs/benchmarks.md, "Background pipeline"."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from psycopg.rows import dict_row

from ops.bench.harness import BenchRun, bench_parser, distribution, emit, outline, ratio, run_main
from ops.bench.stack import BenchError, up_workers, wait_until
from ops.fake_llm import FakeLLM, FakeReply, Json, echo_reply, last_user_text
from shared.pipeline.memory_prompt import TASK_BOTH, TASK_SUMMARY
from shared.queueing.queues import QUEUES

# The load: the fake model's latency, the mean think time while chatting (below the debounce) and the mean idle
# pause (above it), a debounce clearly longer than a turn takes on a small machine, and a compaction threshold
# that every session crosses a few times.
LLM_LATENCY_S, THINK_S, DEBOUNCE_S, COMPACTION_TOKENS = 0.05, (0.7, 15.0), 5.0, 1500
SEED, TURN_TIMEOUT_S, DRAIN_TIMEOUT_S, POLL_S, USER_PREFIX = 7, 180.0, 180.0, 0.2, "pipe-"
# Kombu's Redis transport keeps a message with priority p > 0 in "<queue>\x06\x16<p>"; a depth that ignored
# those lists could read 0 while work waits. "unacked" holds the reserved messages (ETA tasks included).
PRIORITY_KEYS = ("", "\x06\x163", "\x06\x166", "\x06\x169")
POLL_WAIT_S = 20.0  # a turn's long poll (GET /v1/turns/{id}?wait=…); below ENGRAM_MAX_WAIT_SECONDS
HANG_MARGIN_S = 30.0

SUMMARY = """## Decisions
- Keep the project notes in one shared document
## Action items
- Send the summary to the team on Friday
## Key insights
- The user tracks every request with a reference code
## Preferences
- Short answers with bullet points
## Open questions
- none
ACTIVE TASK: keep track of the user's referenced notes"""
DIRECTIVE = "You keep answers short and concrete, and you use plain words."
# What a stack still owes the users whose external ids are LIKE %(p)s, a count a column: turns not finished,
# user messages not mined, memories without a vector, and (UNITS_SQL appended) transcript units without one.
BACKLOG_SQL = """SELECT
             (SELECT count(*) FROM turns t JOIN users u ON u.id = t.user_id
               WHERE u.external_id LIKE %(p)s AND t.status IN ('queued', 'running')) AS open_turns,
             (SELECT count(*) FROM session_messages m JOIN users u ON u.id = m.user_id
               WHERE u.external_id LIKE %(p)s AND m.role = 'user' AND m.extracted_at IS NULL) AS unmined_messages,
             (SELECT count(*) FROM memories m JOIN users u ON u.id = m.user_id
               WHERE u.external_id LIKE %(p)s AND m.valid_until IS NULL
                 AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id AND c.embedding IS NOT NULL))
               AS unembedded_memories"""
UNITS_SQL = """,
             (SELECT count(*) FROM memory_chunks c JOIN users u ON u.id = c.user_id
               WHERE u.external_id LIKE %(p)s AND c.message_id IS NOT NULL AND c.embedding IS NULL)
               AS unembedded_units"""

_SCRIPT = json.loads((Path(__file__).parent / "data" / "pipeline_script.json").read_text(encoding="utf-8"))
TOPICS: tuple[str, ...] = tuple(_SCRIPT["topics"])
SENTENCES: tuple[str, ...] = tuple(_SCRIPT["sentences"])
PROFILES: tuple[str, ...] = ("bursty",) * 4 + ("steady",) * 3 + ("idle",) * 3
_USER_LINE = re.compile(r"^\[user #\d+\]: (.*)$", re.MULTILINE)
_FACT = re.compile(r"\bref (pq[0-9a-z]{9})\b(?: about ([^.]+)\.)?")


@dataclass
class SessionPlan:
    index: int
    user_id: str  # also its session's key
    start_delay: float
    texts: list[str]
    tokens: list[str]
    thinks: list[float]  # the pause after turn n (n < turns - 1)


def user_text(rng: random.Random, token: str) -> str:
    """A message of varied length (a third one-liners, a quarter pasted paragraphs), opening with
    its reference token so no truncation of long messages can cut it."""
    draw = rng.random()
    target = rng.randint(15, 80) if draw < 0.35 else rng.randint(120, 450) if draw < 0.75 else rng.randint(600, 1600)
    text = f"ref {token} about {rng.choice(TOPICS)}."
    while len(text) < target:
        text += " " + rng.choice(SENTENCES)
    return text


def make_plans(
    sessions: int, turns: int, user_prefix: str, seed: int, ramp_s: float | None = None
) -> list[SessionPlan]:
    """Sessions of users `user_prefix`000, 001…; with `ramp_s`, starting spread over it, with the profiles'
    think times (else at once, each turn sent when the last is done)."""
    rng = random.Random(seed)
    plans = []
    for index in range(sessions):
        profile = PROFILES[index % len(PROFILES)]
        # The token is unique in the run and one word for full-text search ("pq" + session + turn + salt).
        tokens = [f"pq{index % 1000:03d}{n % 100:02d}{rng.randrange(16**4):04x}" for n in range(turns)]
        user_id, delay = f"{user_prefix}{index:03d}", rng.uniform(0, ramp_s) if ramp_s is not None else 0.0
        texts = [user_text(rng, token) for token in tokens]
        # bursty: 3-7 turns with short thinks (below the debounce), then an idle pause; steady: short thinks only
        # (the cap extracts it); idle: a pause after every turn.
        thinks: list[float] = []
        short_s, pause_s = THINK_S
        burst_left = rng.randint(3, 7)
        for _ in range(turns - 1 if ramp_s is not None else 0):
            if profile == "steady":
                thinks.append(rng.uniform(1.2, 2.0) * short_s)
            elif profile == "idle":
                thinks.append(rng.uniform(0.35, 0.9) * pause_s)
            elif burst_left > 1:
                thinks.append(rng.uniform(0.3, 1.7) * short_s)
                burst_left -= 1
            else:
                thinks.append(rng.uniform(0.5, 1.5) * pause_s)
                burst_left = rng.randint(3, 7)
        plans.append(SessionPlan(index, user_id, delay, texts, tokens, thinks))
    return plans


def kind_of(body: Json) -> str:
    """extraction, summary, compaction (a summary that also extracts, in one call), synthesis or chat."""
    # The memory instructions open every extraction and compaction call (shared/pipeline/memory_prompt.py).
    system = json.dumps(body.get("system", ""))
    if "You are the memory worker" in system:
        task = last_user_text(body).lstrip()
        if task.startswith(TASK_BOTH):
            return "compaction"
        return "summary" if task.startswith(TASK_SUMMARY) else "extraction"
    if "personality directive" in system:
        return "synthesis"
    return "chat"


def extraction_json(prompt: str, summary: str | None = None) -> str:
    """One entity per user message in the transcript that carries a reference token, keyed by it; lines
    marked as read before (a compaction's context) are skipped, as the instructions say."""
    facts = [fact.groups() for line in _USER_LINE.findall(prompt) if (fact := _FACT.search(line))]
    entities = [
        {"key": f"note/{t}", "value": f"User filed reference {t} about {about or 'a note'}"} for t, about in facts
    ]
    answer: dict[str, Any] = {"preferences": [], "entities": entities, "decisions": [], "styles": [], "artifacts": []}
    return json.dumps(answer if summary is None else {**answer, "summary": summary})


def pipeline_reply(body: Json) -> FakeReply:
    kind = kind_of(body)
    if kind in ("extraction", "compaction"):  # flush calls use the extraction prompt
        return FakeReply(text=extraction_json(last_user_text(body), SUMMARY if kind == "compaction" else None))
    texts = {"summary": SUMMARY, "synthesis": DIRECTIVE}
    return FakeReply(text=texts[kind]) if kind in texts else echo_reply(body)


@dataclass
class TurnRecord:
    session: int
    number: int  # 0-based within the session
    token: str
    submitted: float = field(default_factory=time.time)
    turn_id: int | None = None
    done_seen: float | None = None  # when this client saw it finished
    status: str = "not sent"  # then done, failed, refused, timeout or aborted
    error: str | None = None


class Driver:
    """One thread per session, as a chat client: each turn sent (a 503 or a refused connection retried with its
    Idempotency-Key) and waited for; each request's latency kept against `limit` (0: none) plus its wait."""

    def __init__(self, url: str, api_key: str, plans: list[SessionPlan], turn_timeout: float, limit: float = 0) -> None:
        self.url, self.api_key = url, api_key
        self.turn_timeout, self.request_limit = turn_timeout, limit
        # Appended by the session threads (list.append is atomic); a request as (latency - its limit, outcome).
        self.records: list[TurnRecord] = []
        self.requests: list[tuple[float, str]] = []
        self.abort = threading.Event()
        self.threads = [threading.Thread(target=self._session, args=(plan,), daemon=True) for plan in plans]

    def start(self) -> Driver:
        for thread in self.threads:
            thread.start()
        return self

    def running(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def wait(self, check: Callable[[], None] = lambda: None) -> list[TurnRecord]:
        try:
            for thread in self.threads:
                while thread.is_alive():
                    thread.join(0.2)
                    check()
        except BaseException:
            self.abort.set()
            raise
        return self.records

    def _session(self, plan: SessionPlan) -> None:
        if self.abort.wait(plan.start_delay):
            return
        headers = {"Authorization": f"Bearer {self.api_key}"}
        # The client's hang detector: a request not answered HANG_MARGIN_S after its limit has hung.
        timeout = (self.request_limit or POLL_WAIT_S) + POLL_WAIT_S + HANG_MARGIN_S
        with httpx.Client(base_url=self.url, headers=headers, timeout=timeout) as http:
            for number, text in enumerate(plan.texts):
                record = TurnRecord(plan.index, number, plan.tokens[number])
                self.records.append(record)
                self._run_turn(http, plan, text, record)
                if record.status != "done" or self.abort.wait(plan.thinks[number] if number < len(plan.thinks) else 0):
                    return  # later turns would queue behind one that is not done

    def _run_turn(self, http: httpx.Client, plan: SessionPlan, text: str, record: TurnRecord) -> None:
        deadline = time.monotonic() + self.turn_timeout
        path, body = f"/v1/sessions/{plan.user_id}/turns", {"user_id": plan.user_id, "text": text}
        headers = {"Idempotency-Key": uuid.uuid4().hex}  # the same for every retry
        response = self._request(record, deadline, 0.0, lambda: http.post(path, json=body, headers=headers))
        if response is None:
            return
        if response.status_code >= 400:
            record.status, record.error = "refused", f"{response.status_code}: {response.text[:200]}"
            return
        turn_id = record.turn_id = int(response.json()["turn_id"])
        while True:
            send = lambda: http.get(f"/v1/turns/{turn_id}", params={"wait": POLL_WAIT_S})  # noqa: E731
            if (response := self._request(record, deadline, POLL_WAIT_S, send)) is None:
                return
            if (turn := response.json())["status"] in ("done", "failed"):
                record.status, record.error, record.done_seen = turn["status"], turn.get("error"), time.time()
                return

    def _request(
        self, record: TurnRecord, deadline: float, waits: float, send: Callable[[], httpx.Response]
    ) -> httpx.Response | None:
        """`send` until it is answered with something other than 503; None past the deadline."""
        limit = self.request_limit + waits if self.request_limit else float("inf")
        while not self.abort.is_set():
            if time.monotonic() > deadline:
                record.status, record.error = "timeout", f"not done after {self.turn_timeout:.0f} s"
                return None
            sent = time.monotonic()
            response: httpx.Response | None = None
            try:
                response = send()
            except httpx.HTTPError as exc:
                outcome = "client timeout (hang)" if isinstance(exc, httpx.TimeoutException) else "connection error"
                record.error = f"{type(exc).__name__}: {exc}"
            else:
                outcome = str(response.status_code)  # a 5xx with its error code: "503 dependency_timeout"
                with contextlib.suppress(ValueError, AttributeError):
                    if response.status_code >= 500 and (code := response.json().get("code")):
                        outcome += f" {code}"
            self.requests.append((time.monotonic() - sent - limit, outcome))
            if response is not None and response.status_code != 503:
                return response
            time.sleep(0.5)
        record.status = "aborted"
        return None


def query(database_url: str, sql: str, params: Any = None, timeout: float = DRAIN_TIMEOUT_S) -> list[dict[str, Any]]:
    """Run one statement on a fresh connection, retrying while Postgres is down (chaos kills it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(database_url, autocommit=True, row_factory=dict_row, connect_timeout=3) as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def settle(
    database_url: str, user_prefix: str, timeout: float, units: bool = False, redis_url: str | None = None
) -> tuple[float, dict[str, int], bool]:
    """Wait until the stack owes the users `user_prefix`… nothing (BACKLOG_SQL) and, with `redis_url`, nothing
    is queued or reserved in any Celery queue; (seconds, what is still owed, settled)."""
    started = time.monotonic()
    while True:
        rows = query(database_url, BACKLOG_SQL + (UNITS_SQL if units else ""), {"p": user_prefix + "%"})
        state = {key: int(value) for key, value in rows[0].items()}
        if redis_url:
            with redis.Redis.from_url(redis_url, socket_timeout=5) as client:
                pipe = client.pipeline(transaction=False)
                for name in [queue + suffix for queue in QUEUES for suffix in PRIORITY_KEYS]:
                    pipe.llen(name)
                state["queued"] = sum(pipe.hlen("unacked").execute())
        if not any(state.values()) or time.monotonic() - started > timeout:
            return time.monotonic() - started, state, not any(state.values())
        time.sleep(1.0)


def warm_up(url: str, api_key: str, plans: list[SessionPlan]) -> None:
    """Turns through every layer before the clock starts (imports, pools, the embedding model)."""
    if bad := [r for r in Driver(url, api_key, plans, TURN_TIMEOUT_S).start().wait() if r.status != "done"]:
        raise BenchError(f"warm-up turns did not finish: {bad}")


def prompt_tokens(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Prompt tokens as billed (uncached input, cache reads, cache writes) and the share read from the cache."""
    figures = {
        "input": sum(c["input_tokens"] or 0 for c in calls),
        "cache_read": sum(c["cache_read_tokens"] or 0 for c in calls),
        "cache_write": sum(c["cache_write_tokens"] or 0 for c in calls),
    }
    return {"calls": len(calls), **figures, "cached_share": ratio(figures["cache_read"], sum(figures.values()), 3)}


def summarise(records: list[TurnRecord], database_url: str, load_s: float, drain_s: float) -> dict[str, Any]:
    """The figures: per purpose from the llm_calls ledger; a fact's lag from its turn's finished_at to its memory
    stored (text-searchable) and to its first embedding (vector-searchable), for the memory keyed by the turn's
    token; each message's transcript unit from stored to its vector. Database times are transaction starts."""
    users = "user_id IN (SELECT id FROM users WHERE external_id LIKE %(p)s)"
    db = {
        name: query(database_url, sql, {"p": USER_PREFIX + "%"})
        for name, sql in {
            "turns": f"SELECT id, finished_at FROM turns WHERE {users}",
            "calls": f"""SELECT purpose, input_tokens, cache_read_tokens, cache_write_tokens FROM llm_calls
               WHERE {users}""",
            # When the memory's chunk text was first embedded: the embedding cache row is written in the same
            # transaction as the first chunk, and survives a re-index (which replaces the chunk row).
            "memories": f"""SELECT m.key, m.created_at,
                      (SELECT min(least(c.created_at, coalesce(e.created_at, c.created_at)))
                         FROM memory_chunks c LEFT JOIN embedding_cache e ON e.content_hash = c.content_hash
                        WHERE c.memory_id = m.id AND c.embedding IS NOT NULL) AS embedded_at
               FROM memories m WHERE m.{users} AND m.key LIKE 'note/%%'""",
            # Each message's transcript unit: stored with the message, its vector stored by the drain.
            "unit_lags": f"""SELECT extract(epoch FROM embedded_at - created_at) AS lag FROM memory_chunks
               WHERE {users} AND message_id IS NOT NULL AND embedded_at IS NOT NULL""",
        }.items()
    }
    done = [r for r in records if r.status == "done"]
    turns = max(len(records), 1)
    calls = db["calls"]
    background = [c for c in calls if c["purpose"] != "chat"]
    finished = {row["id"]: row["finished_at"].timestamp() for row in db["turns"] if row["finished_at"] is not None}
    # The first memory stored for each token (the dict keeps the last of those sorted latest first).
    by_age = sorted(db["memories"], key=lambda m: m["created_at"], reverse=True)
    memories = {memory["key"].removeprefix("note/"): memory for memory in by_age}
    stored: list[float] = []
    searchable: list[float] = []
    for record in done:
        traced, end = memories.get(record.token), finished.get(record.turn_id or -1)
        if end is None or traced is None or traced["embedded_at"] is None:
            continue
        stored.append(traced["created_at"].timestamp() - end)
        searchable.append(traced["embedded_at"].timestamp() - end)
    lag = distribution(searchable, (50, 95), 2)
    units = distribution([float(r["lag"]) for r in db["unit_lags"]], (50, 95), 2)
    purposes = sorted({c["purpose"] for c in calls})
    return {
        "background_calls_per_100_turns": round(len(background) * 100 / turns, 1),
        "background_cached_share": prompt_tokens(background)["cached_share"],
        "vector_searchable_lag_p50_s": lag["p50"],
        "vector_searchable_lag_p95_s": lag["p95"],
        "transcript_vector_lag_p50_s": units["p50"],
        "transcript_vector_lag_p95_s": units["p95"],
        "transcript_units": units["n"],
        "text_searchable_lag_p95_s": distribution(stored, (95,), 2)["p95"],
        "all_facts_stored": len(searchable) == len(done),
        "turns_without_searchable_memory": len(done) - len(searchable),
        "turns": len(records),
        "turns_done": len(done),
        "turns_failed": [f"{r.session}/{r.number} {r.status}: {r.error}" for r in records if r.status != "done"][:10],
        "load_s": round(load_s, 1),
        "drain_s": round(drain_s, 1),
        "sustained_turns_per_s": ratio(len(done), load_s + drain_s),
        "turn_e2e_s": distribution([r.done_seen - r.submitted for r in done if r.done_seen], (50, 95), 2),
        "calls_per_100_turns": {p: round(sum(c["purpose"] == p for c in calls) * 100 / turns, 1) for p in purposes},
        "tokens_by_purpose": {p: prompt_tokens([c for c in calls if c["purpose"] == p]) for p in purposes},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.pipeline", __doc__, keep=True)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    parser.add_argument("--ramp-s", type=float, default=60.0, help="sessions start spread over this many seconds")
    parser.add_argument("--max-wait-s", type=float, default=20.0, help="ENGRAM_EXTRACTION_MAX_WAIT_SECONDS")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 2:
        parser.error("--sessions must be at least 1 and --turns at least 2")
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    # In this process: only in-process can the fake pick a reply from each request's content.
    with BenchRun(keep=args.keep) as run:
        fake = run.enter_context(FakeLLM(latency_s=LLM_LATENCY_S))
        fake.default = pipeline_reply
        env = {
            "ENGRAM_AUTO_MEMORY": "true",
            "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": str(DEBOUNCE_S),
            "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": str(args.max_wait_s),
            "ENGRAM_COMPACTION_THRESHOLD_TOKENS": str(COMPACTION_TOKENS),
        }
        # The stack drops the caller's ENGRAM_* settings but for the embedding backend and its exported model.
        env |= {k: v for k, v in os.environ.items() if k in ("ENGRAM_EMBEDDING_BACKEND", "ENGRAM_EMBEDDING_ONNX_PATH")}
        stack, api_key = run.stack(
            "engram-bench-pipeline-", up_workers(), llm_url=fake.anthropic_base_url, beat=True, env=env
        )
        print("warming up ...", file=sys.stderr, flush=True)
        # Concurrent turns, their extraction and embedding, and a search load the model and open the pools.
        warm_up(stack.url, api_key, make_plans(4, 1, "warmup-", 0))
        headers = {"Authorization": f"Bearer {api_key}"}
        httpx.post(
            f"{stack.url}/v1/users/warmup-000/memories/search", json={"query": "warm-up"}, headers=headers, timeout=60
        )
        embedded = """SELECT count(*) AS n FROM memory_chunks c JOIN memories m ON m.id = c.memory_id JOIN users u
                      ON u.id = m.user_id WHERE u.external_id LIKE 'warmup-%' AND c.embedding IS NOT NULL"""
        wait_until(lambda: query(stack.database_url, embedded)[0]["n"] >= 4, 120, "the warm-up memories embedded")
        plans = make_plans(args.sessions, args.turns, USER_PREFIX, SEED, args.ramp_s)
        print(f"running {args.sessions} sessions x {args.turns} turns ...", file=sys.stderr, flush=True)
        origin = time.time()
        records = Driver(stack.url, api_key, plans, TURN_TIMEOUT_S).start().wait()
        load_s = time.time() - origin
        stack.check_alive()
        print(f"load done in {load_s:.0f} s; draining the pipeline ...", file=sys.stderr, flush=True)
        drain_s, owed, drained = settle(stack.database_url, USER_PREFIX, DRAIN_TIMEOUT_S, redis_url=stack.redis_url)
        stack.check_alive()
        summary = summarise(records, stack.database_url, load_s, drain_s)
        summary |= {"drained": drained, "still_owed": owed}
        title = f"engram pipeline benchmark: {args.sessions} sessions x {args.turns} turns, cap {args.max_wait_s:g} s"
        emit(outline(title, summary), summary, args.json)
        healthy = summary["turns_done"] == args.sessions * args.turns and drained
        run.keep = run.keep or not healthy  # worth a post-mortem: keep the data dir
        return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
