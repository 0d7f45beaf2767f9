"""Stalls for `python -m ops.bench.chaos --stall`: a dependency that stops answering without dying (SIGSTOP,
then SIGCONT), and every gateway request's latency against its documented limit."""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator

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


def request_summary(requests: list[tuple[float, str]]) -> dict[str, object]:
    """Requests as (latency - limit, outcome): how many, how many over their limit, the worst excess (< 0: all
    in time) and the outcomes ("200", "503 dependency_timeout", "connection error"…)."""
    excess = [over for over, _ in requests]
    return {
        "requests": len(requests),
        "requests_over_limit": sum(over > LIMIT_GRACE_S for over in excess),
        "worst_request_excess_s": round(max(excess), 2) if excess else None,
        "request_outcomes": dict(Counter(outcome for _, outcome in requests).most_common()),
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
