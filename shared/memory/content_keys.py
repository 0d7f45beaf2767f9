"""Backfill of `memories.content_key` for rows written before migration 0014.

The store's "same content under another key" check probes the key index for keyed rows and still
compares legacy rows (key NULL) value by value, which costs O(legacy rows of the user) per store. This
keys them, a batch per transaction, so that cost goes to zero. The key is computed in Python
(`keys.content_key`), the one definition every insert uses too.

Idempotent: only active rows whose key is still NULL are touched, and a row's value never changes in
place, so a key once written stays right. `FOR UPDATE SKIP LOCKED` leaves rows a writer holds (it is
superseding or deleting them) to a later run instead of waiting for it; `updated_at` is left alone
because the memory's content did not change.
"""

from __future__ import annotations

from shared.infra.db import Conn
from shared.memory.keys import content_key

BATCH = 500


def backfill_batch(conn: Conn, tenant_id: int, user_id: int, limit: int = BATCH) -> int:
    """Key up to `limit` unkeyed active memories of one user, in the caller's transaction; how many."""
    rows = conn.execute(
        """SELECT id, value FROM memories
            WHERE tenant_id = %s AND user_id = %s AND content_key IS NULL AND valid_until IS NULL
            LIMIT %s FOR UPDATE SKIP LOCKED""",
        (tenant_id, user_id, limit),
    ).fetchall()
    if not rows:
        return 0
    conn.execute(
        """UPDATE memories m SET content_key = k.content_key
             FROM unnest(%s::bigint[], %s::bytea[]) AS k(id, content_key)
            WHERE m.id = k.id AND m.content_key IS NULL""",
        ([row["id"] for row in rows], [content_key(row["value"]) for row in rows]),
    )
    return len(rows)
