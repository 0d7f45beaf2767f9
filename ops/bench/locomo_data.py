"""The LoCoMo dataset as the benchmarks read it: conversations, their turns and questions."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ops.bench.harness import BenchError

DEV_FILE = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo-dev.json"  # ../shared beside the checkout
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
EXCLUDED_CATEGORIES = frozenset({5})  # adversarial: no evidence to retrieve

_DIA_ID = re.compile(r"D(\d+):(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_SESSION_KEY = re.compile(r"session_(\d+)")
_SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str  # as stored: "<speaker>: <text>[ [image: <caption>]]"
    event_time: datetime | None
    said: str = ""  # the dialogue text alone: no speaker, no caption (the e2e mode looks for it in context)
    caption: str = ""  # the caption of the image the turn shared, if any


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]


def normalise_dia_id(raw: str) -> str | None:
    """ "D30:05" → "D30:5"; None for anything that is not `D<session>:<turn>`."""
    match = _DIA_ID.fullmatch(raw.strip())
    return f"D{int(match.group(1))}:{int(match.group(2))}" if match else None


def parse_evidence(items: Sequence[Any], known: set[str]) -> tuple[str, ...]:
    """Evidence ids in order, deduplicated; a few entries pack several ids ("D8:6; D9:17")."""
    found: list[str] = []
    for item in items:
        for part in _EVIDENCE_SPLIT.split(str(item)):
            dia_id = normalise_dia_id(part) if part else None
            if dia_id is not None and dia_id in known and dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def parse_session_date(raw: Any) -> datetime | None:
    """Session dates are local times without a zone; they are read as UTC (only order and day matter)."""
    if not isinstance(raw, str):
        return None
    try:
        return datetime.strptime(" ".join(raw.split()), _SESSION_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def turn_text(turn: dict[str, Any]) -> str:
    caption = turn.get("blip_caption")
    return f"{turn.get('speaker', '')}: {turn.get('text', '')}" + (f" [image: {caption}]" if caption else "")


def read_locomo(path: Path) -> list[dict[str, Any]]:
    """The file's JSON list of conversations, as every LoCoMo benchmark reads it; a BenchError says why not."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise BenchError(f"{path}: not a LoCoMo-format JSON file ({exc})") from exc
    if not isinstance(data, list):
        raise BenchError(f"{path}: expected a JSON list of conversations")
    return data


def load_conversations(path: Path) -> list[Conversation]:
    return parse_conversations(read_locomo(path))


def parse_conversations(data: list[dict[str, Any]]) -> list[Conversation]:
    conversations = []
    for index, sample in enumerate(data):
        body = sample.get("conversation") or {}
        sessions = sorted(
            (int(m.group(1)), key) for key in body if (m := _SESSION_KEY.fullmatch(key)) and isinstance(body[key], list)
        )
        turns: list[Turn] = []
        for number, key in sessions:
            when = parse_session_date(body.get(f"{key}_date_time"))
            for raw in body[key]:
                dia_id, said = normalise_dia_id(str(raw.get("dia_id", ""))), str(raw.get("text", ""))
                if dia_id is None or not said.strip():
                    continue
                speaker, caption = str(raw.get("speaker", "")), str(raw.get("blip_caption") or "")
                turns.append(Turn(dia_id, number, speaker, turn_text(raw), when, said=said, caption=caption))
        known = {turn.dia_id for turn in turns}
        conversation = Conversation(str(sample.get("sample_id", f"conversation-{index}")), turns, [])
        for qa in sample.get("qa") or []:
            category = int(qa.get("category", 0))
            evidence = parse_evidence(qa.get("evidence") or [], known)
            if category not in EXCLUDED_CATEGORIES and evidence:  # questions without evidence are left out
                conversation.questions.append(Question(str(qa.get("question", "")), category, evidence))
        conversations.append(conversation)
    return conversations


def session_messages(conversation: Conversation) -> dict[int, list[dict[str, Any]]]:
    """The messages of each LoCoMo session, in order, as the ingest API takes them."""
    sessions: dict[int, list[dict[str, Any]]] = {}
    for turn in conversation.turns:
        messages = sessions.setdefault(turn.session, [])
        content = turn.said.strip() + (f" [image: {turn.caption}]" if turn.caption else "")
        message: dict[str, Any] = {"role": "user", "content": content, "idempotency_key": turn.dia_id}
        if turn.speaker.strip():
            message["name"] = turn.speaker.strip()[:128]
        if turn.event_time is not None:
            message["created_at"] = turn.event_time + timedelta(seconds=len(messages))
        messages.append(message)
    return sessions
