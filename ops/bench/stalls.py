"""Stalls for the chaos benchmark (`python -m ops.bench.chaos --stall`): a dependency that stops answering
without dying, and the gateway's time limit on every request.

- postgres: SIGSTOP of the postmaster and every backend (a backend keeps serving its connection when only
  the postmaster stops), SIGCONT after `--stall-seconds`;
- redis: SIGSTOP of valkey, then SIGCONT;
- model: the fake model server (in the benchmark's own process) holds its event loop for as long: nothing
  it serves, in flight or new, gets a byte, as under a SIGSTOP.

`RequestLog` keeps every gateway request's latency next to its documented limit
(ENGRAM_REQUEST_TIME_LIMIT_SECONDS, plus a long poll's wait), so the run reports requests over their limit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil

STALL_KINDS = ("stall-postgres", "stall-redis", "stall-model")
# A request answered this much after its limit still counts as in time: the client's clock includes the
# connect and the gateway's own queueing, which the limit (started when the app sees the request) does not.
LIMIT_GRACE_S = 1.0


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the postmaster and its backends), parent first."""
    try:
        parent = psutil.Process(pid)
        return [pid, *(child.pid for child in parent.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """SIGSTOP `pids` for the block; SIGCONT whatever happens (a stopped server outliving the run would
    ignore the SIGTERM that stops the stack). A backend forked meanwhile is continued too (it never was stopped)."""
    signal_all(pids, signal.SIGSTOP)
    try:
        yield
    finally:
        signal_all(pids, signal.SIGCONT)


@dataclass
class RequestLog:
    """Latency of every gateway request against its limit."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0
    over_limit: int = 0
    worst_excess_s: float = 0.0  # latency - limit of the slowest request relative to its limit (< 0: all in time)
    statuses: Counter[str] = field(default_factory=Counter)  # "503 dependency_timeout", "timeout (client)", …
    over: list[dict[str, object]] = field(default_factory=list)  # the first few requests over their limit

    def record(self, what: str, latency_s: float, limit_s: float, outcome: str) -> None:
        excess = latency_s - limit_s
        with self.lock:
            self.count += 1
            self.statuses[outcome] += 1
            self.worst_excess_s = excess if self.count == 1 else max(self.worst_excess_s, excess)
            if excess > LIMIT_GRACE_S:
                self.over_limit += 1
                if len(self.over) < 10:
                    self.over.append({"request": what, "latency_s": round(latency_s, 2), "limit_s": limit_s})

    def summary(self) -> dict[str, object]:
        with self.lock:
            return {
                "requests": self.count,
                "requests_over_limit": self.over_limit,
                "worst_request_excess_s": round(self.worst_excess_s, 2),
                "request_outcomes": dict(self.statuses.most_common()),
                "requests_over_limit_examples": list(self.over),
            }


def outcome_of(status_code: int, body: Callable[[], object]) -> str:
    """ "200", or a 5xx with its error code ("503 dependency_timeout")."""
    if status_code < 500:
        return str(status_code)
    try:
        parsed = body()
        code = parsed.get("code") if isinstance(parsed, dict) else None
    except ValueError:
        code = None
    return f"{status_code} {code}" if code else str(status_code)
