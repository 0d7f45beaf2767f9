"""The static prompt: built once per turn, reused for every iteration of it, and byte-identical from
turn to turn while its inputs (profiles, learned directive, remembered facts, tools) are unchanged —
that is what lets providers serve it from their prompt cache.

Order: persona, character, learned personality, communication style, user information, rules and
tool notes, "What You Know", memory usage; separator; fixed sections; documentation of the
registered tools; the tool list; integrity guides (fenced); a closing reminder of the only tools.

Persona fallback chain: the tenant's agent profile in the database → SOUL.md / AGENTS.md /
MEMORY.md in the context directory → a minimal identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from psycopg.rows import DictRow

from shared.context.data_fence import fence
from shared.context.fences import FenceSet, render_guides, strip_markers
from shared.context.profiles import agent_persona_query, user_profile_query
from shared.context.prompt_text import (
    MEMORY_USAGE,
    MINIMAL_IDENTITY,
    SEPARATOR,
    STATIC_SECTIONS,
    TOOL_DOCS,
)
from shared.infra.db import Conn, Query, first
from shared.llm.types import ToolSpec
from shared.memory.memory_input import DIRECTIVE_KEY, DIRECTIVE_NAMESPACE
from shared.memory.rows import KnownMemory, MemoryEntry, MemoryLine, memory_source_sql

WHAT_YOU_KNOW_LIMIT = 50
PERSONALITY_LIMIT = 10
DEFAULT_AGENT_NAME = "Engram"
CONTEXT_FILES = ("SOUL.md", "AGENTS.md", "MEMORY.md")
_FILE_LIMIT = 20_000  # characters read from each context file


@dataclass(frozen=True)
class Section:
    name: str
    text: str


@dataclass(frozen=True)
class StaticPrompt:
    sections: tuple[Section, ...]
    source: str  # where the persona came from: "database", "files" or "minimal"

    @property
    def text(self) -> str:
        return "\n\n".join(section.text for section in self.sections)


@dataclass
class PromptInputs:
    agent_name: str
    persona: str
    source: str
    agent: dict[str, Any] | None = None
    directive: str | None = None
    user: dict[str, Any] | None = None
    memories: Sequence[MemoryEntry] = ()  # "What You Know": today's selection, or the session's epoch
    file_rules: str | None = None
    file_knowledge: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    fences: FenceSet | None = None


def _clean(text: str | None) -> str:
    """Stored text is data: it must not smuggle fence markers into the prompt."""
    return strip_markers(text or "").strip()


def read_context_files(directory: Path | None) -> dict[str, str]:
    if directory is None or not directory.is_dir():
        return {}
    found = {}
    for name in CONTEXT_FILES:
        path = directory / name
        if path.is_file():
            found[name] = path.read_text(encoding="utf-8", errors="replace")[:_FILE_LIMIT]
    return found


def what_you_know(conn: Conn, tenant_id: int, user_id: int) -> list[KnownMemory]:
    """Up to 50 tacit memories and facts about the user themselves (`entity/default` keys `user/…`: name,
    location, employer, allergies, as extraction stores them), at most 10 of them style observations, chosen
    by access_count.

    Chosen by use, but listed by namespace and key: an access-count change that does not change the
    selection must not reorder the list (that would break the prompt cache for nothing)."""
    return select_what_you_know(conn.execute(*what_you_know_query(tenant_id, user_id)).fetchall())


def what_you_know_query(tenant_id: int, user_id: int) -> Query:
    # Each memory with its source, as a search result has it, joined to the few rows kept.
    source_columns, source_joins = memory_source_sql("w")
    return (
        f"""SELECT w.*, {source_columns} FROM (
           (SELECT id, namespace, key, value, kind, access_count, true AS personality, valid_from, event_time,
                   source_session_id, source_message_ids FROM memories
            WHERE tenant_id = %(t)s AND user_id = %(u)s AND valid_until IS NULL
              AND (namespace = 'tacit/personality' OR namespace LIKE 'tacit/personality/%%')
              AND NOT (namespace = %(dns)s AND key = %(dkey)s)
            ORDER BY access_count DESC, id LIMIT %(plimit)s)
           UNION ALL
           (SELECT id, namespace, key, value, kind, access_count, false, valid_from, event_time,
                   source_session_id, source_message_ids FROM memories
            WHERE tenant_id = %(t)s AND user_id = %(u)s AND valid_until IS NULL
              AND (namespace = 'tacit' OR namespace LIKE 'tacit/%%'
                   OR (namespace = 'entity/default' AND key LIKE 'user/%%'))
              AND NOT (namespace = 'tacit/personality' OR namespace LIKE 'tacit/personality/%%')
            ORDER BY access_count DESC, id LIMIT %(limit)s)) w
           {source_joins}""",
        {
            "t": tenant_id,
            "u": user_id,
            "dns": DIRECTIVE_NAMESPACE,
            "dkey": DIRECTIVE_KEY,
            "plimit": PERSONALITY_LIMIT,
            "limit": WHAT_YOU_KNOW_LIMIT,
        },
    )


def select_what_you_know(rows: Sequence[DictRow]) -> list[KnownMemory]:
    """`what_you_know_query`'s rows, the few it lists, as records."""
    known = cast("Sequence[KnownMemory]", rows)
    # Most used first, as each branch of the query picked them: the rows come out of its source joins in no order.
    used = sorted(known, key=lambda r: (-r["access_count"], r["id"]))
    personality = [r for r in used if r["personality"]]
    others = [r for r in used if not r["personality"]][: WHAT_YOU_KNOW_LIMIT - len(personality)]
    return sorted(personality + others, key=lambda r: (r["namespace"], r["key"], r["id"]))


def _directive_query(tenant_id: int, user_id: int) -> Query:
    return (
        """SELECT value FROM memories WHERE tenant_id = %s AND user_id = %s AND namespace = %s AND key = %s
           AND valid_until IS NULL""",
        (tenant_id, user_id, DIRECTIVE_NAMESPACE, DIRECTIVE_KEY),
    )


def prompt_input_queries(tenant_id: int, user_id: int) -> dict[str, Query]:
    """The reads the static prompt is built from, to be sent together (`prompt_inputs` takes their rows)."""
    return {
        "agent": agent_persona_query(tenant_id),
        "directive": _directive_query(tenant_id, user_id),
        "user": user_profile_query(tenant_id, user_id),
        "what_you_know": what_you_know_query(tenant_id, user_id),
    }


def prompt_inputs(
    rows: Mapping[str, list[dict[str, Any]]],
    *,
    tools: tuple[ToolSpec, ...],
    fences: FenceSet | None,
    context_dir: Path | None,
) -> PromptInputs:
    """The static prompt's inputs from the rows of `prompt_input_queries` and the context files."""
    row = first(rows["agent"])
    agent = dict(row) if row is not None else None  # a copy: the preset's prompt is taken out of it
    preset = agent.pop("preset_prompt") if agent is not None else None
    files = read_context_files(context_dir)
    if agent is not None:
        name = _clean(agent["name"]) or DEFAULT_AGENT_NAME
        persona = _clean(agent["custom_personality"]) or _clean(preset)
        source = "database"
        persona = persona or MINIMAL_IDENTITY
    elif "SOUL.md" in files or "AGENTS.md" in files:
        name, source = DEFAULT_AGENT_NAME, "files"
        persona = _clean(files.get("SOUL.md")) or MINIMAL_IDENTITY
    else:
        name, persona, source = DEFAULT_AGENT_NAME, MINIMAL_IDENTITY, "minimal"
    return PromptInputs(
        agent_name=name,
        persona=persona,
        source=source,
        agent=agent,
        directive=first(rows["directive"], "value"),
        user=first(rows["user"]),
        memories=select_what_you_know(rows["what_you_know"]),
        file_rules=_clean(files.get("AGENTS.md")) if source == "files" else None,
        file_knowledge=_clean(files.get("MEMORY.md")) if files.get("MEMORY.md") else None,
        tools=tools,
        fences=fences,
    )


def _structured_markdown(value: Any, title: str) -> str | None:
    """{"sections": [{"title", "items": [{"text", "enabled"}]}]} → markdown with enabled items only."""
    if not isinstance(value, dict) or not isinstance(value.get("sections"), list):
        return None
    lines = [f"## {title}"]
    for section in value["sections"]:
        if not isinstance(section, dict):
            continue
        items = [
            _clean(str(i.get("text", "")))
            for i in section.get("items", [])
            if isinstance(i, dict) and i.get("enabled", True) and str(i.get("text", "")).strip()
        ]
        if items:
            lines.append(f"### {_clean(str(section.get('title', '')))}".rstrip())
            lines.extend(f"- {item}" for item in items)
    return "\n".join(lines) if len(lines) > 1 else None


def _rules_and_notes(inputs: PromptInputs) -> list[Section]:
    sections = []
    agent = inputs.agent or {}
    for field_name, markdown_name, title in (
        ("rules", "rules_markdown", "Rules"),
        ("tool_notes", "tool_notes_markdown", "Tool notes"),
    ):
        text = _structured_markdown(agent.get(field_name), title)
        if text is None and _clean(agent.get(markdown_name)):
            text = f"## {title}\n{_clean(agent.get(markdown_name))}"
        if text:
            sections.append(Section(field_name, text))
    if inputs.file_rules:
        sections.append(Section("rules", f"## Rules\n{inputs.file_rules}"))
    return sections


def _character(agent: dict[str, Any] | None) -> str | None:
    if not agent:
        return None
    parts = []
    if _clean(agent.get("creature")):
        parts.append(f"You are a {_clean(agent['creature'])}.")
    if _clean(agent.get("role")):
        parts.append(f"Your relationship to the user: {_clean(agent['role'])}.")
    if _clean(agent.get("vibe")):
        parts.append(f"Your vibe: {_clean(agent['vibe'])}.")
    if _clean(agent.get("emoji")):
        parts.append(f"Your emoji: {_clean(agent['emoji'])}.")
    return "## Character\n" + " ".join(parts) if parts else None


def _communication_style(agent: dict[str, Any] | None) -> str | None:
    if not agent:
        return None
    labels = (
        ("voice_style", "Voice"),
        ("formality", "Formality"),
        ("emoji_usage", "Emoji use"),
        ("response_length", "Response length"),
    )
    lines = [f"- {label}: {_clean(agent.get(key))}" for key, label in labels if _clean(agent.get(key))]
    return "## Communication style\n" + "\n".join(lines) if lines else None


def user_information_lines(user: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(field, "- Label: value") for each filled profile field, in prompt order."""
    if not user:
        return []
    labels = (
        ("display_name", "Name"),
        ("location", "Location"),
        ("timezone", "Time zone"),
        ("occupation", "Occupation"),
        ("interests", "Interests"),
        ("goals", "Goals"),
        ("context", "Context"),
        ("communication_style", "Prefers"),
    )
    lines = []
    for key, label in labels:
        value = user.get(key)
        if isinstance(value, list):
            value = ", ".join(_clean(str(v)) for v in value if str(v).strip())
        if value and _clean(str(value)):
            lines.append((key, f"- {label}: {_clean(str(value))}"))
    return lines


def _user_information(user: dict[str, Any] | None) -> str | None:
    lines = [line for _, line in user_information_lines(user)]
    return "## About the user\n" + fence("profile", lines) if lines else None


def memory_line(memory: MemoryLine) -> str:
    """A remembered item as the prompt lists it: `- [namespace] key: value`."""
    return f"- [{memory['namespace']}] {memory['key']}: {_clean(memory['value'])}"


def _what_you_know(inputs: PromptInputs) -> str | None:
    lines = [memory_line(m) for m in inputs.memories]
    if inputs.file_knowledge:
        lines.append(inputs.file_knowledge)
    return "## What You Know\n" + fence("memory", lines) if lines else None


def build_static_prompt(inputs: PromptInputs) -> StaticPrompt:
    name = inputs.agent_name
    candidates: list[tuple[str, str | None]] = [
        ("persona", inputs.persona),
        ("character", _character(inputs.agent)),
        (
            "learned_personality",
            "## Personality (Learned)\n" + fence("personality", [_clean(inputs.directive)])
            if inputs.directive
            else None,
        ),
        ("communication_style", _communication_style(inputs.agent)),
        ("user", _user_information(inputs.user)),
    ]
    sections = [Section(n, t) for n, t in candidates if t]
    sections.extend(_rules_and_notes(inputs))
    knowledge = _what_you_know(inputs)
    if knowledge:
        sections.append(Section("what_you_know", knowledge))
    sections.append(Section("memory_usage", MEMORY_USAGE))
    sections.append(Section("separator", SEPARATOR))
    sections.extend(Section(f"guide_{i}", text) for i, text in enumerate(STATIC_SECTIONS, start=1))
    tool_names = [tool.name for tool in inputs.tools]
    docs = [f"- {TOOL_DOCS[n]}" for n in tool_names if n in TOOL_DOCS]
    if docs:
        sections.append(Section("tool_docs", "## Tool notes\n" + "\n".join(docs)))
    if tool_names:
        sections.append(Section("tool_list", f"Registered tools: {', '.join(tool_names)}. These are your only tools."))
    if inputs.fences is not None:
        sections.append(Section("system_guides", render_guides(inputs.fences, name)))
    if tool_names:
        sections.append(Section("reminder", f"Reminder: you are {name}; your only tools are {', '.join(tool_names)}."))
    rendered = tuple(
        Section(s.name, s.text if s.name == "system_guides" else s.text.replace("{name}", name)) for s in sections
    )
    return StaticPrompt(rendered, inputs.source)
