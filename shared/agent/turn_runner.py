"""Turn processing: one session at a time, turns in order, each turn exactly once.

`drain_session` is what the `turns` queue calls. It takes the session's Redis lock (a busy
session is left to the current holder, which drains every queued turn before letting go), then
claims turns oldest first. A turn's output — assistant and tool messages, reply, usage — is
written in one transaction guarded by the claim's attempt number, so a worker killed mid-turn
leaves nothing behind and the redelivered attempt writes the turn once.

A holder that died keeps its lock until the TTL runs out. A drain that finds the lock taken and
turns still open therefore does not just end: if the holder is provably dead (same machine, its
process gone) it takes the lock over at once; otherwise it says when to look again (when the
lock can have expired), and the task is retried then.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import structlog
from psycopg.types.json import Jsonb

from shared.agent.deps import TurnDeps
from shared.agent.model_loop import run_agent_loop
from shared.channels.deliveries import reply_ready
from shared.context.compiler import IntegrityViolation, TurnContext, context_queries, prepare_turn
from shared.context.history import relevant_memories, turn_start, turn_start_queries
from shared.infra import db
from shared.infra.db import Conn, fetch_together
from shared.infra.events import TurnEventPublisher
from shared.infra.locks import HeartbeatLock, holder, session_lock_name, take_over_if_holder_dead
from shared.infra.logging import get_logger
from shared.infra.metrics import observe_turn
from shared.infra.tracing import turn_span
from shared.llm.types import ChatMessage, LLMError, ToolCall
from shared.memory.rows import Scope
from shared.memory.search_reads import SearchReads, search_read_queries
from shared.text import estimate_tokens
from shared.tools import ToolContext
from shared.turns.accept import LIVE_TOKEN_COUNT, lock_session_row
from shared.turns.client_options import ClientOptions, merged_tools
from shared.turns.rows import ClaimedTurn, SessionRow, TurnRow, session_row

log = get_logger(__name__)

# A turn whose worker died this many times is failed instead of being tried forever.
MAX_TURN_ATTEMPTS = 5


class LockLost(RuntimeError):
    """The session lock expired while we worked; another worker may own the session now."""


# Looking again after a held lock's TTL: this much later, so the key has surely expired.
LOCK_RECHECK_MARGIN_SECONDS = 1.0
# Takeovers of dead holders' locks one drain call makes at most (another worker may win each race).
_MAX_TAKEOVERS = 3


@dataclass(frozen=True)
class DrainOutcome:
    processed: int  # turns this call ran
    # Another worker holds the session while turns are open: look again after this many seconds
    # (when its lock can have expired, should that worker have died). None: nothing left to wait for.
    recheck_in: float | None = None
    # The drain stopped after `max_turns` with turns possibly left: the caller sends the session again.
    yielded: bool = False


def drain_session(session_id: int, deps: TurnDeps, max_turns: int | None = None) -> DrainOutcome:
    """Run the session's queued turns, in order: every one, or at most `max_turns` (then the session goes
    back to the queue behind other sessions' turns: shared/queueing/fairness.py)."""
    name = session_lock_name(session_id)
    lock = HeartbeatLock(deps.redis, name, deps.lock_ttl_seconds)
    processed = 0
    takeovers = 0
    while True:
        if not lock.acquire():
            if takeovers < _MAX_TAKEOVERS and take_over_if_holder_dead(deps.redis, name):
                takeovers += 1
                log.warning("took over the session lock of a worker that died", session_id=session_id)
                continue
            return DrainOutcome(processed, _recheck_in(deps, name) if has_open_turns(session_id) else None)
        more = False
        try:
            while (max_turns is None or processed < max_turns) and (turn := claim_next_turn(session_id)) is not None:
                more = run_claimed_turn(turn, deps, lock)
                processed += 1
                if not more:
                    # The turn's last transaction saw no other open turn: skip the claim that would find
                    # none. One queued since is found by the look after the release below.
                    break
        finally:
            lock.release()
        if max_turns is not None and processed >= max_turns:
            return DrainOutcome(processed, yielded=more or has_open_turns(session_id))
        # A turn queued between our last claim and the release saw the lock held and left the
        # work to us: look once more after letting go.
        if not has_open_turns(session_id):
            return DrainOutcome(processed)


def _recheck_in(deps: TurnDeps, name: str) -> float:
    """When the current holder's lock can have expired: its remaining TTL plus a margin."""
    current = holder(deps.redis, name)
    ttl = current.ttl_seconds if current is not None else 0.0
    return min(ttl, deps.lock_ttl_seconds) + LOCK_RECHECK_MARGIN_SECONDS


def has_open_turns(session_id: int) -> bool:
    with db.connection(autocommit=True) as conn:  # one read: no BEGIN and COMMIT round trips
        return _open_turn_exists(conn, session_id)


def _open_turn_exists(conn: Conn, session_id: int, other_than: int = 0) -> bool:
    """Whether the session has a queued or running turn (besides turn `other_than`; ids start at 1)."""
    row = conn.execute(
        "SELECT 1 FROM turns WHERE session_id = %s AND status IN ('queued', 'running') AND id <> %s LIMIT 1",
        (session_id, other_than),
    ).fetchone()
    return row is not None


def sessions_with_running_turns(conn: Conn, limit: int = 5000) -> list[int]:
    """Sessions with a turn marked running (what a restarted worker re-drives: a worker that died
    left its turns running)."""
    rows = conn.execute("SELECT DISTINCT session_id FROM turns WHERE status = 'running' LIMIT %s", (limit,)).fetchall()
    return [int(row["session_id"]) for row in rows]


def claim_next_turn(session_id: int) -> ClaimedTurn | None:
    """Mark the session's oldest open turn running (attempt + 1) and return it.

    A 'running' turn found here was left by a worker that died: it is claimed again.
    """
    with db.connection() as conn:
        while True:
            row = cast(
                "ClaimedTurn | None",
                conn.execute(
                    """SELECT t.*, u.timezone FROM turns t JOIN users u ON u.id = t.user_id
                       WHERE t.session_id = %s AND t.status IN ('queued', 'running')
                       ORDER BY t.id LIMIT 1 FOR UPDATE OF t""",
                    (session_id,),
                ).fetchone(),
            )
            if row is None:
                return None
            if row["attempts"] >= MAX_TURN_ATTEMPTS:
                _fail(conn, row, f"gave up after {row['attempts']} attempts: the worker stopped each time")
                continue
            claimed = conn.execute(
                """UPDATE turns SET status = 'running', attempts = attempts + 1,
                       started_at = coalesce(started_at, now()), updated_at = now()
                   WHERE id = %s RETURNING attempts""",
                (row["id"],),
            ).fetchone()
            assert claimed is not None
            return {**row, "attempts": claimed["attempts"]}


def _fail(conn: Conn, turn: TurnRow, error: str) -> None:
    conn.execute(
        """UPDATE turns SET status = 'failed', error = %s, finished_at = now(), updated_at = now()
           WHERE id = %s AND status IN ('queued', 'running')""",
        (error, turn["id"]),
    )
    # A channel's person is told; the stalled-delivery sweep posts it (no task is at hand here).
    reply_ready(conn, turn["id"])


def _notify_reply(deps: TurnDeps, delivery_id: int | None) -> None:
    """After the commit that finished a channel turn: hand its reply to the `channels` queue."""
    if delivery_id is not None and deps.reply_ready is not None:
        deps.reply_ready(delivery_id)


def run_claimed_turn(turn: ClaimedTurn, deps: TurnDeps, lock: HeartbeatLock) -> bool:
    """Run one claimed turn. False when its finishing transaction saw no other open turn of the session
    (the drain need not claim again); True when there may be one."""
    with (
        structlog.contextvars.bound_contextvars(turn_id=turn["id"], session_id=turn["session_id"]),
        turn_span(turn["id"], turn["session_id"], turn["attempts"]),
    ):
        return _run_claimed_turn(turn, deps, lock)


def _run_claimed_turn(turn: ClaimedTurn, deps: TurnDeps, lock: HeartbeatLock) -> bool:
    bound = log.bind(turn_id=turn["id"], session_id=turn["session_id"], attempt=turn["attempts"])
    client = ClientOptions.from_json(turn.get("client"))
    events = TurnEventPublisher(deps.redis, turn["id"])
    if turn["attempts"] > 1:
        # Deltas of the failed attempt may already be on the stream: tell readers to start over.
        events.publish("reset", attempt=turn["attempts"])
    started = time.monotonic()
    with db.connection() as conn:
        history, turn_context = read_turn_context(conn, turn, deps, client)
    ctx = ToolContext(
        tenant_id=turn["tenant_id"],
        user_id=turn["user_id"],
        session_id=turn["session_id"],
        turn_id=turn["id"],
        now=deps.clock(),
        timezone=turn_context.dynamic.timezone,
        memory_written=deps.memory_written,
    )
    try:
        outcome = run_agent_loop(history, ctx, deps, events, turn_context, client)
    except (LLMError, IntegrityViolation) as exc:
        error = f"quarantined: {exc}" if isinstance(exc, IntegrityViolation) else str(exc)
        bound.warning("turn failed", error=error)
        timings = _timings(turn, started, None)
        with db.connection() as conn:
            failed = _guarded_update(conn, turn, "failed", error=error, timings=timings)
            delivery = reply_ready(conn, turn["id"]) if failed else None
        if failed:
            observe_turn("failed", timings)
        events.publish("error", error=error)
        _notify_reply(deps, delivery)
        return True
    # A lease that ran out while Redis was stopped: the reply is already paid for. Retaken, the turn is written if
    # its claim is still this attempt's (the guarded update below): nobody else ran it meanwhile. Failing the task
    # would throw the reply away and run the model again on a retry queued behind every other session's turns.
    if lock.lost and not lock.retake():
        raise LockLost(f"session lock lost while running turn {turn['id']}")
    # The reply is paid for: wait out a Postgres restart (the lock's heartbeat goes on) rather than
    # fail the task and run the model again on the retry.
    timings = _timings(turn, started, outcome.llm_seconds)
    with db.connection(patience=db.PAID_WORK_PATIENCE_SECONDS) as conn:
        lock_session_row(conn, turn["session_id"])  # before the turn row: the order requests lock them in
        written = _guarded_update(
            conn,
            turn,
            "done",
            reply=outcome.reply,
            usage={
                **outcome.usage.as_dict(),
                "llm_calls": len(outcome.calls),
                "model": deps.model,
                "provider": deps.provider.name,
            },
            timings=timings,
        )
        delivery = None
        committed: SessionRow | None = None  # the session row as this transaction leaves it
        if written:
            _insert_messages(conn, turn, outcome.messages, turn_context.agent_name)
            committed = _finish_session(conn, turn["session_id"], outcome.steering_fired)
            delivery = reply_ready(conn, turn["id"])
        more = _open_turn_exists(conn, turn["session_id"], other_than=turn["id"])
    if written:
        observe_turn("done", timings)
        handed_back = {"tool_calls": [_call_json(c) for c in outcome.client_calls]} if outcome.client_calls else {}
        events.publish("done", status="done", reply=outcome.reply, usage=outcome.usage.as_dict(), **handed_back)
        _notify_reply(deps, delivery)
        bound.info("turn done", llm_calls=len(outcome.calls), **outcome.usage.as_dict())
        if deps.after_turn is not None:
            deps.after_turn(turn["session_id"], turn["id"], committed)
    else:
        bound.warning("turn was already finished by another attempt; nothing written")
    return more


def read_turn_context(
    conn: Conn, turn: ClaimedTurn, deps: TurnDeps, client: ClientOptions | None = None
) -> tuple[list[ChatMessage], TurnContext]:
    """What the turn's model calls are built from: its history and its context (prompt, dynamic inputs,
    steering). The history, the session, every read of the prompt and what the relevant-memory search reads
    first (the embedding space, the user's speakers) go to Postgres together, then that search's statements: a
    few round trips, where one per read made fifteen (each a trip through the scheduler for the worker and a
    Postgres backend, on a busy machine the larger part of a turn's overhead)."""
    ids = {"tenant_id": turn["tenant_id"], "user_id": turn["user_id"], "session_id": turn["session_id"]}
    queries = {**turn_start_queries(turn), **context_queries(**ids, turn_id=turn["id"])}
    if deps.relevant_memory:
        queries.update(search_read_queries(Scope(turn["tenant_id"], turn["user_id"])))
    reads = fetch_together(conn, queries)
    history, session = turn_start(reads)
    relevant = relevant_memories(conn, turn, history, SearchReads.from_rows(reads)) if deps.relevant_memory else []
    context = prepare_turn(
        conn,
        session=session,
        user_timezone=turn.get("timezone"),
        turn_id=turn["id"],
        tools=merged_tools(deps.tools.specs(), client),
        provider=deps.provider.name,
        model=deps.model,
        now=deps.clock(),
        context_dir=deps.context_dir,
        relevant=relevant,
        context_window_override=deps.context_window,
        max_output_tokens=deps.max_output_tokens,
        epoch_max_delta=deps.epoch_max_delta,
        persist_epoch=True,
        reads=reads,
    )
    return history, context


def _finish_session(conn: Conn, session_id: int, fired: set[str]) -> SessionRow:
    """One statement for what a finished turn changes in its session: the live size (which decides flush and
    compaction, as in refresh_token_count), and steering that fires once per event (compaction recovery once
    after a compaction, the budget warning once per session). Returns the row as committed, so the memory
    work scheduled after the turn need not read it again."""
    row = session_row(
        conn.execute(
            f"""UPDATE sessions SET updated_at = now(), recovery_pending = false, token_count = {LIVE_TOKEN_COUNT},
               budget_warned_at = CASE WHEN %(warned)s THEN coalesce(budget_warned_at, now()) ELSE budget_warned_at END
           WHERE id = %(session)s
           RETURNING *""",
            {"session": session_id, "warned": "token_budget_warning" in fired},
        ).fetchone()
    )
    assert row is not None  # the session row is locked by this transaction (lock_session_row)
    return row


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _timings(turn: TurnRow, started: float, llm_seconds: float | None) -> dict[str, Any]:
    total = time.monotonic() - started
    timings: dict[str, Any] = {"run_ms": round(total * 1000, 1), "attempt": turn["attempts"]}
    if turn.get("created_at") is not None:
        queued = (datetime.now(UTC) - turn["created_at"]).total_seconds() - total
        timings["queued_ms"] = round(max(queued, 0) * 1000, 1)
    if llm_seconds is not None:
        timings["llm_ms"] = round(llm_seconds * 1000, 1)
        timings["overhead_ms"] = round((total - llm_seconds) * 1000, 1)
    return timings


def _guarded_update(conn: Conn, turn: TurnRow, status: str, **fields: Any) -> bool:
    """Finish the turn only if this attempt still owns it (same attempt number, still running)."""
    row = conn.execute(
        """UPDATE turns SET status = %s, reply = %s, error = %s, usage = %s, timings = %s,
               finished_at = now(), updated_at = now()
           WHERE id = %s AND status = 'running' AND attempts = %s RETURNING id""",
        (
            status,
            fields.get("reply"),
            fields.get("error"),
            Jsonb(fields.get("usage", {})),
            Jsonb(fields.get("timings", {})),
            turn["id"],
            turn["attempts"],
        ),
    ).fetchone()
    return row is not None


def _insert_messages(conn: Conn, turn: TurnRow, messages: list[ChatMessage], agent_name: str) -> None:
    """The turn's new messages; the assistant's are said by the agent, under its name."""
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content, tool_calls,
                                             tool_results, token_estimate, name)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [
                (
                    turn["tenant_id"],
                    turn["user_id"],
                    turn["session_id"],
                    turn["id"],
                    m.role,
                    m.content,
                    Jsonb([{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls])
                    if m.tool_calls
                    else None,
                    Jsonb({"tool_call_id": m.tool_call_id, "name": m.tool_name, "is_error": m.is_error})
                    if m.role == "tool"
                    else None,
                    estimate_tokens(m.content)
                    + (estimate_tokens(json.dumps([c.arguments for c in m.tool_calls])) if m.tool_calls else 0),
                    agent_name if m.role == "assistant" else None,
                )
                for m in messages
            ],
        )
