"""What is derived from a memory goes when the memory goes.

A memory leaves behind: its chunks (the vector index), its entity links (and entities nothing else
mentions), references to it in reflections, and cached embeddings of its text. Deleting a memory
(API, agent tool, decay, consolidation's retirements) calls `release_derived` in the same
transaction, so "forget" really forgets: no search leg can find the text afterwards and no prompt
section can show it.

Reflections are summaries of several facts. When one of their facts is removed by the user
(`forgotten=True`), the reflection may repeat it, so the reflection is retired too (the next weekly run
writes a new one from what is left); when a fact merely faded (decay), only the reference goes.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.embeddings import forget_unused
from shared.infra.db import Conn
from shared.memory.rows import MEMORY_COLUMNS, Scope, memory_row, memory_rows, record_event


def release_derived(
    conn: Conn, scope: Scope, memory_ids: Sequence[int], *, actor: str, forgotten: bool
) -> dict[str, int]:
    """Remove chunks, entity links (and orphaned entities), reflection references (or the reflections)
    and unshared cached embeddings of these memories; returns counts."""
    ids = list(dict.fromkeys(int(i) for i in memory_ids))
    counts = {"chunks": 0, "entity_links": 0, "entities": 0, "reflections": 0, "cache_entries": 0}
    if not ids:
        return counts
    hashes = [
        row["content_hash"]
        for row in conn.execute(
            """DELETE FROM memory_chunks WHERE tenant_id = %s AND user_id = %s AND memory_id = ANY(%s)
               RETURNING content_hash""",
            (scope.tenant_id, scope.user_id, ids),
        ).fetchall()
    ]
    counts["chunks"] = len(hashes)
    entity_ids = [
        row["entity_id"]
        for row in conn.execute(
            """DELETE FROM memory_entities me USING memories m
               WHERE me.memory_id = m.id AND m.tenant_id = %s AND m.user_id = %s AND me.memory_id = ANY(%s)
               RETURNING me.entity_id""",
            (scope.tenant_id, scope.user_id, ids),
        ).fetchall()
    ]
    counts["entity_links"] = len(entity_ids)
    if entity_ids:
        # An entity no memory links to any more only keeps the name the user wanted gone.
        counts["entities"] = conn.execute(
            """DELETE FROM entities e WHERE e.tenant_id = %s AND e.user_id = %s AND e.id = ANY(%s)
                 AND NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id)""",
            (scope.tenant_id, scope.user_id, list(set(entity_ids))),
        ).rowcount
    counts["reflections"] = _reflections(conn, scope, ids, actor=actor, forgotten=forgotten)
    # Shared by other text (any user's identical chunk) stays: it is theirs too.
    counts["cache_entries"] = forget_unused(conn, hashes)
    return counts


def _reflections(conn: Conn, scope: Scope, ids: list[int], *, actor: str, forgotten: bool) -> int:
    rows = memory_rows(
        conn.execute(
            f"""SELECT {MEMORY_COLUMNS} FROM memories
            WHERE tenant_id = %s AND user_id = %s AND kind = 'reflection' AND valid_until IS NULL
              AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(
                              CASE WHEN jsonb_typeof(metadata->'source_memory_ids') = 'array'
                                   THEN metadata->'source_memory_ids' ELSE '[]'::jsonb END) AS src(id)
                          WHERE src.id::bigint = ANY(%s))""",
            (scope.tenant_id, scope.user_id, ids),
        ).fetchall()
    )
    touched = 0
    for row in rows:
        sources = row["metadata"].get("source_memory_ids", [])
        remaining = [i for i in sources if i not in ids]
        if forgotten:
            retired = memory_row(
                conn.execute(
                    f"""UPDATE memories SET valid_until = now(), updated_at = now(),
                        metadata = jsonb_set(metadata, '{{source_memory_ids}}', to_jsonb(%s::bigint[]))
                    WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
                    RETURNING {MEMORY_COLUMNS}""",
                    (remaining, scope.tenant_id, scope.user_id, row["id"]),
                ).fetchone()
            )
            if retired is not None:
                record_event(
                    conn,
                    scope,
                    retired,
                    "delete",
                    actor,
                    old_value=retired["value"],
                    details={
                        "reason": "a memory it was built from was deleted",
                        "deleted_sources": [i for i in sources if i in ids],  # its own, not every id deleted
                    },
                )
                release_derived(conn, scope, [retired["id"]], actor=actor, forgotten=False)
                touched += 1
        else:
            conn.execute(
                """UPDATE memories SET metadata = jsonb_set(metadata, '{source_memory_ids}', to_jsonb(%s::bigint[]))
                   WHERE tenant_id = %s AND user_id = %s AND id = %s""",
                (remaining, scope.tenant_id, scope.user_id, row["id"]),
            )
            touched += 1
    return touched
