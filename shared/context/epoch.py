""" "What You Know" frozen per session epoch, so a memory written mid-session leaves the cached prefix alone.

The static prompt lists up to 50 tacit memories. Were it rebuilt from the live selection on every turn,
each memory write (and each change in which memories are used most) would rewrite the prompt's prefix,
and every cached token after it — the whole conversation — would be paid for again. Instead a session
keeps the selection it started with (its epoch, a row of `session_prompt_epochs`, so every worker sees
the same one) and memories that joined the live selection since are shown in the dynamic tail.

An epoch is rebuilt, and the prefix changes, only when it would have to anyway or when the tail has
grown enough that a rebuild pays for itself:
- at the session's first turn, and after a compaction (the history is rewritten then as well);
- when the rest of the static prompt changed (agent or user profile, learned directive, tools, files);
- when a frozen memory was removed or edited (it must not go on being shown as it was);
- when more than `max_delta` memories have joined since (ENGRAM_PROMPT_EPOCH_MAX_DELTA).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.context.static_prompt import memory_line
from shared.infra.db import Conn, Query
from shared.memory.rows import MemoryEntry

# Why an epoch was (re)built; stored with it, and shown by context inspection.
FIRST, COMPACTED, PROMPT_CHANGED, MEMORY_CHANGED, DELTA_BOUND = (
    "first_turn",
    "compaction",
    "prompt_inputs_changed",
    "frozen_memory_changed",
    "delta_bound",
)


@dataclass(frozen=True)
class KnowledgeSplit:
    """The memories the static prompt lists, those the dynamic tail lists, and why the epoch was rebuilt
    (None when the stored epoch was kept)."""

    frozen: list[MemoryEntry]
    since: list[MemoryEntry] = field(default_factory=list)
    rebuilt: str | None = None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def knowledge_digest(memories: Sequence[MemoryEntry]) -> str:
    return digest("\n".join(memory_line(m) for m in memories))


def epoch_query(session_id: int) -> Query:
    """The session's epoch, with `frozen`: its memories that are still valid (one read, not two)."""
    return (
        """SELECT e.*,
                  (SELECT coalesce(jsonb_agg(jsonb_build_object('id', m.id, 'namespace', m.namespace,
                                                                'key', m.key, 'value', m.value)), '[]')
                   FROM memories m WHERE m.id = ANY(e.memory_ids) AND m.valid_until IS NULL) AS frozen
           FROM session_prompt_epochs e WHERE e.session_id = %s""",
        (session_id,),
    )


def _frozen_rows(epoch: dict[str, Any]) -> list[MemoryEntry]:
    """The epoch's memories that are still valid, in the order the prompt lists them."""
    return sorted(epoch["frozen"], key=lambda r: (r["namespace"], r["key"], r["id"]))


def _store(conn: Conn, session: Mapping[str, Any], memories: Sequence[MemoryEntry], base: str, reason: str) -> None:
    conn.execute(
        """INSERT INTO session_prompt_epochs
               (session_id, tenant_id, user_id, memory_ids, knowledge_digest, base_digest, compaction_count, reason)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (session_id) DO UPDATE SET memory_ids = EXCLUDED.memory_ids,
               knowledge_digest = EXCLUDED.knowledge_digest, base_digest = EXCLUDED.base_digest,
               compaction_count = EXCLUDED.compaction_count, reason = EXCLUDED.reason, started_at = now()""",
        (
            session["id"],
            session["tenant_id"],
            session["user_id"],
            [int(m["id"]) for m in memories],
            knowledge_digest(memories),
            base,
            int(session.get("compaction_count") or 0),
            reason,
        ),
    )


def split_knowledge(
    conn: Conn,
    session: Mapping[str, Any],
    live: Sequence[MemoryEntry],
    *,
    epoch: dict[str, Any] | None,
    base_digest: str,
    max_delta: int,
    persist: bool,
) -> KnowledgeSplit:
    """Decide what "What You Know" lists for this turn. `live` is today's selection (what_you_know);
    `epoch` the session's stored one (`epoch_query`'s row, None without); `base_digest` fingerprints the
    rest of the static prompt. With `persist` false (context inspection) nothing is written: the view
    shows what the next turn would send."""
    frozen = _frozen_rows(epoch) if epoch is not None else []
    reason = _rebuild_reason(session, epoch, frozen, live, base_digest, max_delta)
    if reason is not None:
        if persist and session.get("id"):
            _store(conn, session, live, base_digest, reason)
        return KnowledgeSplit(frozen=list(live), rebuilt=reason)
    assert epoch is not None
    known = set(epoch["memory_ids"])
    return KnowledgeSplit(frozen=frozen, since=[m for m in live if m["id"] not in known])


def _rebuild_reason(
    session: Mapping[str, Any],
    epoch: dict[str, Any] | None,
    frozen: list[MemoryEntry],
    live: Sequence[MemoryEntry],
    base_digest: str,
    max_delta: int,
) -> str | None:
    if epoch is None:
        return FIRST
    if epoch["compaction_count"] != int(session.get("compaction_count") or 0):
        return COMPACTED
    if epoch["base_digest"] != base_digest:
        return PROMPT_CHANGED
    if len(frozen) != len(epoch["memory_ids"]) or knowledge_digest(frozen) != epoch["knowledge_digest"]:
        return MEMORY_CHANGED
    known = set(epoch["memory_ids"])
    if sum(1 for m in live if m["id"] not in known) > max_delta:
        return DELTA_BOUND
    return None
