"""Background memory pipeline under load: debounced extraction, flush, compaction and embedding
with many sessions chatting at once, processes laid out as `engram up` lays them out.

    python -m ops.bench.pipeline [--sessions 100] [--turns 20] [--llm-latency-ms 50] [--think-ms 700,15000] [--json]

Starts a private stack (ops/bench/stack.py) with ENGRAM_AUTO_MEMORY=true, a 5 s extraction debounce
(engram's default; stretched for chatty sessions by ENGRAM_EXTRACTION_DEBOUNCE_STRETCH's default;
capped at 20 s for sessions that never go quiet) and a 1,500-token compaction
threshold, so every session compacts a few times. The debounce must clearly exceed a turn's own
latency: a 2 s debounce on a small machine, where a turn alone takes 1-2 s, turns a user who keeps
chatting into a string of "idle" gaps. The workers a default `engram up` starts (ops/stack.py; `--cluster`
runs the pools of ops/process_commands.py instead): `worker-turns` (turns, channels; ENGRAM_TURN_WORKER_CONCURRENCY's
default, 2 processes) and `worker-background` (extraction, flush, compaction, embeddings, maintenance;
ENGRAM_BACKGROUND_WORKER_CONCURRENCY's default, 2 processes), plus beat, so the memory jobs queue behind each
other as they do in production. --embedding-backend (default: the caller's ENGRAM_EMBEDDING_BACKEND, else the setting's
default) picks the runtime; ENGRAM_EMBEDDING_ONNX_PATH passes from the caller's environment.

The model is the fake Anthropic server of ops/fake_llm.py, in this process, answering after a fixed
latency: a chat call gets an echo; an extraction (or flush) call gets JSON with one fact per user
message it was shown, derived from that message's unique reference token ("ref pq…"), so every
turn should end up as a stored, embedded memory that can be traced back to it; a summary call gets
a fixed five-heading summary; a compaction made by an extraction (one call that summarises and extracts)
gets that JSON, for the user messages not marked as read before, with the summary in it.

Each session is one thread and one user, sending its turns one after another (each waits for the
previous to finish) with a think time drawn from the session's profile:
- bursty: bursts of 3-7 turns with short thinks (below the debounce), then an idle pause;
- steady: short thinks only, never idle: the cap (max wait) is what extracts it;
- idle: an idle pause after every turn.
Sessions start spread over --ramp-s seconds.

Reported:
1. LLM calls per 100 turns by purpose (llm_calls table), the background calls (every purpose but chat)
   per 100 turns, prompt tokens per purpose (uncached input, cache reads, cache writes) and the share of
   the background calls' prompt read from the provider's prompt cache; and per session the idle gaps
   longer than the debounce against the extraction calls made: extraction should track gaps, not turns;
2. extraction lag, turn finished -> memory searchable (its chunk has an embedding), for every turn
   from the database timestamps (turns.finished_at, memories.created_at, the chunk text's first
   embedding), and for a sample of turns end to end through the search API;
3. compaction duration (Celery task events: task start -> success, i.e. after its commit), its
   queue wait and the summary call's own duration;
4. queue depths over time (LLEN of every Celery queue, plus the reserved/ETA messages, every 0.5 s);
5. totals, with every message's wait for its transcript unit's vector (stored with the message -> vector
   stored); then errors and warnings found in the processes' logs and Postgres's log.
Then the same as one JSON line (alone with --json), whose top level also carries the headline figures
`vector_searchable_lag_p50_s`, `vector_searchable_lag_p95_s`, `transcript_vector_lag_p50_s`,
`transcript_vector_lag_p95_s`, `text_searchable_lag_p95_s`, `sustained_turns_per_s`,
`background_calls_per_100_turns` and `background_cached_share` (see `headline`). A
POST answered 503 ("retry later") is retried with the same Idempotency-Key, as a client should, and counted.
"""

from __future__ import annotations

import argparse
import ast
import heapq
import itertools
import json
import os
import random
import re
import statistics
import sys
import threading
import time
import uuid
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

import httpx
import psutil
import redis

from ops.bench.harness import BenchRun, cpu_seconds, distribution, emit, run_main
from ops.bench.stack import BenchError, LocalStack, up_workers
from ops.client import EngramAPIError, EngramClient, checked
from ops.fake_llm import FakeLLM, FakeReply, Json, echo_reply, last_user_text
from shared.infra.config import Settings
from shared.pipeline.debounce import quiet_period
from shared.pipeline.memory_prompt import TASK_BOTH, TASK_SUMMARY
from shared.queueing import task_names
from shared.queueing.queues import BACKGROUND_QUEUES, QUEUES

TERMINAL = ("done", "failed")
QUEUE_SAMPLE_S = 0.5
TIMELINE_BUCKET_S = 10.0
PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 180.0
# Kombu's Redis transport keeps a message with priority p > 0 in "<queue>\x06\x16<p>"; engram sets
# no priorities, but a depth that ignored those lists could read 0 while work waits.
PRIORITY_KEYS = ("", "\x06\x163", "\x06\x166", "\x06\x169")
# Reserved (delivered, not yet acknowledged) messages, ETA tasks held by a worker included.
UNACKED_KEY = "unacked"
LOG_EXCERPTS = 12
SUBMIT_ATTEMPTS = 5
MAX_RETRY_AFTER_S = 5.0

EMBEDDING_RUNTIME_SETTINGS = ("ENGRAM_EMBEDDING_ONNX_PATH",)

# How the fake recognises background requests: the memory instructions every extraction and compaction
# call opens with (shared/pipeline/memory_prompt.py), and the task line that opens its user message (the
# same markers tests/integration/test_pipeline.py uses); the personality synthesis by its own system prompt.
MEMORY_MARKER = "You are the memory worker"
SYNTHESIS_MARKER = "personality directive"

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


# ---------------------------------------------------------------------------------------------------
# The script: what users say and when


_SCRIPT = json.loads((Path(__file__).parent / "data" / "pipeline_script.json").read_text(encoding="utf-8"))
TOPICS: tuple[str, ...] = tuple(_SCRIPT["topics"])
SENTENCES: tuple[str, ...] = tuple(_SCRIPT["sentences"])
PROFILES: tuple[str, ...] = ("bursty",) * 4 + ("steady",) * 3 + ("idle",) * 3
PROFILE_NAMES = ("bursty", "steady", "idle")
_TOKEN = re.compile(r"\bref (pq[0-9a-z]{9})\b")
_USER_LINE = re.compile(r"^\[user #\d+\]: (.*)$", re.MULTILINE)
_TOPIC = re.compile(r"\bref pq[0-9a-z]{9} about ([^.]+)\.")


@dataclass
class SessionPlan:
    index: int
    profile: str
    user_id: str
    session_key: str
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


def think_times(rng: random.Random, profile: str, turns: int, short_s: float, pause_s: float) -> list[float]:
    thinks: list[float] = []
    burst_left = rng.randint(3, 7)
    for _ in range(turns - 1):
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
    return thinks


def make_plans(args: argparse.Namespace, run_id: str) -> list[SessionPlan]:
    rng = random.Random(args.seed)
    plans = []
    for index in range(args.sessions):
        profile = PROFILES[index % len(PROFILES)]
        # The token is unique in the run and one word for full-text search ("pq" + session + turn + salt).
        tokens = [f"pq{index % 1000:03d}{n % 100:02d}{rng.randrange(16**4):04x}" for n in range(args.turns)]
        plans.append(
            SessionPlan(
                index=index,
                profile=profile,
                user_id=f"pipe-{run_id}-{index:03d}",
                session_key=f"pipe-{index:03d}",
                start_delay=rng.uniform(0, args.ramp_s),
                texts=[user_text(rng, token) for token in tokens],
                tokens=tokens,
                thinks=think_times(rng, profile, args.turns, args.short_s, args.pause_s),
            )
        )
    return plans


# ---------------------------------------------------------------------------------------------------
# The fake model


def kind_of(body: Json) -> str:
    """extraction, summary, compaction (a summary that also extracts, in one call), synthesis or chat."""
    system = json.dumps(body.get("system", ""))
    if MEMORY_MARKER in system:
        task = last_user_text(body).lstrip()
        if task.startswith(TASK_BOTH):
            return "compaction"
        return "summary" if task.startswith(TASK_SUMMARY) else "extraction"
    if SYNTHESIS_MARKER in system:
        return "synthesis"
    return "chat"


def extraction_entities(prompt: str) -> list[dict[str, str]]:
    """One entity per user message in the transcript that carries a reference token: what a model
    would pick out of "ref X about Y", and traceable back to the turn that said it. Lines marked as read
    before (a compaction's context) are skipped, as the instructions say."""
    entities = []
    for line in _USER_LINE.findall(prompt):
        token = _TOKEN.search(line)
        if token is None:
            continue
        topic = _TOPIC.search(line)
        about = topic.group(1) if topic else "a note"
        entities.append(
            {"key": f"note/{token.group(1)}", "value": f"User filed reference {token.group(1)} about {about}"}
        )
    return entities


def extraction_json(prompt: str, summary: str | None = None) -> str:
    answer: dict[str, Any] = {
        "preferences": [],
        "entities": extraction_entities(prompt),
        "decisions": [],
        "styles": [],
        "artifacts": [],
    }
    if summary is not None:
        answer["summary"] = summary
    return json.dumps(answer)


def pipeline_reply(body: Json) -> FakeReply:
    kind = kind_of(body)
    if kind == "extraction":  # flush calls use the same prompt
        return FakeReply(text=extraction_json(last_user_text(body)))
    if kind == "compaction":
        return FakeReply(text=extraction_json(last_user_text(body), SUMMARY))
    if kind == "summary":
        return FakeReply(text=SUMMARY)
    if kind == "synthesis":
        return FakeReply(text=DIRECTIVE)
    return echo_reply(body)


# ---------------------------------------------------------------------------------------------------
# Samplers: queue depths and Celery task events


class QueueSampler(threading.Thread):
    """LLEN of every Celery queue and the size of the reserved-messages hash, every 0.5 s.

    A delayed (countdown) task leaves its queue when a worker reserves it to hold until its ETA, which
    the worker does only while it has prefetch room: a debounced extraction is counted under
    `reserved` while held, under `extraction` while the background worker is too busy to take it."""

    def __init__(self, redis_url: str, origin: float) -> None:
        super().__init__(name="queue-sampler", daemon=True)
        self.client = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.origin = origin
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.errors = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(QUEUE_SAMPLE_S):
            self.sample()

    def sample(self) -> dict[str, int] | None:
        pipe = self.client.pipeline(transaction=False)
        for queue in QUEUES:
            for suffix in PRIORITY_KEYS:
                pipe.llen(queue + suffix)
        pipe.hlen(UNACKED_KEY)
        try:
            values = pipe.execute()
        except redis.RedisError:
            self.errors += 1
            return None
        step = len(PRIORITY_KEYS)
        depths = {queue: sum(values[i * step : (i + 1) * step]) for i, queue in enumerate(QUEUES)}
        depths["reserved"] = int(values[-1])
        self.samples.append((time.time() - self.origin, depths))
        return depths

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(5)
        self.client.close()


@dataclass
class TaskRecord:
    """One Celery task (one id; retries reuse it) as its events describe it. Times are epoch seconds."""

    name: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    sent: float | None = None
    eta: float | None = None
    started: float | None = None  # the last attempt's start
    succeeded: float | None = None
    runtime: float | None = None
    result: str | None = None
    failed: str | None = None
    retries: int = 0
    retry_reasons: list[str] = field(default_factory=list)


def _literal(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def _eta(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


class TaskEvents(threading.Thread):
    """Celery's task events (engram's workers and gateway send them with ENGRAM_CELERY_TASK_EVENTS, which
    pipeline_env sets), captured from the broker: what every task did and when, without touching
    engram's code."""

    def __init__(self, redis_url: str) -> None:
        super().__init__(name="task-events", daemon=True)
        from celery import Celery

        # A bare app on the same broker: importing workers.app here would read this process's settings.
        self.app = Celery("pipeline-bench", broker=redis_url)
        self.tasks: dict[str, TaskRecord] = defaultdict(TaskRecord)
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.error: str | None = None
        self._receiver: Any = None

    def run(self) -> None:
        try:
            with self.app.connection() as conn:
                self._receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
                self.ready.set()
                self._receiver.capture(limit=None, timeout=None, wakeup=False)
        except Exception as exc:  # the broker going away at shutdown ends the capture
            self.error = f"{type(exc).__name__}: {exc}"
            self.ready.set()

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        uid = event.get("uuid")
        if not kind.startswith("task-") or not isinstance(uid, str):
            return
        stamp = float(event.get("timestamp") or time.time())
        with self.lock:
            task = self.tasks[uid]
            if event.get("name"):
                task.name = str(event["name"])
            if "kwargs" in event and not task.kwargs:
                task.kwargs = _literal(event["kwargs"])
            if kind == "task-sent":
                task.sent = task.sent or stamp
                task.eta = task.eta or _eta(event.get("eta"))
            elif kind == "task-received":
                task.eta = task.eta or _eta(event.get("eta"))
            elif kind == "task-started":
                task.started = stamp
            elif kind == "task-succeeded":
                task.succeeded = stamp
                task.runtime = float(event.get("runtime") or 0.0)
                task.result = str(event.get("result"))
            elif kind == "task-failed":
                task.failed = str(event.get("exception"))
            elif kind == "task-retried":
                task.retries += 1
                task.retry_reasons.append(str(event.get("exception")))

    def reset(self) -> None:
        with self.lock:
            self.tasks.clear()

    def snapshot(self) -> list[TaskRecord]:
        with self.lock:
            return [t for t in self.tasks.values() if t.name]

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        if self.is_alive():
            self.join(5)


class CpuMeter:
    """CPU seconds used by each process tree between two snapshots, and by the whole machine: on a
    machine with few cores, who burns the CPU (including processes that are not ours) explains
    every latency in the report."""

    def __init__(self, roots: dict[str, int | None], own: str) -> None:
        self.roots = {name: pid for name, pid in roots.items() if pid is not None}
        self.own = own  # this process: its children are the stack's processes, counted on their own
        self.first: dict[str, float] = {}
        self.started = 0.0

    def _snapshot(self) -> dict[str, float]:
        # Live processes only (not the reaped children): what this report has always counted.
        totals = cpu_seconds(self.roots, own=self.own, reaped=False)
        machine = psutil.cpu_times()
        totals["(machine)"] = machine.user + machine.system + machine.nice + getattr(machine, "steal", 0.0)
        return totals

    def start(self) -> None:
        self.first = self._snapshot()
        self.started = time.monotonic()

    def stop(self) -> dict[str, Any]:
        last = self._snapshot()
        wall = time.monotonic() - self.started
        used = {name: last[name] - self.first.get(name, 0.0) for name in last}
        machine = used.pop("(machine)")
        ours = sum(used.values())
        return {
            "wall_s": round(wall, 1),
            "cpu_s": {name: round(value, 1) for name, value in used.items()},
            "cores_busy_ours": round(ours / wall, 2),
            # Whatever else runs on the machine competes for the same cores; the figures above depend on it.
            "cores_busy_others": round(max(machine - ours, 0.0) / wall, 2),
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
        }


# ---------------------------------------------------------------------------------------------------
# Load


@dataclass
class TurnRecord:
    session: int
    number: int  # 0-based within the session
    token: str
    chars: int
    turn_id: int | None
    session_id: int | None
    submitted: float  # epoch seconds
    done_seen: float | None  # when this client saw it finished
    status: str  # done, failed, or error (the client gave up)
    error: str | None = None
    timings: dict[str, Any] = field(default_factory=dict)  # the worker's queued_ms, run_ms, llm_ms
    submit_503: list[str] = field(default_factory=list)  # bodies of 503 answers to the POST, retried


class SearchProbes(threading.Thread):
    """End-to-end check of "searchable" for a sample of turns: after the turn is done, search the
    user's memories for its token every 0.5 s until a memory keyed by it comes back with a vector leg.

    One thread cycling over the pending probes, so the extra load on the gateway stays bounded."""

    def __init__(self, url: str, api_key: str) -> None:
        super().__init__(name="search-probes", daemon=True)
        self.client = EngramClient(url, api_key, timeout=30)
        self.lock = threading.Lock()
        self.pending: list[tuple[str, str, float]] = []  # (user, token, turn seen done)
        self.found: dict[str, dict[str, float | None]] = {}
        self.searches = 0
        self.errors = 0
        self.closing = threading.Event()

    def add(self, user_id: str, token: str, done_at: float) -> None:
        with self.lock:
            self.pending.append((user_id, token, done_at))
            self.found[token] = {"done": done_at, "text": None, "vector": None}

    def run(self) -> None:
        while True:
            with self.lock:
                pending = list(self.pending)
            if not pending and self.closing.is_set():
                return
            cycle_started = time.monotonic()
            for user_id, token, done_at in pending:
                if self._probe(user_id, token) or time.time() - done_at > PROBE_TIMEOUT_S:
                    with self.lock:
                        self.pending.remove((user_id, token, done_at))
            time.sleep(max(0.0, PROBE_INTERVAL_S - (time.monotonic() - cycle_started)))

    def _probe(self, user_id: str, token: str) -> bool:
        self.searches += 1
        try:
            response = self.client.http.post(f"/v1/users/{user_id}/memories/search", json={"query": token, "limit": 5})
        except httpx.HTTPError:
            self.errors += 1
            return False
        if response.status_code == 404:  # the user has no memories yet
            return False
        if response.status_code >= 400:
            self.errors += 1
            return False
        now = time.time()
        state = self.found[token]
        for result in response.json().get("results", []):
            if result.get("source") == "memory" and token in str(result.get("key")):
                state["text"] = state["text"] or now
                if "vector" in (result.get("legs") or {}):
                    state["vector"] = now
                    return True
        return False

    def stop(self, timeout: float) -> None:
        self.closing.set()
        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            self.join(0.5)
        with self.lock:
            self.pending.clear()  # give up on the rest
        self.join(5)
        self.client.close()


def submit(client: EngramClient, plan: SessionPlan, number: int, record: TurnRecord) -> dict[str, Any]:
    """POST the turn; on 503 ("nothing was written, retry later") retry with the same Idempotency-Key
    after Retry-After, as a well-behaved client would, and keep what the server said."""
    key = uuid.uuid4().hex
    body = {"user_id": plan.user_id, "text": plan.texts[number]}
    for _ in range(SUBMIT_ATTEMPTS):
        response = client.http.post(
            f"/v1/sessions/{plan.session_key}/turns", json=body, headers={"Idempotency-Key": key}
        )
        if response.status_code != 503:
            break
        record.submit_503.append(response.text[:200])
        time.sleep(min(float(response.headers.get("retry-after") or 1), MAX_RETRY_AFTER_S))
    accepted: dict[str, Any] = checked(response).json()
    return accepted


def run_turn(client: EngramClient, plan: SessionPlan, number: int, timeout: float) -> TurnRecord:
    text = plan.texts[number]
    submitted = time.time()
    record = TurnRecord(plan.index, number, plan.tokens[number], len(text), None, None, submitted, None, "error")
    try:
        accepted = submit(client, plan, number, record)
        record.turn_id, record.session_id = accepted["turn_id"], accepted["session_id"]
        status = accepted["status"]
        turn: dict[str, Any] = accepted
        while status not in TERMINAL:
            if time.time() - submitted > timeout:
                record.error = f"not finished after {timeout:.0f} s"
                return record
            turn = client.get_turn(accepted["turn_id"], wait=30)
            status = turn["status"]
        record.done_seen = time.time()
        record.status = status
        record.error = turn.get("error")
        record.timings = turn.get("timings") or {}
    except (EngramAPIError, httpx.HTTPError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    return record


def drive(
    url: str, api_key: str, plans: list[SessionPlan], args: argparse.Namespace, probes: SearchProbes | None
) -> list[TurnRecord]:
    records: list[TurnRecord] = []
    lock = threading.Lock()
    abort = threading.Event()

    def session(plan: SessionPlan) -> None:
        client = EngramClient(url, api_key, timeout=30)
        try:
            if abort.wait(plan.start_delay):
                return
            for number in range(args.turns):
                record = run_turn(client, plan, number, args.turn_timeout)
                with lock:
                    records.append(record)
                if record.status == "error":
                    return  # later turns would queue behind one we no longer follow
                # Sampled by the token's hash, so the probes spread over sessions and over the run.
                if (
                    probes is not None
                    and args.probe_every
                    and zlib.crc32(record.token.encode()) % args.probe_every == 0
                ):
                    probes.add(plan.user_id, record.token, record.done_seen or time.time())
                if number < args.turns - 1 and abort.wait(plan.thinks[number]):
                    return
        finally:
            client.close()

    threads = [threading.Thread(target=session, args=(p,), name=f"session-{p.index}", daemon=True) for p in plans]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            # Short joins keep the main thread responsive to Ctrl-C and SIGTERM.
            while thread.is_alive():
                thread.join(0.2)
    except BaseException:
        abort.set()
        raise
    return records


# ---------------------------------------------------------------------------------------------------
# Warm-up and drain


def warm_up(url: str, api_key: str, database_url: str, timeout: float) -> None:
    """Load the embedding model and open the pools in every process before the measured run:
    concurrent turns (each turn-worker process takes one while another loads the model), their
    extraction and embedding (the background worker), a search (the gateway)."""
    from shared.infra.db import connect

    records: list[TurnRecord] = []

    def one(key: str, token: str) -> None:
        local = SessionPlan(0, "warm-up", "warmup", key, 0.0, [f"ref {token} about the warm-up."], [token], [])
        client = EngramClient(url, api_key, timeout=30)
        try:
            records.append(run_turn(client, local, 0, timeout))
        finally:
            client.close()

    tokens = [f"pqwarmup{i:03d}" for i in range(4)]
    threads = [threading.Thread(target=one, args=(f"warmup-{i}", token)) for i, token in enumerate(tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for record in records:
        if record.status != "done":
            raise BenchError(f"warm-up turn failed: {record.error}")
    client = EngramClient(url, api_key, timeout=60)
    try:
        client.http.post("/v1/users/warmup/memories/search", json={"query": "warm-up"})
    finally:
        client.close()
    deadline = time.monotonic() + timeout
    with connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                """SELECT count(*) AS n FROM memory_chunks c JOIN memories m ON m.id = c.memory_id
                   WHERE m.key LIKE 'note/pqwarmup%%' AND c.embedding IS NOT NULL"""
            ).fetchone()
            if row is not None and row["n"] >= len(tokens):
                return
            time.sleep(0.5)
    raise BenchError(f"the warm-up turns' memories were not embedded within {timeout:.0f} s")


def pipeline_idle(sampler: QueueSampler, database_url: str, user_prefix: str) -> tuple[bool, str]:
    """Nothing queued or reserved, every message mined, every memory embedded."""
    from shared.infra.db import connect

    depths = sampler.sample()
    if depths is None or any(depths.values()):
        return False, f"queues {depths}"
    with connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            """SELECT
                 (SELECT count(*) FROM session_messages sm JOIN users u ON u.id = sm.user_id
                   WHERE u.external_id LIKE %(p)s AND sm.extracted_at IS NULL) AS unmined,
                 (SELECT count(*) FROM memories m JOIN users u ON u.id = m.user_id
                   WHERE u.external_id LIKE %(p)s AND m.valid_until IS NULL
                     AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id)) AS unembedded""",
            {"p": user_prefix + "%"},
        ).fetchone()
    assert row is not None
    if row["unmined"] or row["unembedded"]:
        return False, f"{row['unmined']} messages not mined, {row['unembedded']} memories not embedded"
    return True, "idle"


def drain(sampler: QueueSampler, database_url: str, user_prefix: str, timeout: float) -> tuple[float, str]:
    started = time.monotonic()
    state = "not checked"
    while time.monotonic() - started < timeout:
        idle, state = pipeline_idle(sampler, database_url, user_prefix)
        if idle:
            return time.monotonic() - started, state
        time.sleep(1.0)
    return time.monotonic() - started, state


# ---------------------------------------------------------------------------------------------------
# Analysis


def modelled_extractions(finished: Sequence[float], debounce: float, max_wait: float, stretch: float = 0.0) -> int:
    """Extraction runs with something to mine that shared/pipeline/debounce.py calls for, replayed
    over a session's turn finish times as if every delayed task ran exactly on time and took no
    time: the count a perfectly keeping-up worker would make."""
    heap = [(t, 0, i) for i, t in enumerate(finished)]  # (time, 0 = schedule / 1 = fire, turn)
    heapq.heapify(heap)
    latest, first, pending, runs = -1, None, False, 0
    previous: float | None = None
    while heap:
        at, kind, turn = heapq.heappop(heap)
        if kind == 0:
            first = at if first is None else first
            latest, pending = turn, True
            quiet = quiet_period(debounce, max_wait, stretch, None if previous is None else at - previous)
            previous = at
            heapq.heappush(heap, (at + max(0.0, min(quiet, first + max_wait - at)), 1, turn))
        elif latest == turn or (first is not None and at - first >= max_wait):
            first = None  # debounce.started: the cap counts from the next schedule
            if pending:
                runs += 1
                pending = False
    return runs


def dist(values: Sequence[float], digits: int = 2) -> dict[str, float | int | None]:
    mean = round(statistics.fmean(values), digits) if values else None
    return {**distribution(values, (50, 95), digits), "mean": mean}


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(statistics.correlation(xs, ys), 3)


def fetch_db(database_url: str, user_prefix: str) -> dict[str, list[dict[str, Any]]]:
    from shared.infra.db import connect

    p = {"p": user_prefix + "%"}
    with connect(database_url, autocommit=True) as conn:
        return {
            "sessions": conn.execute(
                """SELECT s.id, s.session_key, u.external_id, s.compaction_count, s.token_count,
                          s.memory_flush_compaction_count, s.compacted_at
                   FROM sessions s JOIN users u ON u.id = s.user_id WHERE u.external_id LIKE %(p)s""",
                p,
            ).fetchall(),
            "turns": conn.execute(
                """SELECT t.id, t.session_id, t.status, t.created_at, t.started_at, t.finished_at
                   FROM turns t JOIN users u ON u.id = t.user_id WHERE u.external_id LIKE %(p)s""",
                p,
            ).fetchall(),
            "calls": conn.execute(
                """SELECT c.session_id, c.purpose, c.ok, c.duration_ms, c.created_at,
                          c.input_tokens, c.cache_read_tokens, c.cache_write_tokens
                   FROM llm_calls c JOIN users u ON u.id = c.user_id WHERE u.external_id LIKE %(p)s""",
                p,
            ).fetchall(),
            "memories": conn.execute(
                # When the memory's chunk text was first embedded: the embedding cache row is written in the
                # same transaction as the first chunk, and survives a re-index (which replaces the chunk row,
                # e.g. when the index_missing_memories sweep re-enqueues a memory still waiting in the queue).
                """SELECT m.id, m.key, m.source, m.valid_until, m.created_at,
                          (SELECT min(least(c.created_at, coalesce(e.created_at, c.created_at)))
                             FROM memory_chunks c LEFT JOIN embedding_cache e ON e.content_hash = c.content_hash
                            WHERE c.memory_id = m.id AND c.embedding IS NOT NULL) AS embedded_at
                   FROM memories m JOIN users u ON u.id = m.user_id WHERE u.external_id LIKE %(p)s""",
                p,
            ).fetchall(),
            "transcript_chunks": conn.execute(
                """SELECT count(*) AS n, count(*) FILTER (WHERE c.embedding IS NOT NULL) AS embedded
                   FROM memory_chunks c JOIN users u ON u.id = c.user_id
                   WHERE u.external_id LIKE %(p)s AND c.memory_id IS NULL""",
                p,
            ).fetchall(),
            # Each message's transcript unit: stored with the message, its vector stored by the drain.
            "unit_lags": conn.execute(
                """SELECT extract(epoch FROM c.embedded_at - c.created_at) AS lag
                   FROM memory_chunks c JOIN users u ON u.id = c.user_id
                   WHERE u.external_id LIKE %(p)s AND c.message_id IS NOT NULL AND c.embedded_at IS NOT NULL""",
                p,
            ).fetchall(),
            "unmined": conn.execute(
                """SELECT count(*) AS n FROM session_messages sm JOIN users u ON u.id = sm.user_id
                   WHERE u.external_id LIKE %(p)s AND sm.extracted_at IS NULL""",
                p,
            ).fetchall(),
        }


def _int_result(result: str | None) -> int | None:
    try:
        return int(result) if result is not None else None
    except ValueError:
        return None


def _result_kind(result: str | None) -> str:
    """Group a task's return value: "'3 memories'" -> "N memories"."""
    if result is None:
        return "(no result)"
    text = result.strip("'\"")
    return re.sub(r"\d+", "N", text)


def api_calls_by_purpose(url: str, api_key: str, plans: Sequence[SessionPlan]) -> Counter[str]:
    """The same ledger through GET /v1/sessions/{key}: a cross-check of the SQL totals."""
    totals: Counter[str] = Counter()
    client = EngramClient(url, api_key, timeout=30)
    try:
        for plan in plans:
            response = client.http.get(f"/v1/sessions/{plan.session_key}", params={"user_id": plan.user_id})
            if response.status_code != 200:
                continue
            for purpose, row in response.json()["llm_calls"].items():
                totals[purpose] += int(row["calls"])
    finally:
        client.close()
    return totals


@dataclass
class RunData:
    """Everything a run produced, for the analysis."""

    args: argparse.Namespace
    plans: list[SessionPlan]
    records: list[TurnRecord]
    db: dict[str, list[dict[str, Any]]]
    tasks: list[TaskRecord]
    samples: list[tuple[float, dict[str, int]]]
    probes: SearchProbes | None
    origin: float
    load_s: float
    drain_s: float

    @property
    def done(self) -> list[TurnRecord]:
        return [r for r in self.records if r.status == "done"]


def split_extraction_calls(run: RunData) -> tuple[Counter[int], Counter[int]]:
    """Extraction calls per session: (by extraction tasks, by compaction tasks' mining pass)."""
    windows: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for task in run.tasks:
        if task.name == task_names.COMPACTION_COMPACT and task.started and task.succeeded:
            windows[int(task.kwargs.get("session_id", -1))].append((task.started - 0.05, task.succeeded + 0.05))
    by_task: Counter[int] = Counter()
    in_compaction: Counter[int] = Counter()
    for call in run.db["calls"]:
        if call["purpose"] != "extraction" or call["session_id"] is None:
            continue
        at = call["created_at"].timestamp()
        # worker-background runs one task at a time, so an extraction call inside a compaction task's
        # window of the same session is that task's own "mine before compacting" pass.
        if any(lo <= at <= hi for lo, hi in windows.get(call["session_id"], [])):
            in_compaction[call["session_id"]] += 1
        else:
            by_task[call["session_id"]] += 1
    return by_task, in_compaction


def _prompt_tokens(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Prompt tokens of these calls as the provider billed them: uncached input, cache reads and cache
    writes (together the whole prompt), and the share of the prompt read from the cache."""
    uncached = sum(c["input_tokens"] or 0 for c in calls)
    read = sum(c["cache_read_tokens"] or 0 for c in calls)
    written = sum(c["cache_write_tokens"] or 0 for c in calls)
    total = uncached + read + written
    return {
        "input": uncached,
        "cache_read": read,
        "cache_write": written,
        "prompt": total,
        "cached_share": round(read / total, 3) if total else None,
    }


def llm_section(run: RunData, in_compaction: Counter[int]) -> dict[str, Any]:
    calls = run.db["calls"]
    by_purpose = Counter(c["purpose"] for c in calls)
    turns = max(len(run.records), 1)
    background = [c for c in calls if c["purpose"] != "chat"]
    return {
        "by_purpose": dict(sorted(by_purpose.items())),
        "per_100_turns": {k: round(v * 100 / turns, 1) for k, v in sorted(by_purpose.items())},
        "failed": dict(Counter(c["purpose"] for c in calls if not c["ok"])),
        "extraction_inside_compaction": sum(in_compaction.values()),
        # Every purpose but the chat reply itself: the model calls a turn causes after it is answered.
        "background_calls": len(background),
        "background_per_100_turns": round(len(background) * 100 / turns, 1),
        "tokens_by_purpose": {p: _prompt_tokens([c for c in calls if c["purpose"] == p]) for p in sorted(by_purpose)},
        "background_tokens": _prompt_tokens(background),
    }


def gap_section(run: RunData, by_task: Counter[int], in_compaction: Counter[int]) -> dict[str, Any]:
    args = run.args
    plan_by_key = {p.session_key: p for p in run.plans}
    finished_by_session: dict[int, list[float]] = defaultdict(list)
    for turn in run.db["turns"]:
        if turn["finished_at"] is not None:
            finished_by_session[turn["session_id"]].append(turn["finished_at"].timestamp())
    per_session: list[dict[str, Any]] = []
    for row in sorted(run.db["sessions"], key=lambda r: r["session_key"]):
        plan = plan_by_key[row["session_key"]]
        finished = sorted(finished_by_session[row["id"]])
        gaps = sum(1 for a, b in itertools.pairwise(finished) if b - a > args.debounce_s)
        per_session.append(
            {
                "session": plan.index,
                "profile": plan.profile,
                "turns": len(finished),
                # Each turn's finish re-arms the debounce, so a gap is finish-to-finish, plus the idle tail
                # after the last turn (it always outlasts the debounce).
                "idle_gaps": gaps + (1 if finished else 0),
                "planned_gaps": sum(1 for t in plan.thinks if t > args.debounce_s) + 1,
                "modelled": modelled_extractions(finished, args.debounce_s, args.max_wait_s, args.debounce_stretch),
                "extraction_calls": by_task[row["id"]],
                "in_compaction": in_compaction[row["id"]],
            }
        )
    by_profile = []
    for name in (*PROFILE_NAMES, "all"):
        group = [s for s in per_session if name in ("all", s["profile"])]
        if not group:
            continue
        n, turns = len(group), sum(s["turns"] for s in group)

        def mean(key: str, group: list[dict[str, Any]] = group, n: int = n) -> float:
            return round(sum(s[key] for s in group) / n, 2)

        by_profile.append(
            {
                "profile": name,
                "sessions": n,
                "turns": mean("turns"),
                "planned_gaps": mean("planned_gaps"),
                "idle_gaps": mean("idle_gaps"),
                "modelled": mean("modelled"),
                "extraction_calls": mean("extraction_calls"),
                "in_compaction": mean("in_compaction"),
                "extraction_calls_per_turn": round(
                    sum(s["extraction_calls"] + s["in_compaction"] for s in group) / max(turns, 1), 3
                ),
            }
        )
    calls = [float(s["extraction_calls"]) for s in per_session]
    return {
        "by_profile": by_profile,
        "correlation": {
            key: pearson([float(s[key]) for s in per_session], calls) for key in ("idle_gaps", "modelled", "turns")
        },
        # Far more calls than the session's gaps call for would mean extraction tracks turns.
        "sessions_far_above_gaps": [
            {k: s[k] for k in ("session", "profile", "idle_gaps", "modelled", "extraction_calls")}
            for s in per_session
            if s["extraction_calls"] > max(s["modelled"], s["idle_gaps"]) * 1.5 + 1
        ],
        "per_session": per_session,
    }


def task_section(run: RunData) -> dict[str, Any]:
    """Per task name: outcomes (return values grouped), retries, queue wait (from when it was sent, or
    its ETA for delayed tasks, to its start) and run time; and how busy worker-background was."""
    by_name: dict[str, list[TaskRecord]] = defaultdict(list)
    for task in run.tasks:
        by_name[task.name.removeprefix(task_names.PREFIX)].append(task)
    rows: list[dict[str, Any]] = []
    for name, tasks in sorted(by_name.items()):
        outcomes: Counter[str] = Counter()
        # Sweeps and embedders return counts: their sum says how much work they found (or re-enqueued).
        counts = [_int_result(task.result) for task in tasks if task.succeeded]
        numeric = bool(counts) and all(c is not None for c in counts)
        if numeric:
            outcomes[f"returned {sum(c or 0 for c in counts)} in total"] = len(counts)
        # The same memory embedded again: work a sweep re-enqueued while the first task still waited.
        memory_ids = [task.kwargs["memory_id"] for task in tasks if "memory_id" in task.kwargs]
        if len(memory_ids) > len(set(memory_ids)):
            outcomes["repeat of an earlier task's memory_id"] = len(memory_ids) - len(set(memory_ids))
        for task in tasks:
            if task.failed:
                outcomes[f"FAILED: {task.failed[:80]}"] += 1
            elif task.succeeded:
                if not numeric:
                    outcomes[_result_kind(task.result)] += 1
            else:
                outcomes["(not finished)"] += 1
            for reason in task.retry_reasons:
                outcomes[f"retried: {reason[:60]}"] += 1
        waits = [task.started - max(task.sent, task.eta or task.sent) for task in tasks if task.started and task.sent]
        runtimes = [task.runtime for task in tasks if task.runtime is not None]
        rows.append(
            {
                "task": name,
                "n": len(tasks),
                "outcomes": dict(outcomes.most_common()),
                "retries": sum(task.retries for task in tasks),
                "wait_s": dist(waits),
                "run_s": dist(runtimes, 3),
                "busy_s": round(sum(runtimes), 1),
            }
        )
    background = [r for r in rows if r["task"].split(".")[0] in BACKGROUND_QUEUES]
    window = run.load_s + run.drain_s
    return {
        "by_task": rows,
        "background_busy_s": round(sum(r["busy_s"] for r in background), 1),
        "background_busy_share": round(sum(r["busy_s"] for r in background) / window, 3) if window else None,
    }


MINING_TASKS = (task_names.EXTRACTION_EXTRACT, task_names.FLUSH, task_names.COMPACTION_COMPACT)
EMBEDDING_TASKS = (
    task_names.EMBED_PENDING,
    task_names.EMBED_TRANSCRIPT,
    task_names.EMBED_MEMORY,
)
# Task-event stamps and Postgres transaction-start times come from different clocks' reads: this much slack.
WINDOW_SLACK_S = 0.05


def _containing(tasks: Sequence[TaskRecord], at: float) -> TaskRecord | None:
    """The (last) task whose start -> end window holds `at`."""
    found = None
    for task in tasks:
        if task.started is None:
            continue
        if task.started - WINDOW_SLACK_S <= at <= (task.succeeded or task.started) + WINDOW_SLACK_S:
            found = task
    return found


def stage_section(run: RunData, traced: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Where each turn's vector-searchable lag went, from the task events that mined and embedded its memory:
    turn finished -> the mining task due (debounce: its ETA, or when it was sent) -> started (queue wait) ->
    the memory stored (the model call and the write) -> the embedding drain started (its queue wait) ->
    embedded. The segments add up to the lag; turns whose memory no task window holds count as untraced."""
    session_of = {row["id"]: row["session_id"] for row in run.db["turns"]}
    turns_by_id = {row["id"]: row for row in run.db["turns"]}
    mining: dict[int, list[TaskRecord]] = defaultdict(list)
    for task in run.tasks:
        if task.name in MINING_TASKS and task.started is not None:
            mining[int(task.kwargs.get("session_id", -1))].append(task)
    embedding = [t for t in run.tasks if t.name in EMBEDDING_TASKS and t.started is not None]
    calls: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for call in run.db["calls"]:
        if call["purpose"] in ("extraction", "flush") and call["session_id"] is not None:
            calls[call["session_id"]].append(call)
    stages: dict[str, list[float]] = defaultdict(list)
    by_task: Counter[str] = Counter()
    untraced = 0
    for record in run.done:
        turn = turns_by_id.get(record.turn_id or -1)
        memory = traced.get(record.token)
        if turn is None or turn["finished_at"] is None or memory is None or memory["embedded_at"] is None:
            continue
        session_id = session_of[turn["id"]]
        finished = turn["finished_at"].timestamp()
        stored = memory["created_at"].timestamp()
        embedded = memory["embedded_at"].timestamp()
        miner = _containing(mining.get(session_id, []), stored)
        drain = _containing(embedding, embedded)
        if miner is None or miner.sent is None or miner.started is None or drain is None or drain.started is None:
            untraced += 1
            continue
        due = max(miner.sent, miner.eta or miner.sent)
        by_task[miner.name.removeprefix(task_names.PREFIX)] += 1
        stages["debounce"].append(due - finished)
        stages["mining_queue_wait"].append(miner.started - due)
        stages["mining_run_to_stored"].append(stored - miner.started)
        started = miner.started
        for call in calls.get(session_id, []):
            if started - WINDOW_SLACK_S <= call["created_at"].timestamp() <= stored + WINDOW_SLACK_S:
                stages["model_call"].append(call["duration_ms"] / 1000)
                break
        stages["embedding_queue_wait"].append(drain.started - stored)
        stages["embedding_run_to_embedded"].append(embedded - drain.started)
        stages["due_to_embedded"].append(embedded - due)
    return {
        "method": "task events: the mining task (extract, flush or compact) of the turn's session whose "
        "task-started -> task-succeeded window holds the memory's created_at, and the embedding drain whose window "
        "holds its embedded_at; debounce = finished -> max(sent, ETA); the segments add up to the lag "
        "(model_call is part of mining_run_to_stored; due_to_embedded is everything after the debounce)",
        "traced": sum(by_task.values()),
        "untraced": untraced,
        "mined_by": dict(by_task.most_common()),
        **{name: dist(values) for name, values in stages.items()},
    }


def lag_section(run: RunData) -> dict[str, Any]:
    turns_by_id = {row["id"]: row for row in run.db["turns"]}
    first_memory: dict[str, dict[str, Any]] = {}
    for memory in run.db["memories"]:
        token = str(memory["key"]).removeprefix("note/")
        if memory["key"].startswith("note/") and (
            token not in first_memory or memory["created_at"] < first_memory[token]["created_at"]
        ):
            first_memory[token] = memory
    stored: list[float] = []
    searchable: list[float] = []
    from_accept: list[float] = []
    embed_step: list[float] = []
    by_profile: dict[str, list[float]] = defaultdict(list)
    missing: list[str] = []
    for record in run.done:
        turn = turns_by_id.get(record.turn_id or -1)
        traced = first_memory.get(record.token)
        if turn is None or turn["finished_at"] is None:
            continue
        if traced is None or traced["embedded_at"] is None:
            missing.append(record.token)
            continue
        finished_at = turn["finished_at"].timestamp()
        embedded_at = traced["embedded_at"].timestamp()
        stored.append(traced["created_at"].timestamp() - finished_at)
        searchable.append(embedded_at - finished_at)
        from_accept.append(embedded_at - turn["created_at"].timestamp())
        embed_step.append(embedded_at - traced["created_at"].timestamp())
        by_profile[run.plans[record.session].profile].append(embedded_at - finished_at)
    probe: dict[str, Any] = {"turns": 0}
    if run.probes is not None:
        found = list(run.probes.found.values())
        vector = [s["vector"] - s["done"] for s in found if s["vector"] is not None and s["done"] is not None]
        text = [s["text"] - s["done"] for s in found if s["text"] is not None and s["done"] is not None]
        probe = {
            "method": "POST /v1/users/{u}/memories/search for the token every 0.5 s, from when the client saw "
            "the turn done until a memory keyed by it comes back with a vector leg",
            "turns": len(found),
            "searchable": dist(vector),
            "found_by_text_leg": dist(text),
            "never_found": sum(1 for s in found if s["vector"] is None),
            "searches": run.probes.searches,
            "errors": run.probes.errors,
        }
    return {
        "method": "db, every turn: turns.finished_at -> memories.created_at (stored) -> first embedding of its chunk "
        "(embedding_cache.created_at, written with the first memory_chunks row; searchable), for the memory keyed "
        "note/<the turn's token>; both are transaction-start times, so they read early by the transaction's length",
        "stored": dist(stored),
        "searchable": dist(searchable),
        "searchable_from_accept": dist(from_accept),
        "stored_to_embedded": dist(embed_step),
        # The gateway stores the user message when it accepts the turn, so an extraction scheduled by the
        # session's previous turn can mine it while the turn itself still waits in the queue.
        "stored_before_turn_finished": sum(1 for value in stored if value < 0),
        "searchable_by_profile": {name: dist(by_profile[name]) for name in PROFILE_NAMES},
        "turns_without_searchable_memory": len(missing),
        "stages": stage_section(run, first_memory),
        "missing_tokens": missing[:10],
        "probe": probe,
    }


def compaction_section(run: RunData) -> dict[str, Any]:
    done = [
        t for t in run.tasks if t.name == task_names.COMPACTION_COMPACT and (t.result or "").startswith("'compacted")
    ]
    # A session over the threshold is compacted by its next extraction, in the extraction's model call.
    with_extraction = [
        t for t in run.tasks if t.name == task_names.EXTRACTION_EXTRACT and "compacted" in (t.result or "")
    ]
    return {
        "method": "Celery task events of the tasks that compacted (engram.compaction.compact, or an "
        "engram.extraction.extract whose result says it compacted too): task-started -> task-succeeded (it "
        "returns right after its commit; runtime as Celery measured it); queue wait = task-sent (by the turn "
        "worker's after_turn), or its ETA for a delayed extraction, -> task-started; summary call = "
        "llm_calls.duration_ms",
        "count": len(done) + len(with_extraction),
        "by_extraction": len(with_extraction),
        "run": dist([t.runtime for t in [*done, *with_extraction] if t.runtime is not None]),
        "queue_wait": dist(
            [
                t.started - due
                for t in [*done, *with_extraction]
                if t.started is not None and (due := t.eta or t.sent) is not None
            ]
        ),
        "trigger_to_commit": dist([t.succeeded - t.sent for t in done if t.succeeded and t.sent]),
        "summary_call": dist([c["duration_ms"] / 1000 for c in run.db["calls"] if c["purpose"] == "summary"], 3),
        "per_session": dist([float(s["compaction_count"]) for s in run.db["sessions"]]),
    }


def queue_section(run: RunData) -> dict[str, Any]:
    columns = [*QUEUES, "reserved"]
    timeline: list[dict[str, Any]] = []
    done_times = [(r.done_seen or 0) - run.origin for r in run.done]
    end = max((t for t, _ in run.samples), default=0.0)
    start = 0.0
    while start <= end:
        bucket = [d for t, d in run.samples if start <= t < start + TIMELINE_BUCKET_S]
        if bucket:
            entry: dict[str, Any] = {"t": int(start)}
            entry.update({c: max(d.get(c, 0) for d in bucket) for c in columns})
            entry["turns_done"] = sum(1 for t in done_times if start <= t < start + TIMELINE_BUCKET_S)
            timeline.append(entry)
        start += TIMELINE_BUCKET_S
    load = [d for t, d in run.samples if t <= run.load_s]
    thirds = [load[i * len(load) // 3 : (i + 1) * len(load) // 3] for i in range(3)]
    return {
        "timeline": timeline,
        "peak": {c: max((d.get(c, 0) for _, d in run.samples), default=0) for c in columns},
        # A queue whose maximum keeps rising from third to third is not keeping up with the load.
        "max_by_load_third": {
            c: [max((d.get(c, 0) for d in third), default=0) for third in thirds]
            for c in ("turns", "extraction", "flush", "compaction", "embeddings", "reserved")
        },
        "samples": len(run.samples),
    }


def totals_section(run: RunData) -> dict[str, Any]:
    active = [m for m in run.db["memories"] if m["valid_until"] is None]
    chunks = run.db["transcript_chunks"][0]
    return {
        "sessions": len(run.db["sessions"]),
        "memories_active": len(active),
        "memories_from_turns": len({m["key"] for m in active if str(m["key"]).startswith("note/")}),
        "memories_by_source": dict(Counter(m["source"] for m in active)),
        "compactions": sum(s["compaction_count"] for s in run.db["sessions"]),
        "transcript_chunks": int(chunks["n"]),
        "transcript_chunks_embedded": int(chunks["embedded"]),
        "transcript_vector_lag_s": dist([float(row["lag"]) for row in run.db["unit_lags"]]),
        "messages_not_mined": int(run.db["unmined"][0]["n"]),
    }


def analyse(run: RunData, drain_state: str) -> dict[str, Any]:
    done = run.done
    by_task, in_compaction = split_extraction_calls(run)
    return {
        "turns_expected": run.args.sessions * run.args.turns,
        "turns": len(run.records),
        "turns_done": len(done),
        "turns_failed": [
            {"session": r.session, "turn": r.number, "status": r.status, "error": r.error}
            for r in run.records
            if r.status != "done"
        ][:20],
        "load_s": round(run.load_s, 1),
        "turns_per_s": round(len(done) / run.load_s, 2) if run.load_s else None,
        "submit_503": {
            "responses": sum(len(r.submit_503) for r in run.records),
            "turns": sum(1 for r in run.records if r.submit_503),
            "bodies": dict(Counter(body for r in run.records for body in r.submit_503)),
        },
        "turn_e2e_s": dist([r.done_seen - r.submitted for r in done if r.done_seen]),
        "turn_worker_ms": {
            key: dist([float(r.timings[key]) for r in done if key in r.timings], 0)
            for key in ("queued_ms", "run_ms", "llm_ms")
        },
        "drain_s": round(run.drain_s, 1),
        "drain_state": drain_state,
        "llm_calls": llm_section(run, in_compaction),
        "extraction_vs_gaps": gap_section(run, by_task, in_compaction),
        "tasks": task_section(run),
        "extraction_lag_s": lag_section(run),
        "compaction_s": compaction_section(run),
        "queues": queue_section(run),
        "totals": totals_section(run),
    }


def headline(summary: dict[str, Any], run: RunData) -> dict[str, Any]:
    """The figures issue 13 tracks, lifted from the sections above (no second measurement):
    vector-searchable lag = turn finished -> the first embedding of the memory traced to it; transcript vector
    lag = a message stored -> its transcript unit's vector stored (full text finds the unit at once); text-searchable
    lag = turn finished -> that memory stored (the full-text leg reads `memories.search_tsv`, written with the
    row); sustained turns/s = turns done over load plus drain, i.e. the rate at which turns went all the way
    through the pipeline (a backlog that outlasts the load lowers it); and those issue 31 tracks, the background
    model calls per 100 turns and the share of their prompt read from the prompt cache."""
    lag = summary["extraction_lag_s"]
    busy_s = run.load_s + run.drain_s
    units = summary["totals"]["transcript_vector_lag_s"]
    return {
        "vector_searchable_lag_p50_s": lag["searchable"]["p50"],
        "vector_searchable_lag_p95_s": lag["searchable"]["p95"],
        "transcript_vector_lag_p50_s": units["p50"],
        "transcript_vector_lag_p95_s": units["p95"],
        "text_searchable_lag_p95_s": lag["stored"]["p95"],
        "sustained_turns_per_s": round(summary["turns_done"] / busy_s, 2) if busy_s else None,
        "background_calls_per_100_turns": summary["llm_calls"]["background_per_100_turns"],
        "background_cached_share": summary["llm_calls"]["background_tokens"]["cached_share"],
    }


# ---------------------------------------------------------------------------------------------------
# Logs


_NOISE = re.compile(r"\b\d+(\.\d+)?\b|0x[0-9a-f]+|[0-9a-f]{16,}")
_INTERESTING = re.compile(r"\b(error|exception|traceback|critical|warning)\b", re.IGNORECASE)
_BANNER = re.compile(r"logfile ->")  # Celery's start-up banner names the log level
_PG_LEVEL = re.compile(r"\b(ERROR|FATAL|PANIC|WARNING):")
_PG_FOLLOW = re.compile(r"\b(DETAIL|HINT|CONTEXT|STATEMENT):")


def _log_entries(path: Path) -> list[str]:
    """The lines of a log, with Postgres's DETAIL/HINT/CONTEXT/STATEMENT lines (and their indented
    continuations) joined to the ERROR they explain: a deadlock is only readable with its DETAIL."""
    entries: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        follows = _PG_FOLLOW.search(line) or line.startswith(("\t", "  "))
        if entries and follows and _PG_LEVEL.search(entries[-1]):
            entries[-1] += " | " + line.strip()
        else:
            entries.append(line)
    return entries


def scan_logs(logs: dict[str, Path]) -> dict[str, Any]:
    """Warnings and errors in every process's log: counts per process and the distinct messages
    (numbers and ids masked, so one problem repeated a thousand times is one excerpt)."""
    counts: dict[str, int] = {}
    excerpts: dict[str, tuple[str, str, int]] = {}
    for name, path in logs.items():
        if not path.exists():
            continue
        n = 0
        for entry in _log_entries(path):
            if not _INTERESTING.search(entry) or _BANNER.search(entry):
                continue
            n += 1
            shape = _NOISE.sub("#", entry.split(" | ")[0].split("] ", 1)[-1])[:160]
            first_name, first, seen = excerpts.get(shape, (name, entry[:1200], 0))
            excerpts[shape] = (first_name, first, seen + 1)
        counts[name] = n
    ordered = sorted(excerpts.values(), key=lambda e: -e[2])
    return {
        "lines_by_process": counts,
        "distinct": len(excerpts),
        "excerpts": [{"process": name, "count": seen, "line": line} for name, line, seen in ordered[:LOG_EXCERPTS]],
    }


# ---------------------------------------------------------------------------------------------------
# Report


def _d(d: dict[str, Any], unit: str = "s") -> str:
    if not d.get("n"):
        return "-"
    return f"p50 {d['p50']:g} {unit}, p95 {d['p95']:g} {unit}, max {d['max']:g} {unit} (n={d['n']})"


def _pq(d: dict[str, Any]) -> str:
    return "-" if not d.get("n") else f"{d['p50']:g}/{d['p95']:g}"


def render(summary: dict[str, Any], header: str) -> str:
    config, cpu = summary["config"], summary["cpu"]
    lines = [
        header,
        f"load: {summary['turns_done']}/{summary['turns_expected']} turns done in {summary['load_s']:g} s "
        f"({summary['turns_per_s']} turns/s); pipeline idle {summary['drain_s']:g} s after the last turn "
        f"({summary['drain_state']})",
        f"   turn end-to-end {_d(summary['turn_e2e_s'])}",
        "   worker's timings: "
        + "; ".join(f"{k.removesuffix('_ms')} {_d(v, 'ms')}" for k, v in summary["turn_worker_ms"].items()),
        f"   CPU over load+drain ({cpu['wall_s']:g} s): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in cpu["cpu_s"].items())
        + f" = {cpu['cores_busy_ours']} of {config['cpus']} cores; other processes on the machine kept "
        f"{cpu['cores_busy_others']} cores busy (1-min load average at the end {cpu['loadavg_1m_end']})",
    ]
    lines += _render_calls(summary)
    lines += _render_lag(summary["extraction_lag_s"])
    lines.append(
        f"     headline: vector-searchable p50 {summary['vector_searchable_lag_p50_s']} s, "
        f"p95 {summary['vector_searchable_lag_p95_s']} s; "
        f"text-searchable p95 {summary['text_searchable_lag_p95_s']} s; "
        f"sustained {summary['sustained_turns_per_s']} turns/s (turns over load + drain)"
    )
    lines += _render_compaction(summary["compaction_s"])
    lines += _render_queues(summary["queues"])
    totals = summary["totals"]
    lines += [
        "",
        "5. totals",
        f"   turns/s {summary['turns_per_s']}; memories stored {totals['memories_active']} "
        f"({totals['memories_from_turns']} traced to a turn's token; by source {totals['memories_by_source']}); "
        f"compactions {totals['compactions']}; transcript units {totals['transcript_chunks']} "
        f"({totals['transcript_chunks_embedded']} embedded; message stored -> its vector "
        f"{_d(totals['transcript_vector_lag_s'])}); messages never mined {totals['messages_not_mined']}",
    ]
    if summary["turns_failed"]:
        lines.append(f"   FAILED TURNS: {summary['turns_failed']}")
    if summary["submit_503"]["responses"]:
        lines.append(
            f"   POST /turns answered 503 {summary['submit_503']['responses']} times ({summary['submit_503']['turns']} "
            f"turns, retried with the same Idempotency-Key): {summary['submit_503']['bodies']}"
        )
    logs = summary["logs"]
    lines += ["", f"logs: warning/error lines by process {logs['lines_by_process']} ({logs['distinct']} distinct)"]
    lines += [f"   [{e['process']} x{e['count']}] {e['line']}" for e in logs["excerpts"]]
    return "\n".join(lines)


def _render_calls(summary: dict[str, Any]) -> list[str]:
    calls, gaps, tasks = summary["llm_calls"], summary["extraction_vs_gaps"], summary["tasks"]
    debounce = summary["config"]["debounce_s"]
    lines = [
        "",
        "1. LLM calls per 100 turns (llm_calls table"
        + ("; GET /v1/sessions/{key} agrees)" if calls.get("api_cross_check_matches") else "; API DISAGREES)"),
        f"   {'purpose':<12}{'calls':>8}{'per 100 turns':>15}{'failed':>8}",
    ]
    lines += [
        f"   {p:<12}{n:>8}{calls['per_100_turns'][p]:>15}{calls['failed'].get(p, 0):>8}"
        for p, n in calls["by_purpose"].items()
    ]
    bg = calls["background_tokens"]
    lines += [
        f"   background (every purpose but chat): {calls['background_calls']} calls, "
        f"{calls['background_per_100_turns']} per 100 turns; prompt {bg['prompt']} tokens, "
        f"{bg['cached_share']} of them read from the prompt cache",
        f"   {'purpose':<12}{'uncached in':>13}{'cache read':>12}{'cache write':>13}{'cached share':>14}",
    ]
    lines += [
        f"   {p:<12}{t['input']:>13}{t['cache_read']:>12}{t['cache_write']:>13}{t['cached_share']!s:>14}"
        for p, t in calls["tokens_by_purpose"].items()
    ]
    lines += [
        f"   (extraction includes {calls['extraction_inside_compaction']} calls made by compaction tasks, which mine "
        "the session before compacting it)",
        "",
        f"   extraction vs idle gaps, mean per session. gaps: a turn finished > {debounce:g} s after the previous one",
        "   (each finish re-arms the debounce) + the idle tail after the last turn; planned: think times",
        f"   > {debounce:g} s + tail, before turn latency stretched them; modelled: the debounce (stretched for",
        "   chatty sessions) and its cap replayed over the finish times (a worker that is never late);",
        "   extraction: calls by extraction tasks;",
        "   +compaction: extraction calls by compaction tasks",
        f"   {'profile':<8}{'sessions':>9}{'turns':>7}{'planned':>9}{'gaps':>7}{'modelled':>10}{'extraction':>12}"
        f"{'+compaction':>13}{'calls/turn':>12}",
    ]
    lines += [
        f"   {r['profile']:<8}{r['sessions']:>9}{r['turns']:>7g}{r['planned_gaps']:>9g}{r['idle_gaps']:>7g}"
        f"{r['modelled']:>10g}{r['extraction_calls']:>12g}{r['in_compaction']:>13g}{r['extraction_calls_per_turn']:>12g}"
        for r in gaps["by_profile"]
    ]
    lines.append("   per session, gaps -> extraction calls (+ compaction's), by profile:")
    for name in PROFILE_NAMES:
        cells = [
            f"#{s['session']} {s['idle_gaps']}->{s['extraction_calls']}"
            + (f"+{s['in_compaction']}" if s["in_compaction"] else "")
            for s in gaps["per_session"]
            if s["profile"] == name
        ]
        for first in range(0, len(cells), 8):
            lines.append(f"     {name if first == 0 else '':<7} " + "  ".join(cells[first : first + 8]))
    corr = gaps["correlation"]
    lines.append(
        f"   per-session correlation of extraction calls with: gaps r={corr['idle_gaps']}, "
        f"modelled r={corr['modelled']}, turns r={corr['turns']}"
    )
    if gaps["sessions_far_above_gaps"]:
        lines.append(f"   SESSIONS FAR ABOVE THEIR GAPS: {gaps['sessions_far_above_gaps']}")
    lines += [
        "",
        "   tasks (Celery events; wait = sent, or ETA for delayed tasks, -> started):",
        f"   {'task':<40}{'n':>6}{'wait p50/p95 s':>16}{'run p50/p95 s':>16}{'busy s':>8}  outcomes",
    ]
    for row in tasks["by_task"]:
        outcomes = ", ".join(f"{k}: {v}" for k, v in row["outcomes"].items())
        lines.append(
            f"   {row['task']:<40}{row['n']:>6}{_pq(row['wait_s']):>16}{_pq(row['run_s']):>16}"
            f"{row['busy_s']:>8g}  {outcomes}"
        )
    lines.append(
        f"   worker-background busy {tasks['background_busy_s']:g} s = "
        f"{(tasks['background_busy_share'] or 0) * 100:.0f} % of load+drain (one process)"
    )
    return lines


def _render_lag(lag: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "2. extraction lag: turn finished -> a memory derived from it is searchable",
        f"   {lag['method']}",
        f"     stored                  {_d(lag['stored'])}",
        f"     searchable              {_d(lag['searchable'])}",
        f"     searchable from accept  {_d(lag['searchable_from_accept'])}",
        f"     stored -> embedded      {_d(lag['stored_to_embedded'])}",
        f"     stored before its turn finished (mined while the turn was queued): {lag['stored_before_turn_finished']}",
    ]
    lines += [f"     searchable, {name:<10} {_d(d)}" for name, d in lag["searchable_by_profile"].items()]
    lines.append(f"     turns without a searchable memory: {lag['turns_without_searchable_memory']}")
    stages = lag["stages"]
    lines.append(
        f"   per stage, {stages['traced']} turns traced through task events ({stages['untraced']} not); mined by "
        + ", ".join(f"{k} {v}" for k, v in stages["mined_by"].items())
    )
    lines += [f"     {name:<26}{_d(d)}" for name, d in stages.items() if isinstance(d, dict) and "p95" in d]
    probe = lag["probe"]
    if probe["turns"]:
        lines += [
            f"   API probe, {probe['turns']} sampled turns: {probe['method']}",
            f"     searchable              {_d(probe['searchable'])}",
            f"     found by text leg       {_d(probe['found_by_text_leg'])}",
            f"     never found {probe['never_found']}; {probe['searches']} searches, {probe['errors']} errors",
        ]
    return lines


def _render_compaction(comp: dict[str, Any]) -> list[str]:
    return [
        "",
        f"3. compaction: {comp['count']} compactions ({comp['by_extraction']} by an extraction), "
        f"per session {_d(comp['per_session'], '')}",
        f"   {comp['method']}",
        f"     run (start -> commit)   {_d(comp['run'])}",
        f"     queue wait              {_d(comp['queue_wait'])}",
        f"     trigger -> commit       {_d(comp['trigger_to_commit'])} (compaction tasks)",
        f"     summary call            {_d(comp['summary_call'])}",
    ]


def _render_queues(queues: dict[str, Any]) -> list[str]:
    columns = [*QUEUES, "reserved"]
    widths = [max(len(c), 5) + 1 for c in columns]
    lines = [
        "",
        f"4. queue depth: max per {TIMELINE_BUCKET_S:g} s of LLEN sampled every {QUEUE_SAMPLE_S:g} s; reserved = "
        "delivered, not acknowledged (running, prefetched, or held until their ETA)",
        "   " + f"{'t (s)':>6}" + "".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)) + "  turns done",
    ]
    lines += [
        "   "
        + f"{row['t']:>6}"
        + "".join(f"{row[c]:>{w}}" for c, w in zip(columns, widths, strict=True))
        + f"{row['turns_done']:>12}"
        for row in queues["timeline"]
    ]
    lines += [
        "   peak: " + ", ".join(f"{c} {v}" for c, v in queues["peak"].items() if v),
        "   max per third of the load phase: " + "; ".join(f"{c} {v}" for c, v in queues["max_by_load_third"].items()),
    ]
    return lines


# ---------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    parser.add_argument("--llm-latency-ms", type=float, default=50.0, help="the fake model's latency, every call")
    parser.add_argument(
        "--think-ms",
        default="700,15000",
        help="SHORT,PAUSE: mean think time while chatting (below the debounce) and mean idle pause (above it)",
    )
    parser.add_argument("--ramp-s", type=float, default=60.0, help="sessions start spread over this many seconds")
    parser.add_argument("--debounce-s", type=float, default=5.0, help="ENGRAM_EXTRACTION_DEBOUNCE_SECONDS")
    parser.add_argument("--max-wait-s", type=float, default=20.0, help="ENGRAM_EXTRACTION_MAX_WAIT_SECONDS")
    parser.add_argument(
        "--debounce-stretch",
        type=float,
        default=Settings.model_fields["extraction_debounce_stretch"].default,
        help="ENGRAM_EXTRACTION_DEBOUNCE_STRETCH (default: the setting's default)",
    )
    parser.add_argument("--compaction-tokens", type=int, default=1500, help="ENGRAM_COMPACTION_THRESHOLD_TOKENS")
    # `engram up`'s own defaults (ops/stack.py runs worker-turns and worker-background with these), so the
    # benchmark's default load is measured on the processes a default `engram up` starts.
    fields = Settings.model_fields
    parser.add_argument(
        "--turn-concurrency",
        type=int,
        default=fields["turn_worker_concurrency"].default,
        help="worker-turns processes (default: ENGRAM_TURN_WORKER_CONCURRENCY's default)",
    )
    parser.add_argument(
        "--background-concurrency",
        type=int,
        default=fields["background_worker_concurrency"].default,
        help="worker-background processes (default: ENGRAM_BACKGROUND_WORKER_CONCURRENCY's default)",
    )
    parser.add_argument("--no-beat", action="store_true", help="do not run celery beat (the sweeps)")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS for the engram processes (0: unset, as `engram up` runs them)",
    )
    parser.add_argument(
        "--embedding-backend",
        choices=get_args(fields["embedding_backend"].annotation),
        default=os.environ.get("ENGRAM_EMBEDDING_BACKEND") or fields["embedding_backend"].default,
        help="ENGRAM_EMBEDDING_BACKEND of the engram processes (default: the caller's, else the setting's default)",
    )
    parser.add_argument("--probe-every", type=int, default=20, help="probe search for every Nth turn (0: none)")
    parser.add_argument("--turn-timeout", type=float, default=180.0)
    parser.add_argument("--drain-timeout", type=float, default=180.0, help="wait for the pipeline after the load")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    parser.add_argument("--json", action="store_true", help="print only the JSON summary (one line)")
    args = parser.parse_args(argv)
    try:
        short_ms, pause_ms = (float(part) for part in args.think_ms.split(","))
    except ValueError:
        parser.error("--think-ms takes SHORT,PAUSE in milliseconds, e.g. 700,15000")
    args.short_s, args.pause_s = short_ms / 1000, pause_ms / 1000
    if args.sessions < 1 or args.turns < 2:
        parser.error("--sessions must be at least 1 and --turns at least 2")
    # The profiles promise thinks below the debounce and pauses above it.
    if 2.0 * args.short_s >= args.debounce_s or 0.35 * args.pause_s <= args.debounce_s:
        print(
            "warning: with these --think-ms the short thinks or the pauses straddle the debounce",
            file=sys.stderr,
        )
    return args


def pipeline_env(args: argparse.Namespace) -> dict[str, str]:
    env = {
        "ENGRAM_AUTO_MEMORY": "true",
        "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": str(args.debounce_s),
        "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": str(args.max_wait_s),
        "ENGRAM_EXTRACTION_DEBOUNCE_STRETCH": str(args.debounce_stretch),
        "ENGRAM_COMPACTION_THRESHOLD_TOKENS": str(args.compaction_tokens),
        # This benchmark reads what every task did from Celery's task events (TaskEvents), off by default.
        "ENGRAM_CELERY_TASK_EVENTS": "true",
        "ENGRAM_EMBEDDING_BACKEND": args.embedding_backend,
    }
    if args.torch_threads:
        # torch sizes its intra-op pool from this at import; by default every process takes all cores,
        # and several embedding processes on a small machine then mostly wait on each other.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.torch_threads)
    # The stack drops the caller's ENGRAM_* settings, except where an export made beforehand lives.
    for name in EMBEDDING_RUNTIME_SETTINGS:
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def run_config(args: argparse.Namespace, events_error: str | None) -> dict[str, Any]:
    return {
        "sessions": args.sessions,
        "turns": args.turns,
        "llm_latency_ms": args.llm_latency_ms,
        "think_ms": args.think_ms,
        "ramp_s": args.ramp_s,
        "debounce_s": args.debounce_s,
        "max_wait_s": args.max_wait_s,
        "debounce_stretch": args.debounce_stretch,
        "compaction_tokens": args.compaction_tokens,
        "workers": {"worker-turns": args.turn_concurrency, "worker-background": args.background_concurrency},
        "beat": not args.no_beat,
        "probe_every": args.probe_every,
        "torch_threads": args.torch_threads or None,
        "embedding_backend": args.embedding_backend,
        "seed": args.seed,
        "cpus": os.cpu_count(),
        "events_error": events_error,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    # In this process: only in-process can the fake pick a reply from each request's content.
    fake = FakeLLM(latency_s=args.llm_latency_ms / 1000)
    fake.default = pipeline_reply
    run_id = uuid.uuid4().hex[:6]
    user_prefix = f"pipe-{run_id}-"
    with BenchRun(keep=args.keep) as cleanup:
        cleanup.callback(fake.stop)
        fake.start()
        workdir = cleanup.workdir("engram-bench-pipeline-")
        stack = LocalStack(
            workdir,
            args.turn_concurrency,
            llm_url=fake.anthropic_base_url,
            workers=up_workers(args.turn_concurrency, args.background_concurrency),
            beat=not args.no_beat,
            env=pipeline_env(args),
        )
        cleanup.callback(stack.stop)
        print(f"starting a private stack in {workdir} ...", file=sys.stderr, flush=True)
        api_key = stack.start()
        events = TaskEvents(stack.redis_url)
        events.start()
        cleanup.callback(events.stop)  # stopping a stopped thread again is harmless
        events.ready.wait(10)
        print("warming up ...", file=sys.stderr, flush=True)
        warm_up(stack.url, api_key, stack.database_url, 120)
        plans = make_plans(args, run_id)
        roots: dict[str, int | None] = {child.name: child.pid for child in stack.children if child.proc is not None}
        roots["postgres"] = stack.postgres.pid if stack.postgres else None
        roots["valkey"] = stack.redis.proc.pid if stack.redis and stack.redis.proc else None
        roots["bench"] = os.getpid()
        cpu = CpuMeter(roots, own="bench")
        cpu.start()
        events.reset()
        origin = time.time()
        sampler = QueueSampler(stack.redis_url, origin)
        sampler.start()
        cleanup.callback(sampler.stop)
        probes: SearchProbes | None = None
        if args.probe_every:
            probes = SearchProbes(stack.url, api_key)
            probes.start()
            cleanup.callback(probes.stop, 0)
        print(
            f"running {args.sessions} sessions x {args.turns} turns (starts spread over {args.ramp_s:g} s) ...",
            file=sys.stderr,
            flush=True,
        )
        records = drive(stack.url, api_key, plans, args, probes)
        load_s = time.time() - origin
        stack.check_alive()
        print(f"load done in {load_s:.0f} s; draining the pipeline ...", file=sys.stderr, flush=True)
        drain_s, drain_state = drain(sampler, stack.database_url, user_prefix, args.drain_timeout)
        cpu_used = cpu.stop()
        if probes is not None:
            probes.stop(30)
        sampler.stop()
        time.sleep(1.0)  # the last task events
        events.stop()
        stack.check_alive()
        db_rows = fetch_db(stack.database_url, user_prefix)
        api_totals = api_calls_by_purpose(stack.url, api_key, plans)
        run = RunData(
            args, plans, records, db_rows, events.snapshot(), sampler.samples, probes, origin, load_s, drain_s
        )
        summary = analyse(run, drain_state)
        summary.update(headline(summary, run))
        summary["llm_calls"]["api_cross_check_matches"] = dict(api_totals) == summary["llm_calls"]["by_purpose"]
        logs = {path.stem: path for path in sorted(stack.log_dir.glob("*.log"))}
        if stack.postgres is not None:
            logs["postgres"] = stack.postgres.pgdata / "log"
        summary["logs"] = scan_logs(logs)
        summary["cpu"] = cpu_used
        summary["config"] = run_config(args, events.error)
        header = (
            f"engram pipeline benchmark: {args.sessions} sessions x {args.turns} turns; fake Anthropic in-process, "
            f"{args.llm_latency_ms:g} ms per call; debounce {args.debounce_s:g} s "
            f"(stretch {args.debounce_stretch:g}, cap {args.max_wait_s:g} s), "
            f"compaction at {args.compaction_tokens} tokens; worker-turns x{args.turn_concurrency}, "
            f"worker-background x{args.background_concurrency}{', beat' if not args.no_beat else ''}; "
            f"{os.cpu_count()} CPUs"
        )
        # --json: the JSON line alone; without it the report, then the JSON line all the same.
        emit("" if args.json else render(summary, header), summary, True)
        healthy = summary["turns_done"] == args.sessions * args.turns and drain_state == "idle"
        # Whatever the logs complain about is worth a post-mortem: keep the data dir.
        cleanup.keep = cleanup.keep or not healthy or summary["logs"]["distinct"] > 0
        return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
