"""The LLM call ledger: every call by purpose, so cost per turn, session and tenant is a query away.

A call is recorded the moment it returns (or fails), in its own short transaction on its own pooled
connection: the tokens were spent whatever happens next, so nothing the caller does afterwards — a
rolled-back transaction (an extraction that lost its race), a failed turn, a killed worker — may take
the row back. Budgets and /metrics read this table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.infra.metrics import observe_llm_call
from shared.llm.pricing import call_cost
from shared.llm.types import Usage

Purpose = Literal["chat", "extraction", "flush", "summary", "synthesis", "reflection", "consolidation", "enrichment"]
PURPOSES: tuple[Purpose, ...] = (
    "chat",
    "extraction",
    "flush",
    "summary",
    "synthesis",
    "reflection",
    "consolidation",
    "enrichment",
)


@dataclass(frozen=True)
class CallRecord:
    purpose: Purpose
    provider: str
    model: str
    usage: Usage
    duration_ms: int
    ok: bool = True


@dataclass(frozen=True)
class LedgerScope:
    """Whom a call is charged to."""

    tenant_id: int
    user_id: int | None
    session_id: int | None
    turn_id: int | None = None


def record_call(call: CallRecord, scope: LedgerScope) -> None:
    """Write one call now, committed on its own (never inside the caller's transaction).

    The call is paid for, so the write waits out a Postgres restart (as the turn's own save does) rather
    than failing the attempt and paying again on the retry; past that patience it raises
    DatabaseUnavailable and the task retries, instead of finishing with its spend unrecorded."""
    # One row, one statement: autocommit spares it the BEGIN and COMMIT round trips.
    with db.connection(patience=db.PAID_WORK_PATIENCE_SECONDS, autocommit=True) as conn:
        insert_calls(conn, [call], scope)
    observe_llm_call(
        call.purpose,
        call.provider,
        call.model,
        call.ok,
        call.duration_ms / 1000,
        {
            "input": call.usage.input_tokens,
            "output": call.usage.output_tokens,
            "cache_read": call.usage.cache_read_tokens,
            "cache_write": call.usage.cache_write_tokens,
        },
        call_cost(call.model, call.usage, get_settings().llm_prices),
    )


def insert_calls(conn: Conn, calls: Sequence[CallRecord], scope: LedgerScope) -> None:
    """The INSERT itself, in `conn`'s transaction (use `record_call` unless you own that transaction)."""
    if not calls:
        return
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO llm_calls (tenant_id, user_id, session_id, turn_id, purpose, provider, model, input_tokens,
                                      output_tokens, cache_read_tokens, cache_write_tokens, duration_ms, ok)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [
                (
                    scope.tenant_id,
                    scope.user_id,
                    scope.session_id,
                    scope.turn_id,
                    c.purpose,
                    c.provider,
                    c.model,
                    c.usage.input_tokens,
                    c.usage.output_tokens,
                    c.usage.cache_read_tokens,
                    c.usage.cache_write_tokens,
                    c.duration_ms,
                    c.ok,
                )
                for c in calls
            ],
        )


def calls_by_purpose(conn: Conn, *, session_id: int | None = None, turn_id: int | None = None) -> dict[str, Any]:
    """{purpose: {calls, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens}}."""
    column, value = ("turn_id", turn_id) if turn_id is not None else ("session_id", session_id)
    rows = conn.execute(
        f"""SELECT purpose, count(*) AS calls, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                   sum(cache_read_tokens) AS cache_read_tokens, sum(cache_write_tokens) AS cache_write_tokens
            FROM llm_calls WHERE {column} = %s GROUP BY purpose ORDER BY purpose""",
        (value,),
    ).fetchall()
    return {row.pop("purpose"): {k: int(v or 0) for k, v in row.items()} for row in rows}
