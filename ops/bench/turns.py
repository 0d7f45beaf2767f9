"""Turn latency, throughput and CPU of concurrent sessions on a private stack with a zero-latency fake LLM, next to
floors from the same run (GET /healthz, a no-op task); the goals are ratios to those (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import numpy as np
import psycopg
import redis
from celery import Celery
from pgvector import Vector
from psycopg.rows import dict_row

from ops.bench.harness import (
    BenchRun,
    MemorySampler,
    bench_parser,
    cpu_seconds,
    distribution,
    emit,
    outline,
    ratio,
    run_main,
)
from ops.bench.stack import BenchError, LocalStack
from ops.client import EngramAPIError, EngramClient
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import embedder_from_settings
from shared.infra.config import Settings
from shared.memory.rows import Scope
from shared.memory.search import search
from shared.queueing import task_names
from shared.queueing.diagnostics import new_reply_key, wait_for_pong

TERMINAL = ("done", "failed")
CLIENT = "client"  # the benchmark's own process: its children are the stack, counted under their own names
# Issue 31's goals: engram's CPU per turn (gateway + worker + Postgres trees) over a no-op task's worker CPU,
# and the first turns' accept p99 over a /healthz burst's p99.
ENGRAM_PROCESSES = ("gateway", "worker", "postgres")
GOALS = {"engram_cpu_over_noop_worker_cpu": 7.0, "first_accept_p99_over_healthz_burst_p99": 3.0}
FLOOR_CALLS = 200  # requests, model calls and embeddings timed per part of the floor
USER_TEXT = "Turn 4. Please remember that my lucky number today is 304, and that my sister visits on Friday."
REPLY_TEXT = "Noted: your lucky number today is 304, and your sister visits on Friday. Anything else?"


def _dist(values: Sequence[float]) -> dict[str, float | int | None]:
    return distribution(values, (50, 99))


def cpu_ms_per_unit(before: dict[str, float], after: dict[str, float], units: int) -> dict[str, float] | None:
    """CPU milliseconds per turn (or per no-op task) for each process tree, and their total."""
    if not units:
        return None
    per = {name: round((after[name] - before[name]) * 1000 / units, 2) for name in before}
    per["total"] = round(sum(per.values()), 2)
    return per


def together(count: int, target: Callable[[int], None]) -> float:
    """target(0), …, target(count - 1) on threads released at one barrier; when they were released."""
    barrier = threading.Barrier(count + 1)

    def run(number: int) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        target(number)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
    except BaseException:
        barrier.abort()  # Ctrl-C before the start: release the threads instead of leaving them waiting
        raise
    started = time.perf_counter()
    for thread in threads:
        while thread.is_alive():  # short joins keep the main thread responsive to Ctrl-C and SIGTERM
            thread.join(0.2)
    return started


@dataclass
class TurnResult:
    session: int
    index: int
    status: str  # done, failed, or error (the client gave up: HTTP error, timeout)
    accept_ms: float | None = None
    e2e_ms: float | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    done_at: float | None = None  # perf_counter


@dataclass
class LoadRun:
    results: list[TurnResult]
    started: float  # when the sessions were released, all at one barrier (the first turns are a burst)
    finished: float


def drive(
    url: str, api_key: str, sessions: int, turns: int, timeout: float, abort: threading.Event, label: str
) -> LoadRun:
    results: list[TurnResult] = []
    run_id = uuid.uuid4().hex[:8]

    def session(number: int) -> None:
        client = EngramClient(url, api_key, timeout=30)
        try:
            for index in range(turns):
                if abort.is_set():
                    return
                result = _one_turn(
                    client, f"{label}-{run_id}-{number}", f"user-{number}", number, index, timeout, abort
                )
                results.append(result)
                if result.status == "error":
                    return  # the session's later turns would queue behind one we no longer follow
        finally:
            client.close()

    started = together(sessions, session)
    return LoadRun(results, started, time.perf_counter())


def wait_turn(
    client: EngramClient, key: str, user: str, text: str, timeout: float, abort: threading.Event | None = None
) -> tuple[dict[str, Any], float, float]:
    """Send a turn and long-poll it until done or failed: the turn (with its turn_id), seconds to accept, to end."""
    t0 = time.perf_counter()
    accepted = turn = client.submit_turn(key, user, text)
    accept_s = time.perf_counter() - t0
    while turn["status"] not in TERMINAL:
        if abort is not None and abort.is_set():
            raise BenchError("aborted")
        if time.perf_counter() - t0 > timeout:
            raise BenchError(f"turn {accepted['turn_id']} not finished after {timeout:.0f}s")
        turn = client.get_turn(accepted["turn_id"], wait=30)
    return {**turn, "turn_id": accepted["turn_id"]}, accept_s, time.perf_counter() - t0


def _one_turn(
    client: EngramClient, key: str, user: str, session: int, index: int, timeout: float, abort: threading.Event
) -> TurnResult:
    text = f"Turn {index + 1}. Please remember that my lucky number today is {session * 100 + index}."
    try:
        turn, accept_s, e2e_s = wait_turn(client, key, user, text, timeout, abort)
    except (EngramAPIError, httpx.HTTPError, BenchError) as exc:
        return TurnResult(session, index, "error", error=f"{type(exc).__name__}: {exc}")
    timings = turn.get("timings") or {}
    return TurnResult(
        session, index, turn["status"], accept_s * 1000, e2e_s * 1000, timings, turn.get("error"), time.perf_counter()
    )


def probe_healthz(url: str, stop: threading.Event, latencies: list[float], errors: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                ok = client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            (latencies if ok else errors).append((time.perf_counter() - t0) * 1000)
            stop.wait(0.02)


def healthz_burst(url: str, requests: int) -> list[float]:
    """One `GET /healthz` on each of `requests` new connections at one barrier, as every session's first turn."""
    latencies: list[float] = []
    clients = [httpx.Client(base_url=url, timeout=30) for _ in range(requests)]

    def one(number: int) -> None:
        t0 = time.perf_counter()
        if clients[number].get("/healthz").status_code == 200:
            latencies.append((time.perf_counter() - t0) * 1000)

    together(requests, one)
    for client in clients:
        client.close()
    return latencies


def noop_round_trips(redis_url: str, sessions: int, per_session: int, timeout: float) -> dict[str, Any]:
    """The turn pattern without engram's work: `sessions` threads, each sending no-op tasks one after another."""
    app = Celery("engram-bench-noop", broker=redis_url)
    app.conf.broker_connection_retry_on_startup = True
    replies = redis.Redis.from_url(redis_url)
    times: list[float] = []
    lost = 0

    def session(_: int) -> None:
        nonlocal lost
        for _ in range(per_session):
            key = new_reply_key()
            t0 = time.perf_counter()
            app.send_task(task_names.TURNS_PING, kwargs={"reply_to": key}, queue="turns")
            if wait_for_pong(replies, key, timeout):
                times.append((time.perf_counter() - t0) * 1000)
            else:
                lost += 1

    together(sessions, session)
    replies.close()
    app.close()
    return {"round_trip_ms": _dist(times), "lost": lost}


def summarize(run: LoadRun, sessions: int, turns: int) -> dict[str, Any]:
    results, started = run.results, run.started
    done = [r for r in results if r.status == "done"]
    series = {
        "accept_ms": [r.accept_ms for r in done if r.accept_ms is not None],
        "e2e_ms": [r.e2e_ms for r in done if r.e2e_ms is not None],
        # the worker's queue wait, and its run minus LLM time
        "queued_ms": [float(r.timings["queued_ms"]) for r in done if "queued_ms" in r.timings],
        "run_overhead_ms": [float(r.timings["overhead_ms"]) for r in done if "overhead_ms" in r.timings],
    }
    # Throughput over the span in which turns were being served: first POST to last done.
    span = max(max((r.done_at for r in done if r.done_at is not None), default=run.finished) - started, 1e-9)
    return {
        "sessions": sessions,
        "turns_per_session": turns,
        "turns_expected": sessions * turns,
        "turns_done": len(done),
        "turns_failed": sum(r.status == "failed" for r in results),
        "turns_errored": sum(r.status == "error" for r in results),
        "wall_s": round(span, 3),
        "turns_per_s": round(len(done) / span, 2),
        **{name: _dist(values) for name, values in series.items()},
        # Every session's first turn is sent at one barrier on a new connection: the burst, apart.
        "accept_first_turn_ms": _dist([r.accept_ms for r in done if r.index == 0 and r.accept_ms is not None]),
        "accept_later_turns_ms": _dist([r.accept_ms for r in done if r.index > 0 and r.accept_ms is not None]),
        "first_errors": sorted({r.error for r in results if r.status != "done" and r.error})[:3],
    }


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """The ratios the performance goals are stated in."""
    accept, healthz = summary["accept_ms"], summary["healthz_ms"]
    return {
        "accept_p99_over_healthz_p99": ratio(accept["p99"], healthz["p99"]),
        # Where the accept tail comes from: the later turns against the same probe, and the opening burst
        # against a burst of /healthz sent the same way (one barrier, new connections).
        "later_accept_p99_over_healthz_p99": ratio(summary["accept_later_turns_ms"]["p99"], healthz["p99"]),
        "first_accept_p99_over_healthz_burst_p99": ratio(
            summary["accept_first_turn_ms"]["p99"], summary["healthz_burst_ms"]["p99"]
        ),
        **engram_cpu_over_noop(summary),
        **floor_over_noop(summary.get("floor_parts_cpu_ms")),
        "goals": GOALS,
    }


def engram_cpu_over_noop(summary: dict[str, Any]) -> dict[str, Any]:
    """Engram's CPU per turn (gateway + worker + Postgres trees) and its ratio to a no-op task's worker CPU."""
    turn, noop = summary.get("cpu_ms_per_turn"), summary.get("cpu_ms_per_noop_task")
    if not turn or not noop or not noop.get("worker") or any(name not in turn for name in ENGRAM_PROCESSES):
        return {}
    engram_ms = sum(turn[name] for name in ENGRAM_PROCESSES)
    return {
        "engram_cpu_ms_per_turn": round(engram_ms, 2),
        "noop_worker_cpu_ms_per_task": round(noop["worker"], 2),
        "engram_cpu_over_noop_worker_cpu": ratio(engram_ms, noop["worker"]),
    }


def floor_over_noop(parts: dict[str, float] | None) -> dict[str, Any]:
    """The least CPU a turn can cost with the parts engram is built from, each in its cheapest form, over a
    no-op task's worker CPU: what a real turn does beyond those parts counts 0."""
    if not parts or not parts["noop_task_worker"]:
        return {}
    floor_ms = sum(parts.values())
    return {
        "cpu_ms_per_turn_floor": round(floor_ms, 2),
        "floor_over_noop_worker_cpu": ratio(floor_ms, parts["noop_task_worker"]),
    }


def cpu_ms_per_call(fn: Callable[[], object], clock: Callable[[], float] = time.process_time) -> float:
    """CPU ms per call of `fn` after 20 warm-up calls (past psycopg's prepare threshold too, so statements run
    prepared, as pooled ones do); `clock`: CPU seconds of the process that does the work (default this one)."""
    for _ in range(20):
        fn()
    started = clock()
    for _ in range(FLOOR_CALLS):
        fn()
    return (clock() - started) * 1000 / FLOOR_CALLS


def postgres_turn_ms(database_url: str, vector: list[float]) -> float:
    """Postgres's CPU (the measured connection's backend) for the least a turn stores and reads there, in one
    transaction: its two messages (each with its transcript unit, by the product's trigger), their vectors, one
    hybrid search of the user's memories. A second connection deletes the two messages after each round and
    vacuums every tenth, so every round finds the session as the turns left it. The turn row, the history and
    context reads and the client's side count 0."""
    with (
        psycopg.connect(database_url, row_factory=dict_row, autocommit=True) as conn,  # each round commits
        psycopg.connect(database_url, autocommit=True) as cleanup,
    ):
        register_vector_types(conn)
        session = conn.execute("SELECT tenant_id, user_id, id FROM sessions ORDER BY id LIMIT 1").fetchone()
        assert session is not None  # the benchmark's sessions
        row = (session["tenant_id"], session["user_id"], session["id"])
        rounds = itertools.count()
        rng = np.random.default_rng(7)

        def turn() -> None:
            with conn.transaction():
                inserted = conn.execute(
                    """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
                       VALUES (%s, %s, %s, 'user', %s), (%s, %s, %s, 'assistant', %s) RETURNING id""",
                    (*row, USER_TEXT, *row, REPLY_TEXT),
                )
                ids = [r["id"] for r in inserted.fetchall()]
                # Each message its own vector, as in a turn (HNSW inserts of one vector again and again slow down).
                noisy = np.asarray(vector) + rng.normal(0.0, 0.05, size=(len(ids), len(vector)))
                with conn.cursor() as cursor:
                    cursor.executemany(
                        "UPDATE memory_chunks SET embedding = %s, embedded_at = now() WHERE message_id = %s",
                        [(Vector(v / np.linalg.norm(v)), i) for v, i in zip(noisy, ids, strict=True)],
                    )
                search(conn, Scope(row[0], row[1]), USER_TEXT, query_vector=vector)
            cleanup.execute("DELETE FROM session_messages WHERE id = ANY(%s)", (ids,))
            if next(rounds) % 10 == 9:  # dead rows would tax every later round's trigger and search
                cleanup.execute("VACUUM session_messages, memory_chunks")

        backend = {"postgres": conn.info.backend_pid}
        return cpu_ms_per_call(turn, lambda: cpu_seconds(backend)["postgres"])


def floor_parts(stack: LocalStack, noop_worker_ms: float) -> dict[str, float]:
    """The floor's parts (CPU ms): a no-op task's worker CPU, two GET /healthz (a turn's accept and its read),
    a streamed reply through the anthropic SDK, embedding the turn's two messages with the default embedder,
    Postgres storing them and searching once (postgres_turn_ms)."""
    assert stack.gateway is not None
    gateway = {"gateway": stack.gateway.pid}
    with httpx.Client(base_url=stack.url) as http:
        healthz_ms = cpu_ms_per_call(
            lambda: http.get("/healthz").raise_for_status(), lambda: cpu_seconds(gateway)["gateway"]
        )
    model = anthropic.Anthropic(api_key="bench-key", base_url=stack.gateway.env["ENGRAM_ANTHROPIC_BASE_URL"])
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": USER_TEXT}]

    def streamed_reply() -> None:
        with model.messages.stream(model="fake", max_tokens=256, messages=messages) as stream:
            for _ in stream.text_stream:
                pass

    embedder = embedder_from_settings(Settings())
    texts = itertools.cycle([USER_TEXT, REPLY_TEXT])
    return {
        "noop_task_worker": noop_worker_ms,
        "gateway_two_requests": round(2 * healthz_ms, 2),
        "model_call_sdk": round(cpu_ms_per_call(streamed_reply), 2),
        "embed_two_messages": round(2 * cpu_ms_per_call(lambda: embedder.embed([next(texts)])), 2),
        "postgres_store_and_search": round(postgres_turn_ms(stack.database_url, embedder.embed([USER_TEXT])[0]), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.turns", __doc__, keep=True)
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions (one thread each)")
    parser.add_argument("--turns", type=int, default=5, help="turns per session, sent one after another")
    parser.add_argument("--worker-concurrency", type=int, default=2, help="Celery pool processes")
    parser.add_argument("--warmup-turns", type=int, default=2, help="per pool process, not measured")
    parser.add_argument("--turn-timeout", type=float, default=120.0, help="give up on a turn after this many s")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1:
        parser.error("--sessions and --turns must be at least 1")
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    abort = threading.Event()
    with BenchRun(keep=args.keep) as run:
        stack, api_key = run.stack("engram-bench-", args.worker_concurrency)  # the fake LLM answers at once
        assert stack.gateway is not None and stack.postgres is not None
        engram = {"gateway": stack.gateway.pid, "worker": stack.workers[0].pid}
        sampler = run.enter_context(MemorySampler(engram))
        # Where the CPU of a turn goes, against a no-op task's.
        cpu_roots = {**engram, CLIENT: os.getpid()}
        cpu_roots.update({c.name: c.pid for c in stack.children if c.name == "fake-llm"})
        if stack.postgres.pid is not None:
            cpu_roots["postgres"] = stack.postgres.pid
        run.callback(abort.set)  # undone first: the client threads give up before the stack goes
        warmup_sessions = max(1, args.worker_concurrency)
        if args.warmup_turns > 0:
            # Imports, connection pools and each pool process's first prompt build happen here, unmeasured.
            warm = drive(stack.url, api_key, warmup_sessions, args.warmup_turns, args.turn_timeout, abort, "warmup")
            if bad := [r for r in warm.results if r.status != "done"]:
                raise BenchError(f"warm-up turn did not succeed: {bad[0].status}: {bad[0].error}")
        stack.check_alive()
        burst_floor = healthz_burst(stack.url, args.sessions)
        stop_probe = threading.Event()
        probe_ms: list[float] = []
        probe_errors: list[float] = []
        cpu_before = cpu_seconds(cpu_roots, own=CLIENT)
        probe = threading.Thread(
            target=probe_healthz, args=(stack.url, stop_probe, probe_ms, probe_errors), daemon=True
        )
        probe.start()
        try:
            measured = drive(stack.url, api_key, args.sessions, args.turns, args.turn_timeout, abort, "bench")
        finally:
            stop_probe.set()
            probe.join(35)
        cpu_after_turns = cpu_seconds(cpu_roots, own=CLIENT)
        stack.check_alive()
        details = summarize(measured, args.sessions, args.turns)
        details["healthz_ms"] = {**_dist(probe_ms), "errors": len(probe_errors)}
        details["healthz_burst_ms"] = _dist(burst_floor)
        details["noop"] = noop = noop_round_trips(stack.redis_url, args.sessions, args.turns, args.turn_timeout)
        cpu_after_noop = cpu_seconds(cpu_roots, own=CLIENT)
        details["cpu_ms_per_turn"] = cpu_ms_per_unit(cpu_before, cpu_after_turns, details["turns_done"])
        details["cpu_ms_per_noop_task"] = noop_cpu = cpu_ms_per_unit(
            cpu_after_turns, cpu_after_noop, noop["round_trip_ms"]["n"]
        )
        stack.check_alive()
        sampler.stop()  # before the floor, which times this process's own CPU
        sampler.sample()  # one last look, in case the peak came after the last tick
        details["memory"] = {name: peak.figures() for name, peak in sampler.peaks.items()}
        if noop_cpu:
            details["floor_parts_cpu_ms"] = floor_parts(stack, noop_cpu["worker"])
        details["config"] = {
            "worker_concurrency": args.worker_concurrency,
            "warmup_turns": warmup_sessions * args.warmup_turns,
            "cpus": os.cpu_count(),
        }
        summary = {**headline(details), **details}
        title = f"engram turn benchmark: {args.sessions} sessions x {args.turns} turns, {os.cpu_count()} CPUs"
        emit(outline(title, summary), summary, args.json)
        complete = summary["turns_done"] == summary["turns_expected"]
        run.keep = run.keep or not complete
        return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
