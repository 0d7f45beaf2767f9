"""Nightly decay: memories nobody uses fade, and the faded are forgotten.

confidence × exp(−decay_rate × days) where days run from the later of the memory's creation, its last
access and the clock it was last decayed to (`decayed_at`). The references decay from the last access
alone and store the result each night, which compounds (night two subtracts two days again from an
already-decayed value); continuing from `decayed_at` makes nightly runs equal to one long run and a
second run at the same clock a no-op — the stronger design, so it is the one used. An access restarts
the clock: decay not yet applied when the memory was used is dropped (being used is the evidence that
it still matters), and only unused time counts.

Below ENGRAM_DECAY_THRESHOLD (0.05) a memory is soft-deleted (valid_until set, history kept) and what
was derived from it goes (chunks out of the vector index, entity links, reflection references; see
shared/memory/derived.py). Every change is a memory_events row with actor "decay".

Never touched (protected): decay_rate 0 (what the user confirmed), reflections, directives and stored
documents (kinds that never decay), the user's profile (`profile/…`) and identity facts
(`entity/default` keys `user/…`: name, email, location, occupation — they change by being superseded
when the user says otherwise, not by fading because nobody asked).

Style observations follow their own rule (personality synthesis, 14 days × times seen, from the last
sighting): expired ones are soft-deleted and the user's directive is re-synthesised from what is left.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import cast

from shared.maintenance.runs import Page, RunHandle, UserRef
from shared.memory.content_keys import backfill_batch
from shared.memory.derived import release_derived
from shared.memory.rows import MEMORY_COLUMNS, DecayedMemoryRow, MemoryRow, Scope, memory_row, memory_rows, record_event
from shared.pipeline.personality import DECAY_DAYS
from shared.pipeline.personality_job import synthesize_personality

ACTOR = "decay"
PROTECTED_KINDS = ("reflection", "directive", "document")
# A stored confidence changes only by at least this much (or when it falls under the threshold): smaller
# steps would write an update and a history row per memory per night for nothing. The decay clock then
# stays where it was, so the skipped days still count next time.
MIN_STEP = 0.01

_DECAYABLE = f"""
    tenant_id = %(t)s AND user_id = %(u)s AND valid_until IS NULL AND decay_rate > 0
    AND kind NOT IN ('style', {", ".join(f"'{k}'" for k in PROTECTED_KINDS)})
    AND namespace NOT LIKE 'tacit/personality/style%%'
    AND namespace <> 'profile' AND namespace NOT LIKE 'profile/%%'
    AND NOT (namespace = 'entity/default' AND key LIKE 'user/%%')
    AND (decayed_at IS NULL OR decayed_at < %(as_of)s)
"""


def protection(memory: MemoryRow) -> str | None:
    """Why decay never touches this memory, in words, or None when it decays: the rule `_DECAYABLE` applies
    in SQL, for one row (the console's memory page says it)."""
    namespace, key, kind = memory["namespace"], memory["key"], memory["kind"]
    if kind in PROTECTED_KINDS:
        return f"a {kind}"
    if namespace == "profile" or namespace.startswith("profile/"):
        return "part of the user's profile"
    if namespace == "entity/default" and key.startswith("user/"):
        return "an identity fact"
    if float(memory["decay_rate"]) <= 0:
        return "decay rate 0 (confirmed by the user or set so)"
    return None


def decayed(confidence: float, rate: float, since: datetime, as_of: datetime) -> float:
    days = max(0.0, (as_of - since).total_seconds() / 86400)
    return confidence * math.exp(-rate * days)


def run(handle: RunHandle) -> None:
    for user in handle.each_user():
        if not _key_user(handle, user) or not _decay_user(handle, user):
            return  # paused between pages
        _expire_styles(handle, user)
        handle.user_done(user)
        if handle.should_stop():
            return


def _key_user(handle: RunHandle, user: UserRef) -> bool:
    """Give the user's memories from before migration 0014 their content key; False when the run must pause.

    Not decay, but the nightly pass over every user is where it fits: until a user's legacy rows are
    keyed, each store compares them value by value (shared/memory/content_keys.py). One empty index
    probe per user once they are all keyed."""
    while True:
        with handle.page() as page:
            keyed = backfill_batch(page.conn, user.tenant_id, user.user_id, handle.settings.job_page_size)
            page.count("content_keys_filled", keyed)
        if keyed < handle.settings.job_page_size:
            return True
        if handle.should_stop():
            return False


def _decay_user(handle: RunHandle, user: UserRef) -> bool:
    """Decay one user's memories page by page; False when the run must pause first."""
    after = 0
    while True:
        with handle.page() as page:
            rows = cast(
                "list[DecayedMemoryRow]",
                page.conn.execute(
                    f"""SELECT {MEMORY_COLUMNS}, decayed_at FROM memories WHERE {_DECAYABLE} AND id > %(after)s
                    ORDER BY id LIMIT %(limit)s FOR UPDATE""",
                    {
                        "t": user.tenant_id,
                        "u": user.user_id,
                        "as_of": handle.as_of,
                        "after": after,
                        "limit": handle.settings.job_page_size,
                    },
                ).fetchall(),
            )
            _decay_page(handle, page, Scope(user.tenant_id, user.user_id), rows)
        if len(rows) < handle.settings.job_page_size:
            return True
        after = rows[-1]["id"]
        if handle.should_stop():
            return False


def _decay_page(handle: RunHandle, page: Page, scope: Scope, rows: list[DecayedMemoryRow]) -> None:
    threshold = handle.settings.decay_threshold
    gone: list[int] = []
    for row in rows:
        page.count("examined")
        old = float(row["confidence"])
        since = max(t for t in (row["created_at"], row["last_accessed_at"], row["decayed_at"]) if t is not None)
        new = round(decayed(old, float(row["decay_rate"]), since, handle.as_of), 6)
        details = {"confidence": [old, new], "as_of": handle.as_of.isoformat()}
        if new < threshold:
            closed = memory_row(
                page.conn.execute(
                    f"""UPDATE memories SET valid_until = now(), updated_at = now(), confidence = %s, decayed_at = %s
                    WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
                    RETURNING {MEMORY_COLUMNS}""",
                    (new, handle.as_of, scope.tenant_id, scope.user_id, row["id"]),
                ).fetchone()
            )
            if closed is not None:
                record_event(page.conn, scope, closed, "delete", ACTOR, old_value=closed["value"], details=details)
                gone.append(closed["id"])
        elif old - new >= MIN_STEP:
            updated = memory_row(
                page.conn.execute(
                    f"""UPDATE memories SET confidence = %s, decayed_at = %s
                    WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
                    RETURNING {MEMORY_COLUMNS}""",
                    (new, handle.as_of, scope.tenant_id, scope.user_id, row["id"]),
                ).fetchone()
            )
            if updated is not None:
                record_event(page.conn, scope, updated, "update", ACTOR, details=details)
                page.count("decayed")
    if gone:
        released = release_derived(page.conn, scope, gone, actor=ACTOR, forgotten=False)
        page.count("deleted", len(gone))
        page.count("chunks_removed", released["chunks"])
        page.count("entity_links_removed", released["entity_links"])
        page.changed += len(gone)


def _expire_styles(handle: RunHandle, user: UserRef) -> None:
    scope = Scope(user.tenant_id, user.user_id)
    with handle.page() as page:
        rows = memory_rows(
            page.conn.execute(
                f"""SELECT {MEMORY_COLUMNS} FROM memories
                WHERE tenant_id = %s AND user_id = %s AND valid_until IS NULL
                  AND (kind = 'style' OR namespace LIKE 'tacit/personality/style%%') FOR UPDATE""",
                (scope.tenant_id, scope.user_id),
            ).fetchall()
        )
        expired = [row for row in rows if _style_expired(row, handle.as_of)]
        for row in expired:
            closed = memory_row(
                page.conn.execute(
                    f"""UPDATE memories SET valid_until = now(), updated_at = now()
                    WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
                    RETURNING {MEMORY_COLUMNS}""",
                    (scope.tenant_id, scope.user_id, row["id"]),
                ).fetchone()
            )
            if closed is not None:
                count = int((closed["metadata"] or {}).get("reinforced_count", 1))
                record_event(
                    page.conn,
                    scope,
                    closed,
                    "delete",
                    ACTOR,
                    old_value=closed["value"],
                    details={"reason": f"style seen {count}× not seen again for {count * DECAY_DAYS} days"},
                )
        if expired:
            release_derived(page.conn, scope, [row["id"] for row in expired], actor=ACTOR, forgotten=False)
            page.count("styles_expired", len(expired))
            page.changed += len(expired)
            # Committed with the expiry, so a run killed before the synthesis below still does it on resume.
            page.cursor["synthesis_pending"] = user.user_id
    if handle.cursor.get("synthesis_pending") == user.user_id:
        # The directive's inputs changed: synthesise it again from the observations still alive (with
        # fewer than three the old directive stays, as synthesis always does).
        outcome = synthesize_personality(
            user.tenant_id, user.user_id, handle.settings, provider=handle.model(), now=handle.as_of
        )
        handle.to_embed.extend(outcome.changed_memory_ids)
        with handle.page() as page:
            page.cursor.pop("synthesis_pending", None)
            page.count("directives_resynthesised", 0 if outcome.skipped else 1)
            page.changed += len(outcome.changed_memory_ids)


def _style_expired(row: MemoryRow, as_of: datetime) -> bool:
    meta = row["metadata"] or {}
    count = max(1, int(meta.get("reinforced_count", 1)))
    last = meta.get("last_reinforced")
    try:
        seen = datetime.fromisoformat(last) if isinstance(last, str) else row["updated_at"]
    except ValueError:
        seen = row["updated_at"]
    return bool(as_of - seen >= timedelta(days=count * DECAY_DAYS))
