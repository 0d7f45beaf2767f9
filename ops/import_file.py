"""Reading a conversation file for `engram import`: the whole file is read and checked before anything is
sent, so a malformed file writes nothing.

Accepted shapes (JSON or JSONL, told apart by content):

- an engram export (`GET /v1/users/{id}/export`, `{"user", "sessions", "messages", "memories", …}`): every
  session's messages in conversation order, and the user's active memories;
- JSONL, one message per line: `{"role", "content", "created_at"?, "name"?, "session_key"?, "user_id"?,
  "idempotency_key"?}`;
- a JSON array of such messages, or an object `{"user_id"?, "session_key"?, "messages": [...]}`.

Missing users and sessions come from the command's --user and --session. Every message gets an idempotency
key derived from where it came from and what it says (unless it brings its own), so a re-run writes nothing
twice and a file that grew appends only its new messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("user", "assistant", "system", "tool")
MESSAGE_FIELDS = frozenset({"role", "content", "created_at", "name", "session_key", "user_id", "idempotency_key"})
MEMORY_FIELDS = ("key", "value", "namespace", "kind", "tags", "confidence", "event_time")


class ImportFileError(ValueError):
    """The file cannot be imported; the message says where and why."""


@dataclass
class Conversation:
    user_id: str
    session_key: str
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ImportPlan:
    conversations: list[Conversation]
    memories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # user id → memory bodies
    source: str = "messages"  # "export" or "messages"

    @property
    def message_count(self) -> int:
        return sum(len(c.messages) for c in self.conversations)

    @property
    def memory_count(self) -> int:
        return sum(len(m) for m in self.memories.values())


def message_key(origin: Any, message: dict[str, Any]) -> str:
    """A stable key for a message: the same source position and content give the same key on every run."""
    body = [origin, message["role"], message["content"], message.get("created_at"), message.get("name")]
    return "import:" + hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:40]


def _documents(path: Path) -> tuple[Any, bool]:
    """(parsed content, is_jsonl)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ImportFileError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot read it ({exc})") from exc
    if not text.strip():
        raise ImportFileError(f"{path}: the file is empty")
    try:
        return json.loads(text), False
    except json.JSONDecodeError as whole:
        lines = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                lines.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                if number == 1:  # not even the first line parses: report the document's own error
                    raise ImportFileError(f"{path}: not valid JSON ({whole.msg}, line {whole.lineno})") from exc
                raise ImportFileError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        return lines, True


def _message(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ImportFileError(f"{where}: a message must be a JSON object")
    unknown = set(raw) - MESSAGE_FIELDS
    if unknown:
        raise ImportFileError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(MESSAGE_FIELDS)}")
    if raw.get("role") not in ROLES:
        raise ImportFileError(f"{where}: role must be one of {', '.join(ROLES)} (got {raw.get('role')!r})")
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ImportFileError(f"{where}: content must be a non-empty string")
    for name in ("created_at", "name", "session_key", "user_id", "idempotency_key"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise ImportFileError(f"{where}: {name} must be a string")
    return dict(raw)


def _group(rows: Iterator[tuple[str, dict[str, Any]]], user: str | None, session: str | None) -> list[Conversation]:
    conversations: dict[tuple[str, str], Conversation] = {}
    for where, message in rows:
        user_id = message.pop("user_id", None) or user
        session_key = message.pop("session_key", None) or session
        if not user_id:
            raise ImportFileError(f"{where}: no user_id in the message and no --user given")
        if not session_key:
            raise ImportFileError(f"{where}: no session_key in the message and no --session given")
        conversation = conversations.setdefault((user_id, session_key), Conversation(user_id, session_key))
        if not message.get("idempotency_key"):
            message["idempotency_key"] = message_key(["messages", len(conversation.messages)], message)
        conversation.messages.append({k: v for k, v in message.items() if v is not None})
    return list(conversations.values())


def _from_export(data: dict[str, Any], user: str | None, where: str) -> ImportPlan:
    exported_user = (data.get("user") or {}).get("external_id")
    user_id = user or exported_user
    if not user_id:
        raise ImportFileError(f"{where}: the export names no user; pass --user")
    sessions = {s.get("id"): s for s in data.get("sessions") or [] if isinstance(s, dict)}
    rows = [m for m in data.get("messages") or [] if isinstance(m, dict)]
    # Conversation order, as engram keeps it: by turn (a message without one first), then id.
    rows.sort(
        key=lambda m: (m.get("session_id") or 0, m.get("turn_id") is not None, m.get("turn_id") or 0, m.get("id") or 0)
    )
    conversations: dict[str, Conversation] = {}
    for row in rows:
        session = sessions.get(row.get("session_id"))
        if session is None:
            raise ImportFileError(f"{where}: message {row.get('id')} belongs to no exported session")
        content = row.get("content") or ""
        if not content.strip():
            continue  # an assistant message that only called tools: nothing to remember from its text
        message: dict[str, Any] = {"role": row.get("role"), "content": content, "created_at": row.get("created_at")}
        name = row.get("name") or ((row.get("tool_results") or {}).get("name") if row.get("role") == "tool" else None)
        if name:
            message["name"] = name
        _message(message, f"{where}: message {row.get('id')}")
        message["idempotency_key"] = message_key(["export", row.get("id")], message)
        key = str(session.get("session_key"))
        conversations.setdefault(key, Conversation(user_id, key)).messages.append(
            {k: v for k, v in message.items() if v is not None}
        )
    memories = []
    for memory in data.get("memories") or []:
        if isinstance(memory, dict) and memory.get("valid_until") is None and memory.get("value"):
            memories.append({name: memory[name] for name in MEMORY_FIELDS if memory.get(name) is not None})
    return ImportPlan(list(conversations.values()), {user_id: memories} if memories else {}, "export")


def read_import_file(path: Path, *, user: str | None = None, session: str | None = None) -> ImportPlan:
    """Everything the file asks to import, checked; raises ImportFileError naming the first problem."""
    plan = _read(path, user, session)
    if not plan.message_count and not plan.memory_count:
        raise ImportFileError(f"{path}: no messages (or memories) to import")
    return plan


def _read(path: Path, user: str | None, session: str | None) -> ImportPlan:
    data, is_jsonl = _documents(path)
    if is_jsonl:
        rows = ((f"{path}:{number}", _message(raw, f"{path}:{number}")) for number, raw in data)
        return ImportPlan(_group(rows, user, session))
    if isinstance(data, dict) and "sessions" in data and "messages" in data:
        return _from_export(data, user, str(path))
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        for name in ("user_id", "session_key"):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise ImportFileError(f"{path}: {name} must be a string")
        user = user or data.get("user_id")
        session = session or data.get("session_key")
        data = data["messages"]
    if isinstance(data, dict) and "role" in data:  # a JSONL file of one line is a JSON document too
        data = [data]
    if not isinstance(data, list):
        raise ImportFileError(
            f"{path}: expected an engram export, a list of messages, an object with `messages`, or JSONL"
        )
    rows = ((f"{path}: message {index}", _message(raw, f"{path}: message {index}")) for index, raw in enumerate(data))
    return ImportPlan(_group(rows, user, session))
