"""Debounced scheduling of per-session work with a cap on the total wait, one delayed task at a time.

Each schedule records a fresh token and its time; the session's work runs once the session has been
quiet since its latest schedule — or once it has waited `max_wait` since its first pending schedule, so a
session that never goes quiet is still processed.

How long "quiet" is depends on the session (`quiet_period`): `debounce`, or for a chatty session — its
previous schedule came less than `max_wait` before this one — `stretch` times that gap, within `max_wait`.
A user who takes 9 s per turn (a 2 s think on a loaded server) is still talking, not idle: a 5 s debounce
alone would extract every one of their turns on its own, one model call each. Each schedule stores its
quiet period, so a due task judges quiet by the latest schedule's.

At most one delayed task per session is in the broker: a schedule sends a task only when none is pending
(the `queued` key, SET NX, holds that task's token). When the pending task comes due and later turns have
arrived meanwhile, it sends itself again for the rest of the wait (`Decision.rearm`) instead of every
turn sending a task of its own. One task per turn filled a single background process's FIFO queue with
thousands of superseded no-ops under load, and a due extraction waited behind all of them.

Redis holds only these coordination keys; what was processed is decided by the watermark in Postgres.
A lost task leaves its `queued` key behind for at most `queued_ttl`; the pending-extraction sweep forces a
new task only for sessions without that key (`has_pending`): under a backlog the pending task is late, not
lost, and a second one per session doubled the very queue it waited in. A duplicate task (an expired key,
a forced schedule) runs or stands down.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import redis

KEY_TTL_SECONDS = 3600
# A task that came due this much before its computed time is still on time (clocks of two processes).
EARLY_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class Schedule:
    token: str
    countdown: float
    send: bool  # False: a task of this session is already pending and will take this schedule into account


@dataclass(frozen=True)
class Decision:
    """What a due task does: run now, stand down (another task is pending), or send itself again."""

    run: bool
    rearm: Schedule | None = None  # send the task again with this token after this countdown


def _keys(kind: str, session_id: int) -> tuple[str, str, str, str]:
    prefix = f"engram:debounce:{kind}:{session_id}"
    return f"{prefix}:token", f"{prefix}:first", f"{prefix}:last", f"{prefix}:queued"


def _quiet_key(kind: str, session_id: int) -> str:
    return f"engram:debounce:{kind}:{session_id}:quiet"


def quiet_period(debounce: float, max_wait: float, stretch: float, gap: float | None) -> float:
    """How long the session must be quiet after a schedule that came `gap` seconds after the previous one
    (None: no previous one): the debounce, or for a chatty session (gap < max_wait) `stretch` times the gap,
    never less than the debounce nor more than the max wait (the cap bounds the wait anyway)."""
    if gap is None or stretch <= 0 or gap >= max_wait:
        return debounce
    return max(debounce, min(max_wait, stretch * max(gap, 0.0)))


def queued_ttl(debounce: float, max_wait: float) -> int:
    """How long a pending task's claim lasts: past its longest wait, plus a margin for a busy queue."""
    return int(debounce + max_wait) + 60


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def schedule(
    client: redis.Redis,
    kind: str,
    session_id: int,
    *,
    debounce: float,
    max_wait: float,
    stretch: float = 0.0,
    now: float | None = None,
    force: bool = False,
) -> Schedule:
    """Record new work for the session. `send` says whether the caller must send a task (none is pending,
    or `force`: the pending one is presumed lost). `stretch`: see `quiet_period` (0: always `debounce`)."""
    now = time.time() if now is None else now
    token = uuid.uuid4().hex
    token_key, first_key, last_key, queued_key = _keys(kind, session_id)
    ttl = queued_ttl(debounce, max_wait)
    previous_raw = client.get(last_key)
    previous = float(previous_raw) if previous_raw else None
    quiet = quiet_period(debounce, max_wait, stretch, None if previous is None else now - previous)
    pipe = client.pipeline()
    pipe.set(first_key, repr(now), nx=True, ex=KEY_TTL_SECONDS)
    # The quiet period is written before the token: a task that sees the new token sees its quiet period.
    pipe.set(_quiet_key(kind, session_id), repr(quiet), ex=KEY_TTL_SECONDS)
    pipe.set(token_key, token, ex=KEY_TTL_SECONDS)
    pipe.set(last_key, repr(now), ex=KEY_TTL_SECONDS)
    if force:
        pipe.set(queued_key, token, ex=ttl)
    else:
        pipe.set(queued_key, token, nx=True, ex=ttl)
    pipe.get(first_key)
    *_, claimed, first_raw = pipe.execute()
    first = float(first_raw) if first_raw else now
    # Never later than the cap: the last schedule before the cap fires at the cap.
    countdown = max(0.0, min(quiet, first + max_wait - now))
    return Schedule(token, countdown, send=bool(claimed))


def decide(
    client: redis.Redis,
    kind: str,
    session_id: int,
    token: str,
    *,
    debounce: float,
    max_wait: float,
    now: float | None = None,
) -> Decision:
    """Called by a task when it comes due: run if the session is quiet (no schedule since this task's, or the
    latest one is as old as its quiet period), or the cap is reached; otherwise the pending task sends itself
    again for the rest of the wait, and any other task stands down."""
    now = time.time() if now is None else now
    token_key, first_key, last_key, queued_key = _keys(kind, session_id)
    latest_raw, first_raw, last_raw, pending_raw, quiet_raw = client.mget(
        token_key, first_key, last_key, queued_key, _quiet_key(kind, session_id)
    )
    latest, pending = _text(latest_raw), _text(pending_raw)
    first = float(first_raw) if first_raw else None
    last = float(last_raw) if last_raw else None
    quiet = float(quiet_raw) if quiet_raw else debounce
    if latest is None or latest == token:
        return Decision(run=True)  # the latest schedule (or the keys expired: run rather than lose work)
    if first is not None and now - first >= max_wait - EARLY_TOLERANCE_S:
        return Decision(run=True)
    if last is None or now - last >= quiet - EARLY_TOLERANCE_S:
        return Decision(run=True)
    if pending is not None and pending != token:
        return Decision(run=False)  # another task is the pending one: it carries the later schedules
    due = last + quiet if first is None else min(last + quiet, first + max_wait)
    client.set(queued_key, latest, ex=queued_ttl(debounce, max_wait))
    return Decision(run=False, rearm=Schedule(latest, max(0.0, due - now), send=True))


def has_pending(client: redis.Redis, kind: str, session_id: int) -> bool:
    """Whether a task of the session is in the broker (its claim is set and has not expired)."""
    return bool(client.exists(_keys(kind, session_id)[3]))


def started(client: redis.Redis, kind: str, session_id: int) -> None:
    """A run began (before it reads the work): the cap counts from the next pending schedule, not this one's,
    and a schedule from now on sends a task of its own."""
    _, first_key, _, queued_key = _keys(kind, session_id)
    client.delete(first_key, queued_key)
