"""The personality job: a user's live style observations, turned into the directive engram's static prompt shows
(the rules are shared.pipeline.personality's)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.infra import db
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.llm.factory import provider_name
from shared.llm.ledger import LedgerScope
from shared.llm.types import ChatProvider
from shared.memory.memory_input import DIRECTIVE_KEY, DIRECTIVE_NAMESPACE, MemoryInput
from shared.memory.store import Scope
from shared.pipeline.background_llm import complete
from shared.pipeline.jobs import JobOutcome, store_all
from shared.pipeline.personality import (
    StyleObservation,
    active_styles,
    build_synthesis_prompt,
    clean_directive,
    offline_directive,
    should_synthesize,
)


def _style_observations(conn: Conn, scope: Scope) -> list[StyleObservation]:
    rows = conn.execute(
        """SELECT key, value, metadata, created_at, updated_at FROM memories
           WHERE tenant_id = %s AND user_id = %s AND valid_until IS NULL
             AND (kind = 'style' OR namespace LIKE 'tacit/personality/style%%')""",
        (scope.tenant_id, scope.user_id),
    ).fetchall()
    observations = []
    for row in rows:
        meta = row["metadata"] or {}
        first = _parse_time(meta.get("first_observed")) or row["created_at"]
        last = _parse_time(meta.get("last_reinforced")) or row["updated_at"]
        observations.append(
            StyleObservation(row["key"], row["value"], int(meta.get("reinforced_count", 1)), first, last)
        )
    return observations


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def synthesize_personality(
    tenant_id: int, user_id: int, settings: Settings, provider: ChatProvider | None = None, now: datetime | None = None
) -> JobOutcome:
    """Turn live style observations into the directive the static prompt shows."""
    now = now or datetime.now(UTC)
    scope = Scope(tenant_id, user_id)
    with db.connection() as conn:
        active = active_styles(_style_observations(conn, scope), now=now)
    outcome = JobOutcome()
    if not should_synthesize(active):
        outcome.skipped = f"{len(active)} live style observations; need at least 3"
        return outcome
    if provider_name(settings) == "offline":
        directive: str | None = offline_directive(active)
    else:
        system, user = build_synthesis_prompt(active)
        result = complete(
            settings,
            "synthesis",
            system,
            user,
            ledger=LedgerScope(tenant_id, user_id, None),
            provider=provider,
            max_tokens=400,
        )
        outcome.calls = result.calls
        directive = clean_directive(result.text)
    with db.connection() as conn:
        if directive:
            item = MemoryInput(key=DIRECTIVE_KEY, value=directive, namespace=DIRECTIVE_NAMESPACE, kind="directive")
            store_all(conn, scope, [item], "synthesis", outcome)
        else:
            outcome.skipped = "the model's directive was unusable"
    return outcome
