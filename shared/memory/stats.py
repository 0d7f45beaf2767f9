"""Counts of a user's memory."""

from __future__ import annotations

from typing import Any

from shared.infra.db import Conn
from shared.memory.store import Scope


def memory_stats(conn: Conn, scope: Scope) -> dict[str, Any]:
    params = (scope.tenant_id, scope.user_id)
    totals = conn.execute(
        """SELECT count(*) FILTER (WHERE valid_until IS NULL) AS active,
                  count(*) FILTER (WHERE valid_until IS NOT NULL) AS inactive,
                  count(*) FILTER (WHERE valid_until IS NULL AND decay_rate = 0) AS protected,
                  coalesce(sum(access_count), 0) AS accesses
           FROM memories WHERE tenant_id = %s AND user_id = %s""",
        params,
    ).fetchone()
    by_namespace = conn.execute(
        """SELECT namespace, count(*) AS n FROM memories
           WHERE tenant_id = %s AND user_id = %s AND valid_until IS NULL GROUP BY namespace ORDER BY namespace""",
        params,
    ).fetchall()
    by_kind = conn.execute(
        """SELECT kind, count(*) AS n FROM memories
           WHERE tenant_id = %s AND user_id = %s AND valid_until IS NULL GROUP BY kind ORDER BY kind""",
        params,
    ).fetchall()
    chunks = conn.execute(
        """SELECT count(*) FILTER (WHERE memory_id IS NOT NULL) AS memory_chunks,
                  count(*) FILTER (WHERE memory_id IS NULL) AS transcript_chunks,
                  count(*) FILTER (WHERE embedding IS NULL) AS unembedded
           FROM memory_chunks WHERE tenant_id = %s AND user_id = %s""",
        params,
    ).fetchone()
    entities = conn.execute(
        "SELECT count(*) AS n FROM entities WHERE tenant_id = %s AND user_id = %s", params
    ).fetchone()
    assert totals is not None and chunks is not None and entities is not None
    return {
        **{k: int(v) for k, v in totals.items()},
        "by_namespace": {row["namespace"]: row["n"] for row in by_namespace},
        "by_kind": {row["kind"]: row["n"] for row in by_kind},
        **{k: int(v) for k, v in chunks.items()},
        "entities": int(entities["n"]),
    }
