"""Stalls for `python -m ops.bench.chaos --stall`: a dependency that stops answering without dying (SIGSTOP,
then SIGCONT), and every gateway request's latency against its documented limit."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil

STALL_KINDS = ("stall-postgres", "stall-model", "stall-redis")
# A request answered this much after its limit still counts as in time: the client's clock includes the
# connect and the gateway's own queueing, which the limit (started when the app sees the request) does not.
LIMIT_GRACE_S = 1.0


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the postmaster and its backends), parent first."""
    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """SIGSTOP `pids` for the block; SIGCONT whatever happens (a stopped server outliving the run would
    ignore the SIGTERM that stops the stack)."""
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
    outcomes: Counter[str] = field(default_factory=Counter)  # "200", "503 dependency_timeout", "connection error"…

    def record(self, latency_s: float, limit_s: float, outcome: str) -> None:
        excess = latency_s - limit_s
        with self.lock:
            self.count += 1
            self.outcomes[outcome] += 1
            self.worst_excess_s = excess if self.count == 1 else max(self.worst_excess_s, excess)
            self.over_limit += excess > LIMIT_GRACE_S

    def summary(self) -> dict[str, object]:
        with self.lock:
            return {
                "requests": self.count,
                "requests_over_limit": self.over_limit,
                "worst_request_excess_s": round(self.worst_excess_s, 2),
                "request_outcomes": dict(self.outcomes.most_common()),
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
