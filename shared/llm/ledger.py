"""The LLM call ledger: every call by purpose, so cost per turn, session and tenant is a query away."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shared.db import Conn
from shared.llm.types import Usage

Purpose = Literal["chat", "extraction", "flush", "summary", "synthesis", "reflection"]
PURPOSES: tuple[Purpose, ...] = ("chat", "extraction", "flush", "summary", "synthesis", "reflection")


@dataclass(frozen=True)
class CallRecord:
    purpose: Purpose
    provider: str
    model: str
    usage: Usage
    duration_ms: int
    ok: bool = True


def record_calls(
    conn: Conn,
    calls: Sequence[CallRecord],
    *,
    tenant_id: int,
    user_id: int | None,
    session_id: int | None,
    turn_id: int | None = None,
) -> None:
    if not calls:
        return
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO llm_calls (tenant_id, user_id, session_id, turn_id, purpose, provider, model, input_tokens,
                                      output_tokens, cache_read_tokens, cache_write_tokens, duration_ms, ok)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [
                (
                    tenant_id,
                    user_id,
                    session_id,
                    turn_id,
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
