"""A tenant's monthly token budget: what its LLM calls used this calendar month (UTC), from the
llm_calls ledger (every call, including failed turns' and background jobs', is recorded there when
it happens). Steering warns the model past 80 %; past 100 % new turns are refused."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.infra.db import Conn, Query

_USED_THIS_MONTH = """(SELECT coalesce(sum(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0)
                        FROM llm_calls WHERE tenant_id = t.id AND created_at >= date_trunc('month', now()))"""


def budget_usage(conn: Conn, tenant_id: int) -> dict[str, Any] | None:
    """`{"budget", "used"}` tokens this month; None when the tenant does not exist."""
    return conn.execute(
        f"SELECT t.monthly_token_budget AS budget, {_USED_THIS_MONTH} AS used FROM tenants t WHERE t.id = %s",
        (tenant_id,),
    ).fetchone()


BUDGET_AND_USAGE_SQL = f"""SELECT t.monthly_token_budget AS budget,
       CASE WHEN t.monthly_token_budget IS NULL THEN 0 ELSE {_USED_THIS_MONTH} END AS used
  FROM tenants t WHERE t.id = %s"""


def budget_query(tenant_id: int) -> Query:
    """Like budget_usage, but the month's calls are summed only for a tenant with a budget: this runs on
    every accepted turn, and the sum grows with the month's traffic (`used` is 0 without a budget)."""
    return (BUDGET_AND_USAGE_SQL, (tenant_id,))


def _budget_and_usage(conn: Conn, tenant_id: int) -> dict[str, Any] | None:
    return conn.execute(*budget_query(tenant_id)).fetchone()


def budget_used(conn: Conn, tenant_id: int) -> float | None:
    """Share of the monthly budget used (may exceed 1); None when the tenant has no budget."""
    return used_share(_budget_and_usage(conn, tenant_id))


def used_share(row: dict[str, Any] | None) -> float | None:
    """Share of the budget used, from `budget_query`'s row; None when the tenant has no budget."""
    if row is None or not row["budget"]:
        return None
    return float(row["used"]) / float(row["budget"])


def seconds_until_next_month(now: datetime | None = None) -> int:
    now = now or datetime.now(UTC)
    following = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)
    return max(1, int((following - now).total_seconds()))


def turn_refusal(conn: Conn, tenant_id: int) -> str | None:
    """Why a new turn cannot be taken (the budget is spent), or None."""
    row = _budget_and_usage(conn, tenant_id)
    if row is None or not row["budget"] or row["used"] < row["budget"]:
        return None
    return (
        f"this tenant's monthly token budget is used up ({int(row['used']):,} of {int(row['budget']):,} tokens); "
        "new turns are refused until the month ends or an admin raises the budget"
    )


def set_budget(conn: Conn, tenant_id: int, budget: int | None) -> None:
    conn.execute("UPDATE tenants SET monthly_token_budget = %s WHERE id = %s", (budget, tenant_id))
