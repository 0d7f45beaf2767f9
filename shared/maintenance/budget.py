"""The per-tenant daily budget of background LLM tokens (consolidation, enrichment, reflection).

Background jobs run unattended for every user at once; without a cap one tenant's backlog could spend
tokens nobody approved. The ledger (llm_calls) records every call when it happens, so the budget reads
what was actually spent today (UTC, real time: a run with a simulated clock still spends real tokens).
A job checks it before each model call for a tenant; over budget, the job stops for that tenant, records
why in its run, and goes on with the other tenants.
"""

from __future__ import annotations

from shared.infra.db import Conn

BUDGETED_PURPOSES = ("consolidation", "enrichment", "reflection")


def tokens_today(conn: Conn, tenant_id: int) -> int:
    row = conn.execute(
        """SELECT coalesce(sum(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS used
           FROM llm_calls WHERE tenant_id = %s AND purpose = ANY(%s)
             AND created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'""",
        (tenant_id, list(BUDGETED_PURPOSES)),
    ).fetchone()
    return int(row["used"]) if row else 0


def over_budget(conn: Conn, tenant_id: int, budget: int) -> str | None:
    """Why the tenant's background jobs must stop today, or None (`budget` 0 = no cap)."""
    if budget <= 0:
        return None
    used = tokens_today(conn, tenant_id)
    if used < budget:
        return None
    return (
        f"over the daily background token budget ({used:,} of {budget:,} tokens used today by consolidation, "
        "enrichment and reflection; ENGRAM_MAINTENANCE_DAILY_TOKEN_BUDGET)"
    )
