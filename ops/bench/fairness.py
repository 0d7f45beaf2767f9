"""Fairness between tenants: tenant B's turn latency alone, then while tenant A's burst of turns waits (goal: B's
p95 under the burst at most 2 x alone). Figures: docs/benchmarks.md, "Fairness between tenants".
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

from ops.bench.harness import BenchError, BenchRun, bench_parser, distribution, emit, outline, ratio, run_main
from ops.bench.pipeline import query
from ops.bench.stack import up_workers
from ops.bench.turns import TurnResult, _one_turn, drive
from ops.client import EngramClient
from shared.access.auth import create_key
from shared.infra.db import connect

GOAL_RATIO = 2.0
A_SESSIONS, A_THREADS = 20, 8  # A's burst: spread over this many sessions, sent by this many threads
LLM_LATENCY_MS, TURN_TIMEOUT_S = 200.0, 600.0  # the fake model's reply time; a B turn not done then is given up


def paced_turns(url: str, api_key: str, count: int, interval: float, timeout: float, label: str) -> list[TurnResult]:
    """`count` turns of one session, one starting every `interval` seconds (each timed to done in a thread of
    its own, so a slow turn does not delay the next one's start)."""
    results: list[TurnResult] = []

    def one(index: int) -> None:
        with closing(EngramClient(url, api_key, timeout=60)) as client:
            results.append(_one_turn(client, f"{label}-b", "bob", 0, index, timeout, threading.Event()))

    start = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        for index in range(count):
            time.sleep(max(0.0, start + index * interval - time.perf_counter()))  # the load's pacing
            pool.submit(one, index)
    return results


def burst(url: str, api_key: str, turns: int) -> tuple[int, float]:
    """Submit `turns` turns over A_SESSIONS sessions without waiting for them; (accepted, seconds taken)."""
    started = time.perf_counter()
    local = threading.local()

    def submit(index: int) -> bool:
        if not hasattr(local, "client"):
            local.client = EngramClient(url, api_key, timeout=60)
        session = index % A_SESSIONS
        try:
            local.client.submit_turn(f"burst-{session}", f"user-{session}", f"Burst turn {index}: note {index * 7}.")
        except Exception:  # counted as not accepted; the figure says how many were
            return False
        return True

    with ThreadPoolExecutor(A_THREADS) as pool:
        accepted = sum(pool.map(submit, range(turns)))
    return accepted, time.perf_counter() - started


def split(results: list[TurnResult]) -> dict[str, dict[str, float | int | None]]:
    """Where B's time went, by the worker's own accounting: waiting to be claimed (the queue, what fairness
    bounds) and running (model call and engram's work, which a busy machine slows whatever the queue)."""
    done = [r for r in results if r.status == "done"]
    return {
        name: distribution([float(r.timings[name]) for r in done if r.timings.get(name) is not None])
        for name in ("queued_ms", "run_ms")
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.fairness", __doc__, keep=True)
    parser.add_argument("--burst", type=int, default=300, help="turns tenant A sends at once")
    parser.add_argument("--b-turns", type=int, default=20, help="turns B sends in each phase")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between B's turns")
    parser.add_argument("--max-active-sessions", type=int, help="ENGRAM_TENANT_MAX_ACTIVE_SESSIONS (0: no bound)")
    args = parser.parse_args(argv)
    if min(args.burst, args.b_turns) < 1 or args.interval <= 0 or (args.max_active_sessions or 0) < 0:
        parser.error("--burst and --b-turns must be at least 1, --interval above 0, --max-active-sessions 0 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(lambda: bench(parse_args(argv)))


def bench(args: argparse.Namespace) -> int:
    bound = args.max_active_sessions
    env = {} if bound is None else {"ENGRAM_TENANT_MAX_ACTIVE_SESSIONS": str(bound)}
    with BenchRun(keep=args.keep) as run:
        stack, key_a = run.stack("engram-fairness-", up_workers(), LLM_LATENCY_MS, env=env)
        with connect(stack.database_url) as conn:
            key_b = create_key(conn, "tenant-b", "bench")
            conn.commit()
        # Warm-up (imports, pools, the first turn of each pool process): not measured. Both tenants at once, so
        # that every turn worker process runs turns whatever the slots.
        abort = threading.Event()
        run.callback(abort.set)
        with ThreadPoolExecutor(2) as pool:
            warm = pool.map(lambda key: drive(stack.url, key, 2, 3, TURN_TIMEOUT_S, abort, "warmup"), (key_a, key_b))
            failed = [r for load in warm for r in load.results if r.status != "done"]
        if failed:
            raise BenchError(f"a warm-up turn did not succeed: {failed[0].status}: {failed[0].error}")

        print("B alone ...", file=sys.stderr, flush=True)
        alone = paced_turns(stack.url, key_b, args.b_turns, args.interval, TURN_TIMEOUT_S, "alone")
        stack.check_alive()
        print(f"A bursts {args.burst} turns ...", file=sys.stderr, flush=True)
        accepted, submit_s = burst(stack.url, key_a, args.burst)
        print("B during the burst ...", file=sys.stderr, flush=True)
        loaded = paced_turns(stack.url, key_b, args.b_turns, args.interval, TURN_TIMEOUT_S, "loaded")
        (row,) = query(
            stack.database_url,
            """SELECT count(*) AS n FROM turns t JOIN sessions s ON s.id = t.session_id
               WHERE s.session_key LIKE 'burst-%' AND t.status IN ('queued', 'running')""",
        )
        stack.check_alive()

    alone_failed, loaded_failed = (sum(r.status != "done" for r in results) for results in (alone, loaded))
    b_failed = alone_failed + loaded_failed
    alone_dist, loaded_dist = (
        distribution([r.e2e_ms for r in rs if r.status == "done" and r.e2e_ms is not None]) for rs in (alone, loaded)
    )
    p95_ratio = ratio(loaded_dist["p95"], alone_dist["p95"])
    summary: dict[str, Any] = {
        "b_alone_ms": alone_dist,
        "b_during_burst_ms": loaded_dist,
        "b_alone_split": split(alone),
        "b_during_burst_split": split(loaded),
        "p50_ratio": ratio(loaded_dist["p50"], alone_dist["p50"]),
        "p95_ratio": p95_ratio,
        "goal_met": p95_ratio is not None and p95_ratio <= GOAL_RATIO and not b_failed,
        "a_accepted": accepted,
        "a_submit_s": round(submit_s, 1),
        "a_open_after_b": int(row["n"]),
        "b_alone_failed": alone_failed,
        "b_during_burst_failed": loaded_failed,
    }
    title = f"engram fairness: A bursts {args.burst} turns; goal: B's p95 during the burst <= {GOAL_RATIO:g} x alone"
    emit(outline(title, summary), summary, args.json)
    return 0 if not b_failed else 1


if __name__ == "__main__":
    sys.exit(main())
