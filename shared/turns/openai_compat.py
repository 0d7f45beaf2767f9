"""OpenAI-compatible chat completions as engram turns.

A client of the OpenAI API resends the whole conversation with every request. engram keeps the
conversation itself, so a request is reconciled with the session by content: the longest stretch at
the start of the client's messages that equals the end of what the client has seen of the session
(user messages, each turn's reply, results of the client's own tools) is already there; only the rest
is new and becomes the input of a turn, submitted through `submit_turn` like any REST turn (same
queue, ordering, crash safety and memory pipeline).

What the client has seen of a turn is its input messages and one assistant message: the turn's reply,
with the calls of the client's own tools that ended it. engram's own tool calls never reach the client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.infra.db import Conn
from shared.turns.accept import NewMessage, TurnInput
from shared.turns.client_options import ClientOptions

DEFAULT_SESSION_PREFIX = "openai-"
_SESSION_UNSAFE = re.compile(r"[^A-Za-z0-9._:@\-]")


class CompletionRefused(ValueError):
    """The request cannot become a turn; the message says why (a 4xx for the client)."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400, code: str = "invalid_messages"):
        super().__init__(message)
        self.param = param
        self.status = status
        self.code = code


@dataclass(frozen=True)
class ClientCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ClientMessage:
    """One message of the client's list, system messages excepted."""

    role: str  # user, assistant or tool
    content: str
    tool_calls: tuple[ClientCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # the participant's name (OpenAI's `name`): the speaker it is stored under

    def key(self) -> tuple[Any, ...]:
        """What two messages must share to be the same message."""
        if self.role == "assistant":
            return ("assistant", self.content.strip(), tuple(sorted(call.id for call in self.tool_calls)))
        if self.role == "tool":
            return ("tool", self.tool_call_id, self.content)
        return ("user", self.content)


def default_session_key(model: str) -> str:
    """One session per user and model unless the client names one (X-Engram-Session)."""
    return (DEFAULT_SESSION_PREFIX + _SESSION_UNSAFE.sub("-", model))[:128]


# ------------------------------------------------------------------------------------ the history


def visible_history(conn: Conn, session_id: int, turns: int) -> list[ClientMessage]:
    """What a client has seen of the session's latest `turns` turns, in order."""
    rows = conn.execute(
        "SELECT id, status, reply, client FROM turns WHERE session_id = %s ORDER BY id DESC LIMIT %s",
        (session_id, turns),
    ).fetchall()
    if not rows:
        return []
    rows.reverse()
    messages: dict[int, list[dict[str, Any]]] = {row["id"]: [] for row in rows}
    for message in conn.execute(
        """SELECT turn_id, role, content, tool_calls, tool_results FROM session_messages
           WHERE session_id = %s AND turn_id >= %s ORDER BY turn_id, id""",
        (session_id, rows[0]["id"]),
    ).fetchall():
        if message["turn_id"] in messages:
            messages[message["turn_id"]].append(message)
    seen: list[ClientMessage] = []
    for turn in rows:
        stored = messages[turn["id"]]
        if turn["reply"] is None:  # not answered (yet), or messages without an agent loop
            seen.extend(_as_client(m) for m in stored if m["role"] in ("user", "assistant", "tool"))
            continue
        options = ClientOptions.from_json(turn["client"])
        inputs = options.inputs if options is not None else 1
        seen.extend(_as_client(m) for m in stored[:inputs])
        seen.append(ClientMessage("assistant", turn["reply"], tuple(_handed_back(stored[inputs:], options))))
    return seen


def _as_client(row: dict[str, Any]) -> ClientMessage:
    calls = tuple(ClientCall(c["id"], c["name"], c.get("arguments") or {}) for c in row["tool_calls"] or [])
    call_id = (row["tool_results"] or {}).get("tool_call_id") if row["role"] == "tool" else None
    return ClientMessage(row["role"], row["content"], calls, call_id)


def _handed_back(outputs: list[dict[str, Any]], options: ClientOptions | None) -> list[ClientCall]:
    """The calls of the client's own tools that ended the turn (in its last assistant message)."""
    if options is None or not options.tools:
        return []
    last = next((m for m in reversed(outputs) if m["role"] == "assistant"), None)
    if last is None:
        return []
    names = options.tool_names
    return [
        ClientCall(c["id"], c["name"], c.get("arguments") or {}) for c in last["tool_calls"] or [] if c["name"] in names
    ]


def new_messages(seen: Sequence[ClientMessage], sent: Sequence[ClientMessage]) -> list[ClientMessage]:
    """`sent` minus its longest prefix that equals the end of `seen` (the client resends history; it
    may also drop old messages, or send only the newest)."""
    seen_keys = [m.key() for m in seen]
    sent_keys = [m.key() for m in sent]
    for overlap in range(min(len(seen_keys), len(sent_keys)), 0, -1):
        if sent_keys[:overlap] == seen_keys[len(seen_keys) - overlap :]:
            return list(sent[overlap:])
    return list(sent)


# ------------------------------------------------------------------------------------ the turn


@dataclass(frozen=True)
class CompletionPlan:
    """Decides a turn's input with the session locked (a `TurnPlanner` for submit_turn)."""

    sent: Sequence[ClientMessage]
    options: ClientOptions
    max_chars: int  # longest new message (ENGRAM_MAX_TURN_CHARS)

    def __call__(self, conn: Conn, session_id: int) -> TurnInput | int:
        seen = visible_history(conn, session_id, turns=len(self.sent) + 1)
        new = new_messages(seen, self.sent)
        for message in new:
            if len(message.content) > self.max_chars:
                index = len(self.sent) - len(new) + new.index(message)
                raise CompletionRefused(
                    f"messages[{index}] is {len(message.content)} characters; the limit for a new message is "
                    f"{self.max_chars} (ENGRAM_MAX_TURN_CHARS)",
                    f"messages[{index}].content",
                    status=413,
                    code="payload_too_large",
                )
        if not new:
            return self._nothing_new(conn, session_id)
        if new[-1].role == "assistant":
            raise CompletionRefused(
                "the last message is from the assistant: there is nothing to answer (end with a user or tool message)",
                "messages",
            )
        return TurnInput([_stored(m, self.sent) for m in new], self.options.to_json())

    def _nothing_new(self, conn: Conn, session_id: int) -> TurnInput | int:
        if self.sent[-1].role == "assistant":
            raise CompletionRefused("every message is already answered: send a new user message", "messages")
        latest = conn.execute(
            "SELECT id, status FROM turns WHERE session_id = %s ORDER BY id DESC LIMIT 1", (session_id,)
        ).fetchone()
        assert latest is not None  # the sent messages matched stored ones
        if latest["status"] in ("queued", "running"):
            return int(latest["id"])  # a resent request (a retry): the open turn answers it
        # Nothing is answering them: the turn that took them failed, or they were ingested. A turn with no
        # new messages answers what the session already holds.
        return TurnInput([], self.options.to_json())


def _stored(message: ClientMessage, sent: Sequence[ClientMessage]) -> NewMessage:
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
    if message.role == "tool":
        tool = next((c.name for m in sent for c in m.tool_calls if c.id == message.tool_call_id), None)
        return NewMessage(message.role, message.content, calls, message.tool_call_id, tool_name=tool)
    return NewMessage(message.role, message.content, calls, name=message.name)


def check_tool_results(sent: Sequence[ClientMessage]) -> None:
    """Every tool message answers a call of an earlier assistant message of the list (as OpenAI requires)."""
    called: set[str] = set()
    for index, message in enumerate(sent):
        called.update(call.id for call in message.tool_calls)
        if message.role == "tool" and message.tool_call_id not in called:
            raise CompletionRefused(
                f"messages[{index}]: a tool message must answer a tool call of an earlier assistant message "
                f"(no call has id {message.tool_call_id!r})",
                f"messages[{index}].tool_call_id",
            )


# ------------------------------------------------------------------------------------ the answer


@dataclass(frozen=True)
class Completion:
    turn_id: int
    status: str
    reply: str
    error: str | None
    usage: dict[str, Any]
    tool_calls: list[ClientCall]

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def load_completion(conn: Conn, tenant_id: int, turn_id: int) -> Completion | None:
    turn = conn.execute(
        "SELECT id, status, reply, error, usage, client FROM turns WHERE tenant_id = %s AND id = %s",
        (tenant_id, turn_id),
    ).fetchone()
    if turn is None:
        return None
    options = ClientOptions.from_json(turn["client"])
    calls: list[ClientCall] = []
    if turn["status"] == "done" and options is not None and options.tools:
        stored = conn.execute(
            "SELECT role, tool_calls FROM session_messages WHERE turn_id = %s ORDER BY id", (turn_id,)
        ).fetchall()
        calls = _handed_back(stored[options.inputs :], options)
    return Completion(turn["id"], turn["status"], turn["reply"] or "", turn["error"], turn["usage"] or {}, calls)


def openai_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """engram's usage (uncached input, cache reads and writes counted apart) as OpenAI counts it."""
    cached = int(usage.get("cache_read_tokens", 0))
    prompt = int(usage.get("input_tokens", 0)) + cached + int(usage.get("cache_write_tokens", 0))
    completion = int(usage.get("output_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_tool_call(call: ClientCall | dict[str, Any], index: int | None = None) -> dict[str, Any]:
    if isinstance(call, dict):
        call = ClientCall(call["id"], call["name"], call.get("arguments") or {})
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
    }
    return out if index is None else {"index": index, **out}
