"""The records of a conversation as they are read from Postgres and handed between modules: a session, a turn and
a message of its transcript. Each is a TypedDict of the columns one kind of read returns (psycopg's dict_row, so
at run time a plain dict): where two reads return different columns they are different records, the narrower one
first and the wider one built on it. The memory record is shared.memory.rows.MemoryRow.

Free-form JSON columns (a turn's usage, timings, details and client options; a message's tool calls and results)
stay `dict[str, Any]`: their shape is the writer's, not the table's."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict, cast

from psycopg.rows import DictRow

# ------------------------------------------------------------------------------ session


class SessionRow(TypedDict):
    """A session row, every column (`SELECT * FROM sessions`, `RETURNING *`)."""

    id: int
    tenant_id: int
    user_id: int
    channel: str
    session_key: str
    summary: str | None
    active_task: str | None
    token_count: int  # the live (not compacted) size, which decides flush and compaction
    compaction_count: int
    memory_flush_compaction_count: int
    last_extracted_message_id: int
    last_embedded_message_id: int
    last_flushed_message_id: int
    consolidated_message_id: int
    consolidated_at: datetime | None
    compacted_at: datetime | None
    last_compacted_turn_id: int | None
    fence_seed: str
    budget_warned_at: datetime | None
    recovery_pending: bool
    created_at: datetime
    updated_at: datetime


def session_row(row: DictRow | None) -> SessionRow | None:
    """A row read with every column of sessions, as the record it is."""
    return cast("SessionRow | None", row)


# ------------------------------------------------------------------------------ turn


class TurnRef(TypedDict):
    """Which turn of whose session: what a turn's history and relevant-memory reads need (shared.context.history),
    and all a stand-in turn has (the context inspection of a session's next request)."""

    id: int
    tenant_id: int
    user_id: int
    session_id: int


class TurnRow(TurnRef):
    """A turn row, every column (`SELECT t.*`)."""

    kind: str  # chat or ingest
    status: str  # queued, running, done, failed
    idempotency_key: str | None
    request_hash: str | None
    attempts: int
    reply: str | None
    error: str | None
    usage: dict[str, Any]
    timings: dict[str, Any]
    details: dict[str, Any]
    client: dict[str, Any] | None  # what an OpenAI-compatible caller asked of its turn (ClientOptions)
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


class ClaimedTurn(TurnRow):
    """A turn as the runner claims it: its row (attempts counting this attempt) and its user's time zone."""

    timezone: str | None


class TurnView(TypedDict):
    """A chat turn as its caller reads it back (the REST API, the OpenAI-compatible endpoint): its session and
    user by the caller's names for them."""

    turn_id: int
    session_id: int
    session_key: str
    user_id: str  # the user's external id
    status: str
    reply: str | None
    error: str | None
    usage: dict[str, Any]
    timings: dict[str, Any]
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class KeyedTurnView(TurnView):
    """A TurnView read to answer a repeated Idempotency-Key: with the request hash to compare, and (the one-statement
    submit) whether the turn was already there. Both are removed before the turn is returned."""

    request_hash: NotRequired[str | None]
    replayed: NotRequired[bool]


# ------------------------------------------------------------------------------ message


class ContextMessage(TypedDict):
    """A message as the turn's history reads it, to become a ChatMessage (shared.context.history.row_to_message)."""

    role: str  # user, assistant, tool (system messages are not history)
    content: str
    name: str | None  # the speaker's or tool's name, as the conversation gave it
    tool_calls: list[dict[str, Any]] | None  # assistant: [{"id", "name", "arguments"}]
    tool_results: dict[str, Any] | None  # tool: {"tool_call_id", "name", "is_error"}


class MessageRow(ContextMessage):
    """A message of a session's transcript as its caller lists it (GET .../messages)."""

    id: int
    turn_id: int | None
    is_compacted: bool
    created_at: datetime


class TranscriptRow(TypedDict):
    """A message as memory work reads the transcript (extraction, flush, compaction's summary)."""

    id: int
    role: str
    content: str
    name: str | None
    created_at: datetime
