"""The console's chart series, straight from Postgres (llm_calls, turns, memories, their source messages and
chunks): one query a chart, days or hours with nothing in them included as zeros so every series lines up with
its time axis (Unix seconds)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from shared.infra.db import Conn
from shared.llm.pricing import call_cost
from shared.llm.types import Usage

MAX_DAYS = 90
MAX_HOURS = 24 * 14


def _days(conn: Conn, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    return conn.execute(sql, params).fetchall()


def cache_share_daily(conn: Conn, tenant_id: int, days: int) -> dict[str, Any]:
    """Input tokens per day and the prompt-cache share: cache_read / (input + cache_read + cache_write)."""
    rows = _days(
        conn,
        """SELECT extract(epoch FROM d.day)::bigint AS t,
                  coalesce(sum(c.input_tokens), 0) AS input, coalesce(sum(c.cache_read_tokens), 0) AS cache_read,
                  coalesce(sum(c.cache_write_tokens), 0) AS cache_write
           FROM generate_series(date_trunc('day', now()) - make_interval(days => %(days)s - 1),
                                date_trunc('day', now()), interval '1 day') AS d(day)
           LEFT JOIN llm_calls c ON c.tenant_id = %(tenant)s
                AND c.created_at >= d.day AND c.created_at < d.day + interval '1 day'
           GROUP BY d.day ORDER BY d.day""",
        {"tenant": tenant_id, "days": _clamp(days, MAX_DAYS)},
    )
    share = []
    for row in rows:
        total = row["input"] + row["cache_read"] + row["cache_write"]
        share.append(round(row["cache_read"] / total, 4) if total else None)
    return {
        "t": [row["t"] for row in rows],
        "input_tokens": [int(row["input"]) for row in rows],
        "cache_read_tokens": [int(row["cache_read"]) for row in rows],
        "cache_write_tokens": [int(row["cache_write"]) for row in rows],
        "cache_share": share,
    }


def calls_by_purpose_daily(
    conn: Conn, tenant_id: int, days: int, prices: Mapping[str, Mapping[str, float]]
) -> dict[str, Any]:
    """LLM calls, tokens (input + output) and estimated cost in US$ per day for each purpose. The cost is
    `call_cost` (the `llm_prices` setting) applied to each model's token sums of the day: prices are per token,
    so pricing a sum is pricing each call. Models without a price cost nothing and are listed in
    `unpriced_models`, so a chart of zeros is not read as "free"."""
    axis, index, rows = _daily_groups(
        conn,
        """SELECT extract(epoch FROM date_trunc('day', created_at))::bigint AS t, purpose, model, count(*) AS calls,
                  sum(input_tokens) AS input, sum(output_tokens) AS output,
                  sum(cache_read_tokens) AS cache_read, sum(cache_write_tokens) AS cache_write
           FROM llm_calls
           WHERE tenant_id = %(tenant)s AND created_at >= date_trunc('day', now()) - make_interval(days => %(days)s - 1)
           GROUP BY 1, 2, 3""",
        tenant_id,
        days,
    )
    purposes: dict[str, dict[str, list[Any]]] = defaultdict(
        lambda: {"calls": [0] * len(axis), "tokens": [0] * len(axis), "cost_usd": [0.0] * len(axis)}
    )
    unpriced: set[str] = set()
    for row in rows:
        if row["t"] not in index:
            continue
        at, series = index[row["t"]], purposes[row["purpose"]]
        usage = Usage(
            input_tokens=int(row["input"] or 0),
            output_tokens=int(row["output"] or 0),
            cache_read_tokens=int(row["cache_read"] or 0),
            cache_write_tokens=int(row["cache_write"] or 0),
        )
        series["calls"][at] += int(row["calls"])
        series["tokens"][at] += usage.input_tokens + usage.output_tokens
        cost = call_cost(row["model"], usage, prices)
        if cost is None:
            unpriced.add(row["model"])
        else:
            series["cost_usd"][at] += cost
    for series in purposes.values():
        series["cost_usd"] = [round(cost, 6) for cost in series["cost_usd"]]
    return {"t": axis, "purposes": dict(sorted(purposes.items())), "unpriced_models": sorted(unpriced)}


def turns_hourly(conn: Conn, tenant_id: int, hours: int) -> dict[str, Any]:
    """Chat turns finished per hour with their latency (accepted to finished) p50 and p95, in milliseconds."""
    rows = _days(
        conn,
        """SELECT extract(epoch FROM h.hour)::bigint AS t, count(t.id) AS turns,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t.finished_at - t.created_at))
                      * 1000 AS p50,
                  percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM t.finished_at - t.created_at))
                      * 1000 AS p95
           FROM generate_series(date_trunc('hour', now()) - make_interval(hours => %(hours)s - 1),
                                date_trunc('hour', now()), interval '1 hour') AS h(hour)
           LEFT JOIN turns t ON t.tenant_id = %(tenant)s AND t.kind = 'chat' AND t.status = 'done'
                AND t.finished_at >= h.hour AND t.finished_at < h.hour + interval '1 hour'
           GROUP BY h.hour ORDER BY h.hour""",
        {"tenant": tenant_id, "hours": _clamp(hours, MAX_HOURS)},
    )
    return {
        "t": [row["t"] for row in rows],
        "turns": [int(row["turns"]) for row in rows],
        "p50_ms": [None if row["p50"] is None else round(row["p50"], 1) for row in rows],
        "p95_ms": [None if row["p95"] is None else round(row["p95"], 1) for row in rows],
    }


def memories_daily(conn: Conn, tenant_id: int, days: int) -> dict[str, Any]:
    """Memories written per day (every version counts: a correction is a new memory) by source."""
    axis, index, rows = _daily_groups(
        conn,
        """SELECT extract(epoch FROM date_trunc('day', created_at))::bigint AS t, source, count(*) AS n
           FROM memories
           WHERE tenant_id = %(tenant)s AND created_at >= date_trunc('day', now()) - make_interval(days => %(days)s - 1)
           GROUP BY 1, 2""",
        tenant_id,
        days,
    )
    sources: dict[str, list[int]] = defaultdict(lambda: [0] * len(axis))
    for row in rows:
        if row["t"] in index:
            sources[row["source"]][index[row["t"]]] = int(row["n"])
    return {"t": axis, "sources": dict(sorted(sources.items()))}


LAG_KINDS = ("extraction", "memory_embedding", "message_embedding")


# Each kind's rows of one tenant since a day: read by the tenant and creation-time indexes (memories by
# tenant; transcript units by tenant and created_at, migration 0022), not by scanning every tenant's rows.
LAG_SQL = """WITH since AS (SELECT date_trunc('day', now()) - make_interval(days => %(days)s - 1) AS at),
           lags AS (
               SELECT 'extraction' AS kind, m.created_at AS at, m.created_at - s.said AS lag
               FROM memories m
               CROSS JOIN LATERAL (SELECT max(sm.created_at) AS said FROM session_messages sm
                                   WHERE sm.id = ANY(m.source_message_ids) AND sm.created_at <= m.created_at) s
               WHERE m.tenant_id = %(tenant)s AND m.created_at >= (SELECT at FROM since) AND s.said IS NOT NULL
               UNION ALL
               SELECT 'memory_embedding', created_at, embedded_at - created_at FROM memories
               WHERE tenant_id = %(tenant)s AND created_at >= (SELECT at FROM since) AND embedded_at IS NOT NULL
               UNION ALL
               SELECT 'message_embedding', created_at, embedded_at - created_at FROM memory_chunks
               WHERE tenant_id = %(tenant)s AND message_id IS NOT NULL AND created_at >= (SELECT at FROM since)
                 AND embedded_at IS NOT NULL)
           SELECT extract(epoch FROM date_trunc('day', at))::bigint AS t, kind, count(*) AS n,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM lag)) AS p50,
                  percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM lag)) AS p95
           FROM lags GROUP BY 1, 2"""


def lag_daily(conn: Conn, tenant_id: int, days: int) -> dict[str, Any]:
    """How long the pipeline takes, per day, p50 and p95 in seconds, each kind with how many rows it measured:
    `extraction` is a memory's created_at minus the newest of its source messages said at or before it (what
    was learned from a conversation, from the last message it came from to being stored); `memory_embedding`
    is a memory's embedded_at minus its created_at; `message_embedding` is a transcript unit's (memory_chunks
    with a message) embedded_at minus its created_at (when the message was stored). Rows still waiting are
    not counted: the queue depths on the operations page show those."""
    axis, index, rows = _daily_groups(conn, LAG_SQL, tenant_id, days)
    kinds: dict[str, dict[str, list[Any]]] = {
        kind: {"n": [0] * len(axis), "p50_s": [None] * len(axis), "p95_s": [None] * len(axis)} for kind in LAG_KINDS
    }
    for row in rows:
        if row["t"] in index:
            at, series = index[row["t"]], kinds[row["kind"]]
            series["n"][at] = int(row["n"])
            series["p50_s"][at] = round(row["p50"], 3)
            series["p95_s"][at] = round(row["p95"], 3)
    return {"t": axis, "kinds": kinds}


def _daily_groups(
    conn: Conn, sql: str, tenant_id: int, days: int
) -> tuple[list[int], dict[int, int], list[dict[str, Any]]]:
    """A per-day grouped query's rows (sql takes %(tenant)s and %(days)s and returns each day as `t`), the day
    axis they go on and each day's place on it: the days with no rows stay zeros in the caller's series."""
    days = _clamp(days, MAX_DAYS)
    rows = _days(conn, sql, {"tenant": tenant_id, "days": days})
    axis = _day_axis(conn, days)
    return axis, {t: i for i, t in enumerate(axis)}, rows


def _day_axis(conn: Conn, days: int) -> list[int]:
    # From the database's clock, as the rows' days are: the axis and the rows agree on "today".
    rows = conn.execute(
        """SELECT extract(epoch FROM d)::bigint AS t
           FROM generate_series(date_trunc('day', now()) - make_interval(days => %s - 1), date_trunc('day', now()),
                                interval '1 day') AS d ORDER BY d""",
        (days,),
    ).fetchall()
    return [row["t"] for row in rows]


def _clamp(value: int, maximum: int) -> int:
    return min(max(value, 1), maximum)
