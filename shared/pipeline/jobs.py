"""The background memory jobs, as plain functions the Celery tasks call.

Each job is idempotent: what it has done is recorded in Postgres in the same transaction as its
result (message marks, watermarks, counters compared-and-set), so a redelivered or duplicated
task finds the work done and writes nothing twice. LLM calls happen outside transactions and are
recorded in the ledger as they happen, so a job that loses its race still counts what it spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from shared.infra import db
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.infra.logging import get_logger
from shared.infra.metrics import observe_extraction_lag
from shared.llm.factory import provider_name
from shared.llm.ledger import CallRecord, LedgerScope
from shared.llm.types import ChatProvider
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from shared.pipeline.background_llm import complete
from shared.pipeline.compaction import (
    SUMMARY_MESSAGE_CHARS,
    SUMMARY_TOTAL_CHARS,
    build_compaction_prompt,
    build_summary_prompt,
    choose_keep,
    cumulative_summary,
    parse_summary,
)
from shared.pipeline.extraction import (
    TranscriptMessage,
    build_extraction_prompt,
    is_conversational,
    said_when,
    select_for_extraction,
    to_memory_inputs,
)
from shared.pipeline.extraction_parsing import ExtractedFacts, parse_extraction, summary_in_answer
from shared.pipeline.offline_compaction import offline_active_task, offline_summary
from shared.pipeline.offline_extraction import offline_extract
from shared.pipeline.speakers import several_speakers
from shared.pipeline.triggers import compaction_threshold, flush_needed
from shared.turns.accept import refresh_token_count
from shared.turns.rows import SessionRow, TranscriptRow, session_row

log = get_logger(__name__)

DOCUMENT_THRESHOLD_CHARS = 5000


@dataclass
class JobOutcome:
    """What a job did: memories whose text changed (to embed), whether styles changed, LLM calls."""

    changed_memory_ids: list[int] = field(default_factory=list)
    styles_changed: bool = False
    calls: list[CallRecord] = field(default_factory=list)
    skipped: str | None = None  # why nothing was done


def session_owner(session_id: int) -> tuple[int | None, int | None]:
    """(tenant_id, user_id) of a session, or (None, None) when it is gone."""
    with db.connection() as conn:
        row = conn.execute("SELECT tenant_id, user_id FROM sessions WHERE id = %s", (session_id,)).fetchone()
    return (row["tenant_id"], row["user_id"]) if row else (None, None)


def _session(conn: Conn, session_id: int) -> SessionRow | None:
    return session_row(conn.execute("SELECT * FROM sessions WHERE id = %s", (session_id,)).fetchone())


class _FlushRow(TranscriptRow):
    """A message as flush reads it: whether extraction mined it already."""

    extracted_at: datetime | None


class _LiveRow(TranscriptRow):
    """A live (not compacted) message as compaction plans its cut."""

    turn_id: int | None
    token_estimate: int


def _transcript(rows: Sequence[TranscriptRow]) -> list[TranscriptMessage]:
    return [
        TranscriptMessage(row["id"], row["role"], row["content"], row.get("name"), row.get("created_at"))
        for row in rows
    ]


def _facts(
    settings: Settings,
    provider: ChatProvider | None,
    purpose: str,
    messages: list[TranscriptMessage],
    today: datetime,
    ledger: LedgerScope,
    several: bool,
) -> tuple[ExtractedFacts, list[CallRecord]]:
    if not any(m.role == "user" for m in messages):
        return ExtractedFacts(), []
    if provider_name(settings) == "offline":
        return offline_extract(messages, name_speakers=several), []
    system, user = build_extraction_prompt(messages, today=today.date(), several_speakers=several)
    result = complete(settings, purpose, system, user, ledger=ledger, provider=provider)  # type: ignore[arg-type]
    return parse_extraction(result.text), result.calls


def store_all(conn: Conn, scope: Scope, items: list[MemoryInput], actor: str, outcome: JobOutcome) -> None:
    for item in items:
        try:
            result = store_memory(conn, scope, item, actor)
        except MemoryRejected as exc:  # one bad fact must not lose the others
            log.info("extracted fact rejected", key=item.key, reason=str(exc))
            continue
        if result.changed:
            outcome.changed_memory_ids.append(result.memory["id"])
        if item.kind == "style" and result.action in ("added", "reinforced"):
            outcome.styles_changed = True


def _ledger(session: SessionRow) -> LedgerScope:
    """The session's calls are charged to it (each call is recorded when it happens, see ledger.py)."""
    return LedgerScope(session["tenant_id"], session["user_id"], session["id"])


def _mine(
    settings: Settings,
    provider: ChatProvider | None,
    purpose: str,
    session: SessionRow,
    rows: Sequence[TranscriptRow],
    now: datetime,
    several: bool,
) -> tuple[list[MemoryInput], JobOutcome]:
    """Facts from these messages as memory inputs (not stored yet); the LLM calls are already in the ledger.
    `several`: the session's user messages come from several named people (speakers.several_speakers)."""
    selected = select_for_extraction(_transcript(rows))
    outcome = JobOutcome()
    # "Today" for the model is the day the messages were said (an imported conversation is read as of then).
    said = said_when(selected) or now
    facts, outcome.calls = _facts(settings, provider, purpose, selected, said, _ledger(session), several)
    items = to_memory_inputs(facts, today=said.date(), source_session_id=session["id"], messages=selected)
    return items, outcome


# ------------------------------------------------------------------------------ extraction


def _unextracted(conn: Conn, session_id: int) -> list[TranscriptRow]:
    """The session's messages extraction has not read yet, oldest first (at most 400: one job's worth)."""
    rows = conn.execute(
        """SELECT id, role, content, name, created_at FROM session_messages
           WHERE session_id = %s AND extracted_at IS NULL ORDER BY id LIMIT 400""",
        (session_id,),
    ).fetchall()
    return cast("list[TranscriptRow]", rows)


def extract_session(
    session_id: int, settings: Settings, provider: ChatProvider | None = None, now: datetime | None = None
) -> JobOutcome:
    """Mine every not-yet-extracted message of the session; memories and marks in one transaction."""
    now = now or datetime.now(UTC)
    with db.connection() as conn:
        session = _session(conn, session_id)
        if session is None:
            return JobOutcome(skipped="session gone")
        rows = _unextracted(conn, session_id)
        several = bool(rows) and several_speakers(conn, session_id, _transcript(rows))
    if not rows:
        return JobOutcome(skipped="nothing new")
    items, outcome = _mine(settings, provider, "extraction", session, rows, now, several)
    return _store_mined(session, rows, items, outcome)


def _store_mined(
    session: SessionRow, rows: Sequence[TranscriptRow], items: list[MemoryInput], outcome: JobOutcome
) -> JobOutcome:
    """The memories mined from these messages and their marks, in one transaction."""
    with db.connection() as conn:
        if not _mark_mined(conn, session["id"], [row["id"] for row in rows]):
            conn.rollback()  # another run mined (some of) these meanwhile: keep its result
            return JobOutcome(calls=outcome.calls, skipped="raced with another extraction")
        store_all(conn, Scope(session["tenant_id"], session["user_id"]), items, "extraction", outcome)
    _observe_lag(rows)
    return outcome


def _mark_mined(conn: Conn, session_id: int, ids: list[int]) -> bool:
    """Mark these messages extracted (in `conn`'s transaction); False when another run marked some first."""
    if not ids:
        return True
    marked = conn.execute(
        "UPDATE session_messages SET extracted_at = now() WHERE id = ANY(%s) AND extracted_at IS NULL", (ids,)
    ).rowcount
    if marked != len(ids):
        return False
    conn.execute(
        "UPDATE sessions SET last_extracted_message_id = greatest(last_extracted_message_id, %s) WHERE id = %s",
        (max(ids), session_id),
    )
    return True


def _observe_lag(rows: Sequence[TranscriptRow]) -> None:
    mined_at = datetime.now(UTC)
    observe_extraction_lag((row["role"], (mined_at - row["created_at"]).total_seconds()) for row in rows)


# ----------------------------------------------------------------------------------- flush


def flush_session(
    session_id: int,
    settings: Settings,
    provider: ChatProvider | None = None,
    now: datetime | None = None,
    *,
    mine: bool = True,
) -> JobOutcome:
    """Before the context is compacted, mine what extraction has not mined yet, once per compaction cycle.

    Messages extraction already mined gave their facts; reading them again would only pay for the same
    facts twice, so a flush with nothing unmined makes no model call. `mine=False`: the caller knows the
    session's pending extraction will mine those messages (it runs within the max wait, compacted or not), so
    the flush only closes its cycle: a call of its own would split that extraction's batch in two.
    """
    now = now or datetime.now(UTC)
    with db.connection() as conn:
        session = _session(conn, session_id)
        if session is None:
            return JobOutcome(skipped="session gone")
        if not flush_needed(session):
            return JobOutcome(skipped="already flushed this compaction cycle")
        rows = cast(
            "list[_FlushRow]",
            conn.execute(
                """SELECT id, role, content, name, created_at, extracted_at FROM session_messages
                   WHERE session_id = %s AND id > %s ORDER BY turn_id NULLS FIRST, id""",
                (session_id, session["last_flushed_message_id"]),
            ).fetchall(),
        )
        unmined = [row for row in rows if row["extracted_at"] is None] if mine else []
        several = bool(unmined) and several_speakers(conn, session_id, _transcript(unmined))
    items, outcome = _mine(settings, provider, "flush", session, unmined, now, several)
    with db.connection() as conn:
        claimed = conn.execute(
            """UPDATE sessions SET memory_flush_compaction_count = compaction_count,
                   last_flushed_message_id = greatest(last_flushed_message_id, %s)
               WHERE id = %s AND memory_flush_compaction_count = %s AND compaction_count = %s RETURNING id""",
            (
                max((r["id"] for r in rows), default=0),
                session_id,
                session["memory_flush_compaction_count"],
                session["compaction_count"],
            ),
        ).fetchone()
        if claimed is None:
            conn.rollback()
            return JobOutcome(skipped="another flush of this cycle won")
        if not _mark_mined(conn, session_id, [row["id"] for row in unmined]):
            conn.rollback()  # an extraction mined them meanwhile: its facts stand, the next trigger closes the cycle
            return JobOutcome(skipped="raced with an extraction")
        store_all(conn, Scope(session["tenant_id"], session["user_id"]), items, "flush", outcome)
    if not unmined:
        outcome.skipped = "left to the pending extraction" if not mine else "extraction had mined every message"
    else:
        _observe_lag(unmined)
    return outcome


# ------------------------------------------------------------------------------ compaction


@dataclass
class CompactionOutcome:
    compacted: int = 0
    kept: int = 0
    documents: int = 0
    summary: str | None = None
    active_task: str | None = None
    calls: list[CallRecord] = field(default_factory=list)
    skipped: str | None = None


def _plan_compaction(conn: Conn, session: SessionRow, threshold: int) -> tuple[list[_LiveRow], int] | None:
    live = cast(
        "list[_LiveRow]",
        conn.execute(
            """SELECT id, turn_id, role, content, name, created_at, token_estimate FROM session_messages
               WHERE session_id = %s AND NOT is_compacted ORDER BY turn_id NULLS FIRST, id""",
            (session["id"],),
        ).fetchall(),
    )
    if sum(m["token_estimate"] for m in live) < threshold:
        return None
    open_turn = conn.execute(
        "SELECT min(id) AS id FROM turns WHERE session_id = %s AND status IN ('queued', 'running')", (session["id"],)
    ).fetchone()
    first_open = open_turn["id"] if open_turn else None
    keep = choose_keep([m["token_estimate"] for m in live], threshold_tokens=threshold)
    cut = len(live) - keep
    # Never separate a tool result from the assistant message that called it (providers reject that).
    while 0 < cut < len(live) and live[cut]["role"] == "tool":
        cut -= 1
    # Never compact a turn that has not run yet: its own user message must reach the model.
    candidates = [m for m in live[:cut] if first_open is None or m["turn_id"] is None or m["turn_id"] < first_open]
    return (candidates, len(live) - len(candidates)) if candidates else None


def compact_session(session_id: int, settings: Settings, provider: ChatProvider | None = None) -> CompactionOutcome:
    """Summarise and retire the session's oldest messages once it has reached the threshold (one summary call)."""
    found = _read_compaction(session_id, compaction_threshold(settings))
    if isinstance(found, CompactionOutcome):
        return found
    session, messages, kept, tool_rows = found
    transcript = _transcript(messages)
    outcome = CompactionOutcome(kept=kept)
    if provider_name(settings) == "offline":
        new_summary, task = offline_summary(transcript), offline_active_task(transcript)
    else:
        system, user = build_summary_prompt(transcript, session["summary"])
        result = complete(settings, "summary", system, user, ledger=_ledger(session), provider=provider)
        outcome.calls = result.calls
        new_summary, task = parse_summary(result.text)
    return _apply_compaction(session, messages, tool_rows, new_summary, task, outcome)


_Compactable = tuple[SessionRow, list[_LiveRow], int, list[dict[str, Any]]]


def _read_compaction(session_id: int, threshold: int) -> _Compactable | CompactionOutcome:
    """(session, messages to compact, how many stay, their tool rows), or why there is nothing to compact."""
    with db.connection() as conn:
        session = _session(conn, session_id)
        if session is None:
            return CompactionOutcome(skipped="session gone")
        plan = _plan_compaction(conn, session, threshold)
        if plan is None:
            return CompactionOutcome(skipped="under the threshold or nothing compactable")
        messages, kept = plan
        tool_rows = conn.execute(
            "SELECT id, content, tool_results FROM session_messages WHERE id = ANY(%s) AND role = 'tool'",
            ([m["id"] for m in messages],),
        ).fetchall()
    return session, messages, kept, tool_rows


def _apply_compaction(
    session: SessionRow,
    messages: list[_LiveRow],
    tool_rows: list[dict[str, Any]],
    new_summary: str,
    task: str | None,
    outcome: CompactionOutcome,
) -> CompactionOutcome:
    """Store the cumulative summary and retire the messages, compared-and-set on the compaction count."""
    session_id = session["id"]
    outcome.summary = cumulative_summary(session["summary"], new_summary)
    outcome.active_task = task or session["active_task"]
    ids = [m["id"] for m in messages]
    with db.connection() as conn:
        updated = conn.execute(
            """UPDATE sessions SET summary = %s, active_task = %s, compaction_count = compaction_count + 1,
                   recovery_pending = true, compacted_at = now(), updated_at = now()
               WHERE id = %s AND compaction_count = %s RETURNING id""",
            (outcome.summary, outcome.active_task, session_id, session["compaction_count"]),
        ).fetchone()
        if updated is None:  # a concurrent compaction finished first: its result stands
            conn.rollback()
            return CompactionOutcome(calls=outcome.calls, skipped="another compaction won")
        conn.execute("UPDATE session_messages SET is_compacted = true WHERE id = ANY(%s)", (ids,))
        for row in tool_rows:
            if len(row["content"]) > DOCUMENT_THRESHOLD_CHARS:
                outcome.documents += _move_to_document(conn, session, row)
        refresh_token_count(conn, session_id)
    outcome.compacted = len(ids)
    return outcome


def extract_and_compact(
    session_id: int, settings: Settings, provider: ChatProvider | None = None, now: datetime | None = None
) -> tuple[JobOutcome, CompactionOutcome]:
    """The session's due extraction, and its compaction when the session has reached the threshold, in one
    model call that summarises the messages being compacted and mines every message not mined yet.

    Separate calls would read the same messages twice, and the compaction's would come on top of the
    session's extractions (one summary call per compaction cycle). Falls back to the two calls when one
    answer cannot do both: offline rules, nothing to compact or nothing with a user message to mine, unmined
    messages older than those being compacted (a compaction task retired them and left their mining to this
    run), or an answer without its summary (its memories are kept; the summary gets a call of its own)."""
    now = now or datetime.now(UTC)
    threshold = compaction_threshold(settings)
    with db.connection() as conn:
        due = conn.execute(
            "SELECT token_count >= %s AS due FROM sessions WHERE id = %s", (threshold, session_id)
        ).fetchone()
    if due is None or not due["due"]:
        return extract_session(session_id, settings, provider, now), CompactionOutcome(skipped="under the threshold")
    found = _read_compaction(session_id, threshold)
    if isinstance(found, CompactionOutcome):
        return extract_session(session_id, settings, provider, now), found
    session, messages, kept, tool_rows = found
    with db.connection() as conn:
        rows = _unextracted(conn, session_id)
    compacted_ids = {m["id"] for m in messages}
    transcript = _transcript(messages)
    summarised = [m for m in transcript if is_conversational(m)]
    later = [row for row in rows if row["id"] not in compacted_ids]
    if (
        provider_name(settings) == "offline"
        or not summarised
        or not any(row["role"] == "user" for row in rows)
        or any(row["id"] < summarised[-1].id for row in later)
    ):
        return extract_session(session_id, settings, provider, now), compact_session(session_id, settings, provider)
    with db.connection() as conn:
        several = several_speakers(conn, session_id, _transcript(rows))
    unmined = {row["id"] for row in rows}
    shown = select_for_extraction(
        [*transcript, *_transcript(later)], per_message_chars=SUMMARY_MESSAGE_CHARS, total_chars=SUMMARY_TOTAL_CHARS
    )
    mined = [m for m in shown if m.id in unmined]
    said = said_when(mined) or now
    system, user = build_compaction_prompt(
        shown,
        summarise_until=summarised[-1].id,
        read_before=frozenset(m.id for m in shown if m.id not in unmined),
        previous_summary=session["summary"],
        today=said.date(),
        several_speakers=several,
    )
    result = complete(settings, "summary", system, user, ledger=_ledger(session), provider=provider)
    items = to_memory_inputs(
        parse_extraction(result.text), today=said.date(), source_session_id=session_id, messages=mined
    )
    extraction = _store_mined(session, rows, items, JobOutcome())
    summary = summary_in_answer(result.text)
    if summary is None:
        log.info("combined answer without a summary; summarising on its own", session_id=session_id)
        compaction = compact_session(session_id, settings, provider)
        compaction.calls = [*result.calls, *compaction.calls]
        return extraction, compaction
    new_summary, task = parse_summary(summary)
    compaction = _apply_compaction(
        session, messages, tool_rows, new_summary, task, CompactionOutcome(kept=kept, calls=result.calls)
    )
    return extraction, compaction


def _move_to_document(conn: Conn, session: SessionRow, row: dict[str, Any]) -> int:
    name = (row["tool_results"] or {}).get("name") or "tool"
    created = conn.execute(
        """INSERT INTO documents (tenant_id, user_id, session_id, source_message_id, title, content)
           VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (source_message_id) DO NOTHING RETURNING id""",
        (session["tenant_id"], session["user_id"], session["id"], row["id"], f"{name} result", row["content"]),
    ).fetchone()
    if created is None:
        return 0
    # What stays in the (compacted) transcript points at the document instead of carrying it.
    conn.execute(
        "UPDATE session_messages SET content = %s WHERE id = %s",
        (f"[{name} result stored as document {created['id']}; read it with read_document]", row["id"]),
    )
    return 1
