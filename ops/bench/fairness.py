"""Fairness between tenants: tenant B's turn latency alone, then while tenant A's burst of turns waits.

    python -m ops.bench.fairness                      # A bursts 300 turns
    python -m ops.bench.fairness --burst 2000 --json  # the issue's figure
    python -m ops.bench.fairness --max-active-sessions 0  # without the per-tenant bound, to compare

A private stack (ops/bench/stack.py) with `engram up`'s workers (`worker-turns` and `worker-background`) and
the fake LLM answering after --llm-latency-ms (a model's reply time: what a turn mostly waits for). Two
tenants. First B alone sends one turn every --interval seconds (--b-turns of them) and each is timed from
POST to done (long poll); then A sends --burst turns over --a-sessions sessions as fast as its threads can,
without waiting for them, and once they are all accepted B does the same again. Reported: B's end-to-end
p50/p95 both ways and their ratio (the goal: p95 under the burst at most 2 x alone), and how many of A's
turns were still open when B's last turn finished (the burst was still there while B was measured).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ops.bench.harness import BenchError, BenchRun, bench_parser, distribution, emit, ratio, run_main
from ops.bench.stack import LocalStack, up_workers
from ops.bench.turns import TurnResult, _one_turn, drive
from ops.client import EngramClient
from shared.access.auth import create_key
from shared.infra.db import connect

GOAL_RATIO = 2.0


def new_tenant_key(database_url: str, tenant: str) -> str:
    with connect(database_url) as conn:
        key = create_key(conn, tenant, "bench")
        conn.commit()
    return key


def paced_turns(url: str, api_key: str, count: int, interval: float, timeout: float, label: str) -> list[TurnResult]:
    """`count` turns of one session, one starting every `interval` seconds (each timed to done in a thread of
    its own, so a slow turn does not delay the next one's start)."""
    abort = threading.Event()
    results: list[TurnResult] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        client = EngramClient(url, api_key, timeout=60)
        try:
            result = _one_turn(client, f"{label}-b", "bob", 0, index, timeout, abort)
        finally:
            client.close()
        with lock:
            results.append(result)

    threads = []
    start = time.perf_counter()
    for index in range(count):
        delay = start + index * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # the pacing of the load, not a wait for an outcome
        thread = threading.Thread(target=one, args=(index,), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout + 5)
    return results


def burst(url: str, api_key: str, turns: int, sessions: int, threads: int) -> tuple[int, float]:
    """Submit `turns` turns over `sessions` sessions without waiting for them; (accepted, seconds taken)."""
    started = time.perf_counter()
    local = threading.local()

    def submit(index: int) -> bool:
        if not hasattr(local, "client"):
            local.client = EngramClient(url, api_key, timeout=60)
        session = index % sessions
        try:
            local.client.submit_turn(f"burst-{session}", f"user-{session}", f"Burst turn {index}: note {index * 7}.")
        except Exception:  # counted as not accepted; the figure says how many were
            return False
        return True

    with ThreadPoolExecutor(threads) as pool:
        accepted = sum(pool.map(submit, range(turns)))
    return accepted, time.perf_counter() - started


def open_turns(database_url: str, tenant_key_prefix: str) -> int:
    with connect(database_url) as conn:
        row = conn.execute(
            """SELECT count(*) AS n FROM turns t JOIN sessions s ON s.id = t.session_id
               WHERE s.session_key LIKE %s AND t.status IN ('queued', 'running')""",
            (f"{tenant_key_prefix}%",),
        ).fetchone()
    return int(row["n"]) if row else 0


def latencies(results: list[TurnResult]) -> tuple[list[float], int]:
    done = [r.e2e_ms for r in results if r.status == "done" and r.e2e_ms is not None]
    return done, len(results) - len(done)


def split(results: list[TurnResult]) -> dict[str, dict[str, float | int | None]]:
    """Where B's time went, by the worker's own accounting: waiting to be claimed (the queue, what fairness
    bounds) and running (model call and engram's work, which a busy machine slows whatever the queue)."""
    done = [r for r in results if r.status == "done"]
    return {
        name: distribution([float(r.timings[name]) for r in done if r.timings.get(name) is not None])
        for name in ("queued_ms", "run_ms")
    }


def _pair(dist: dict[str, Any]) -> str:
    return f"{dist['p50']}/{dist['p95']}"


def render(summary: dict[str, Any]) -> str:
    alone, loaded = summary["b_alone_ms"], summary["b_during_burst_ms"]
    config = summary["config"]
    lines = [
        f"engram fairness benchmark: tenant A bursts {config['burst']} turns over {config['a_sessions']} sessions; "
        f"tenant B sends one turn every {config['interval_s']:g} s; fake LLM {config['llm_latency_ms']:g} ms; "
        f"ENGRAM_TENANT_MAX_ACTIVE_SESSIONS={config['max_active_sessions']}, "
        f"ENGRAM_DRAIN_MAX_TURNS={config['drain_max_turns']}; auto memory {config['auto_memory']}; "
        f"{config['cpus']} CPUs",
        f"  B alone         p50 {alone['p50']} ms  p95 {alone['p95']} ms  max {alone['max']} ms  (n={alone['n']})",
        f"  B during burst  p50 {loaded['p50']} ms  p95 {loaded['p95']} ms  max {loaded['max']} ms  (n={loaded['n']})",
        f"  B queued (claimed after accept) p50/p95: alone {_pair(summary['b_alone_split']['queued_ms'])} ms, "
        f"during burst {_pair(summary['b_during_burst_split']['queued_ms'])} ms",
        f"  B running p50/p95: alone {_pair(summary['b_alone_split']['run_ms'])} ms, "
        f"during burst {_pair(summary['b_during_burst_split']['run_ms'])} ms",
        f"  ratio           p50 {summary['p50_ratio']}  p95 {summary['p95_ratio']}  (goal: p95 <= {GOAL_RATIO:g})",
        f"  A: {summary['a_accepted']} turns accepted in {summary['a_submit_s']} s; "
        f"{summary['a_open_after_b']} still open when B's last turn was done",
        f"  B turns not done: alone {summary['b_alone_failed']}, during burst {summary['b_during_burst_failed']}",
        f"  goal met: {summary['goal_met']}",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.fairness", __doc__, keep=True)
    parser.add_argument("--burst", type=int, default=300, help="turns tenant A sends at once")
    parser.add_argument("--a-sessions", type=int, default=20, help="sessions A's turns are spread over")
    parser.add_argument("--a-threads", type=int, default=8, help="A's concurrent submitters")
    parser.add_argument("--b-turns", type=int, default=20, help="turns B sends in each phase")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between B's turns")
    parser.add_argument("--llm-latency-ms", type=float, default=200.0, help="fake LLM delay per call")
    parser.add_argument(
        "--max-active-sessions", type=int, default=None, help="ENGRAM_TENANT_MAX_ACTIVE_SESSIONS (default: its default)"
    )
    parser.add_argument("--drain-max-turns", type=int, default=None, help="ENGRAM_DRAIN_MAX_TURNS")
    parser.add_argument("--turn-timeout", type=float, default=600.0, help="give up on a B turn after this many s")
    parser.add_argument(
        "--no-auto-memory",
        action="store_true",
        help="ENGRAM_AUTO_MEMORY=false: no extraction after turns (the queue's share of B's wait, without the CPU "
        "the burst's memory work takes on a small machine)",
    )
    parser.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for the stack to start")
    args = parser.parse_args(argv)
    if min(args.burst, args.a_sessions, args.a_threads, args.b_turns) < 1 or args.interval <= 0:
        parser.error("--burst, --a-sessions, --a-threads and --b-turns must be at least 1, --interval above 0")
    if args.max_active_sessions is not None and args.max_active_sessions < 0:
        parser.error("--max-active-sessions must be 0 (no bound) or more")
    if args.drain_max_turns is not None and args.drain_max_turns < 1:
        parser.error("--drain-max-turns must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    from shared.infra.config import Settings

    env: dict[str, str] = {}
    if args.max_active_sessions is not None:
        env["ENGRAM_TENANT_MAX_ACTIVE_SESSIONS"] = str(args.max_active_sessions)
    if args.drain_max_turns is not None:
        env["ENGRAM_DRAIN_MAX_TURNS"] = str(args.drain_max_turns)
    if args.no_auto_memory:
        env["ENGRAM_AUTO_MEMORY"] = "false"
    defaults = Settings.model_fields
    max_active = args.max_active_sessions
    max_active = Settings().turn_slots_per_tenant if max_active is None else max_active
    drain_turns = args.drain_max_turns
    drain_turns = defaults["drain_max_turns"].default if drain_turns is None else drain_turns
    with BenchRun(keep=args.keep) as run:
        workdir = run.workdir("engram-fairness-")
        stack = LocalStack(
            workdir, 2, args.llm_latency_ms, workers=up_workers(), env=env, ready_timeout=args.ready_timeout
        )
        run.callback(stack.stop)
        print(f"starting a private stack in {workdir} ...", file=sys.stderr, flush=True)
        key_a = stack.start()
        key_b = new_tenant_key(stack.database_url, "tenant-b")
        # Warm-up (imports, pools, the first turn of each pool process, over ten seconds on a busy machine):
        # not measured. Both tenants at once, so that every turn worker process runs turns whatever the slots.
        abort = threading.Event()
        run.callback(abort.set)
        with ThreadPoolExecutor(2) as pool:
            warm = [
                *pool.map(lambda key: drive(stack.url, key, 2, 3, args.turn_timeout, abort, "warmup"), (key_a, key_b))
            ]
        failed = [r for load in warm for r in load.results if r.status != "done"]
        if failed:
            raise BenchError(f"a warm-up turn did not succeed: {failed[0].status}: {failed[0].error}")

        print("B alone ...", file=sys.stderr, flush=True)
        alone = paced_turns(stack.url, key_b, args.b_turns, args.interval, args.turn_timeout, "alone")
        stack.check_alive()
        print(f"A bursts {args.burst} turns ...", file=sys.stderr, flush=True)
        accepted, submit_s = burst(stack.url, key_a, args.burst, args.a_sessions, args.a_threads)
        print("B during the burst ...", file=sys.stderr, flush=True)
        loaded = paced_turns(stack.url, key_b, args.b_turns, args.interval, args.turn_timeout, "loaded")
        a_open = open_turns(stack.database_url, "burst-")
        stack.check_alive()

        alone_ms, alone_failed = latencies(alone)
        loaded_ms, loaded_failed = latencies(loaded)
        alone_dist, loaded_dist = distribution(alone_ms), distribution(loaded_ms)
        p95_ratio = ratio(loaded_dist["p95"], alone_dist["p95"])
        summary: dict[str, Any] = {
            "b_alone_ms": alone_dist,
            "b_during_burst_ms": loaded_dist,
            "b_alone_split": split(alone),
            "b_during_burst_split": split(loaded),
            "p50_ratio": ratio(loaded_dist["p50"], alone_dist["p50"]),
            "p95_ratio": p95_ratio,
            "goal_met": p95_ratio is not None and p95_ratio <= GOAL_RATIO and not alone_failed + loaded_failed,
            "a_accepted": accepted,
            "a_submit_s": round(submit_s, 1),
            "a_open_after_b": a_open,
            "b_alone_failed": alone_failed,
            "b_during_burst_failed": loaded_failed,
            "config": {
                "burst": args.burst,
                "a_sessions": args.a_sessions,
                "b_turns": args.b_turns,
                "interval_s": args.interval,
                "llm_latency_ms": args.llm_latency_ms,
                "max_active_sessions": max_active,
                "drain_max_turns": drain_turns,
                "auto_memory": not args.no_auto_memory,
                "cpus": os.cpu_count(),
            },
        }
        emit(render(summary), summary, args.json)
        return 0 if not alone_failed + loaded_failed else 1


if __name__ == "__main__":
    sys.exit(main())
