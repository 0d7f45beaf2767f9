"""What the model sees each iteration: static prompt + pruned history + the dynamic tail (dynamic context
and steering), in that order, so everything before the tail is a cacheable, append-only prefix.

`prepare_turn` runs once per turn (database reads: profiles, memories, relevant memories, steering
facts); `compile_request` runs before every model call and is pure. The same code serves the
context inspection endpoint, so what it shows is what the model would get.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.access.quotas import budget_query, used_share
from shared.context.data_fence import fence_problems
from shared.context.dynamic import DynamicInputs, build_dynamic_suffix, describe_time, reflection_query
from shared.context.epoch import KnowledgeSplit, digest, epoch_query, split_knowledge
from shared.context.fences import FenceSet, verify
from shared.context.pruning import PruneReport, prune_messages
from shared.context.static_prompt import (
    Section,
    StaticPrompt,
    build_static_prompt,
    prompt_input_queries,
    prompt_inputs,
)
from shared.context.steering import SteeringMessage, SteeringState, generate_steering
from shared.context.tail import render_tail
from shared.context.tokens import TokenCounter, counter_for
from shared.infra.db import Conn, Query, fetch_together, first
from shared.llm.types import ChatMessage, ToolSpec

# Tools whose old results may be trimmed to a marker (bulky, re-fetchable output).
PRUNABLE_TOOLS = frozenset({"read_document", "search_conversation", "memory_search", "memory_list"})
MEMORY_TOOLS = frozenset(
    {
        "memory_store",
        "memory_recall",
        "memory_search",
        "memory_list",
        "memory_delete",
        "memory_correct",
        "memory_confirm",
        "memory_stats",
        "entity_info",
        "search_conversation",
    }
)
_CONTEXT_WINDOWS = (
    ("claude", 200_000),
    ("gpt-4.1", 1_000_000),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("offline", 32_000),
)
DEFAULT_CONTEXT_WINDOW = 32_000


def context_window(model: str, override: int | None = None) -> int:
    if override:
        return override
    lowered = model.lower()
    return next((size for prefix, size in _CONTEXT_WINDOWS if prefix in lowered), DEFAULT_CONTEXT_WINDOW)


class IntegrityViolation(RuntimeError):
    """The static prompt's fenced guides are missing or altered: the request is not sent."""


@dataclass
class TurnContext:
    static: StaticPrompt
    fences: FenceSet
    agent_name: str
    dynamic: DynamicInputs
    counter: TokenCounter
    budget_tokens: int
    steering: SteeringState
    knowledge: KnowledgeSplit | None = None  # how "What You Know" was split for this turn (epoch.py)


@dataclass
class CompiledRequest:
    system_static: str
    system_dynamic: str  # the dynamic sections' text (the tail adds steering and the caller's instructions)
    dynamic_sections: list[Section]
    messages: list[ChatMessage]  # the pruned history, exactly as stored: no steering, nothing per-request
    steering: list[SteeringMessage]
    pruning: PruneReport
    problems: list[str]

    def tail(self, *extra: str) -> str:
        """The dynamic tail sent after the history: dynamic sections, then `extra` (an OpenAI-compatible
        caller's own instructions), then the steering notes that fired."""
        return render_tail([self.system_dynamic, *extra, *(s.text for s in self.steering)])


def _steering_query(session_id: int | None, turn_id: int | None) -> Query:
    upto = "AND (turn_id IS NULL OR turn_id <= %(turn)s)" if turn_id is not None else ""
    return (
        f"""SELECT role, content, tool_calls, created_at FROM session_messages
            WHERE session_id = %(s)s {upto} ORDER BY turn_id NULLS FIRST, id""",
        {"s": session_id, "turn": turn_id},
    )


def context_queries(*, tenant_id: int, user_id: int, session_id: int | None, turn_id: int | None) -> dict[str, Query]:
    """The reads `prepare_turn` builds a turn's context from. They are independent of each other: a caller
    with reads of its own sends them all together and passes the rows (`reads`)."""
    queries = {
        **prompt_input_queries(tenant_id, user_id),
        "reflection": reflection_query(tenant_id, user_id),
        "steering": _steering_query(session_id, turn_id),
        "budget": budget_query(tenant_id),
    }
    if session_id:
        queries["epoch"] = epoch_query(session_id)
    return queries


def _steering_facts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts the steering generators need, from the session's whole history (compacted included)."""
    assistant_turns = sum(1 for r in rows if r["role"] == "assistant")
    since_tool = since_memory = 0
    tool_seen = memory_seen = False
    for row in reversed(rows):
        names = {c.get("name") for c in row["tool_calls"] or []}
        if row["role"] == "assistant" and names:
            tool_seen = True
            memory_seen = memory_seen or bool(names & MEMORY_TOOLS)
        if row["role"] == "user":
            since_tool += 0 if tool_seen else 1
            since_memory += 0 if memory_seen else 1
    users = [r for r in rows if r["role"] == "user"]
    gap = None
    if len(rows) >= 2 and users:
        current = users[-1]
        earlier = [r for r in rows if r["created_at"] < current["created_at"]]
        if earlier:
            gap = (current["created_at"] - earlier[-1]["created_at"]).total_seconds() / 60
    return {
        "assistant_turns": assistant_turns,
        "user_turns_since_tool_use": since_tool,
        "user_turns_since_memory_tool": since_memory,
        "recent_user_messages": tuple(r["content"] for r in users[-10:]),
        "minutes_since_previous_message": gap,
    }


def prepare_turn(
    conn: Conn,
    *,
    session: Mapping[str, Any],
    user_timezone: str | None,
    turn_id: int | None,
    tools: tuple[ToolSpec, ...],
    provider: str,
    model: str,
    now: datetime,
    context_dir: Path | None,
    relevant: Sequence[Mapping[str, Any]],
    context_window_override: int | None = None,
    max_output_tokens: int = 1024,
    epoch_max_delta: int = 10,
    persist_epoch: bool = False,
    reads: Mapping[str, list[dict[str, Any]]] | None = None,
) -> TurnContext:
    """Everything a turn's model calls share. With `persist_epoch` (the turn path) a rebuilt "What You
    Know" epoch is stored; without it (inspection, tests) nothing is written.

    Its reads (`context_queries`) go to Postgres together, in one round trip, unless the caller already
    sent them with its own and passes their rows as `reads`. `session`: its row (a SessionRow), or a stand-in with
    the columns the context reads (the inspection of a session nobody has written to yet). `relevant`: MemoryLines
    (relevant_memories), or dicts with their keys."""
    tenant_id, user_id = session["tenant_id"], session["user_id"]
    fences = FenceSet.for_session(str(session["fence_seed"]).encode(), session["id"])
    rows = reads
    if rows is None:
        rows = fetch_together(
            conn, context_queries(tenant_id=tenant_id, user_id=user_id, session_id=session["id"], turn_id=turn_id)
        )
    inputs = prompt_inputs(rows, tools=tools, fences=fences, context_dir=context_dir)
    base = digest(build_static_prompt(replace(inputs, memories=[])).text)
    knowledge = split_knowledge(
        conn,
        session,
        inputs.memories,
        epoch=first(rows.get("epoch", [])),
        base_digest=base,
        max_delta=epoch_max_delta,
        persist=persist_epoch,
    )
    static = build_static_prompt(replace(inputs, memories=knowledge.frozen))
    timezone = (inputs.user or {}).get("timezone") or user_timezone or "UTC"
    dynamic = DynamicInputs(
        now=now,
        timezone=timezone,
        model=model,
        provider=provider,
        channel=session.get("channel") or "api",
        active_task=session.get("active_task"),
        summary=session.get("summary"),
        relevant=tuple(relevant),
        reflection=first(rows["reflection"], "value"),
        since_epoch=tuple(knowledge.since),
    )
    facts = _steering_facts(rows["steering"])
    steering = SteeringState(
        agent_name=inputs.agent_name,
        channel=dynamic.channel,
        active_task=dynamic.active_task,
        just_compacted=bool(session.get("recovery_pending")),
        budget_used_ratio=used_share(first(rows["budget"])),
        budget_warned_this_session=session.get("budget_warned_at") is not None,
        **facts,
    )
    budget = context_window(model, context_window_override) - max_output_tokens
    counter = counter_for(provider, model)
    return TurnContext(static, fences, inputs.agent_name, dynamic, counter, budget, steering, knowledge)


def compile_request(
    tc: TurnContext,
    messages: list[ChatMessage],
    *,
    iteration: int,
    now: datetime,
    tools_used_this_turn: bool = False,
    last_assistant_text: str = "",
) -> CompiledRequest:
    dynamic_sections = build_dynamic_suffix(replace(tc.dynamic, now=now))
    pruned, report = prune_messages(
        messages, budget_tokens=tc.budget_tokens, counter=tc.counter, prunable_tools=PRUNABLE_TOOLS
    )
    state = replace(
        tc.steering,
        iteration=iteration,
        tools_used_this_turn=tools_used_this_turn,
        last_assistant_text=last_assistant_text,
        local_time_text=describe_time(now, tc.dynamic.timezone),
    )
    steering = generate_steering(state)
    static_text = tc.static.text
    dynamic_text = "\n\n".join(section.text for section in dynamic_sections)
    return CompiledRequest(
        system_static=static_text,
        system_dynamic=dynamic_text,
        dynamic_sections=dynamic_sections,
        messages=pruned,
        steering=steering,
        pruning=report,
        # Remembered text is fenced as data; a tag outside a block means something escaped its fence.
        problems=verify(static_text, tc.fences, tc.agent_name) + fence_problems(static_text + "\n" + dynamic_text),
    )


def describe(tc: TurnContext, compiled: CompiledRequest) -> dict[str, Any]:
    """The inspection view: every section with its token count, steering and why, pruning."""
    count = tc.counter.count
    static = [{"name": s.name, "tokens": count(s.text), "text": s.text} for s in tc.static.sections]
    dynamic = [{"name": s.name, "tokens": count(s.text), "text": s.text} for s in compiled.dynamic_sections]
    message_tokens = tc.counter.count_messages(compiled.messages)
    return {
        "persona_source": tc.static.source,
        "tokenizer": tc.counter.name,
        "static": static,
        "dynamic": dynamic,
        "steering": [
            {"name": s.name, "reason": s.reason, "position": s.position, "text": s.text} for s in compiled.steering
        ],
        "pruning": {
            "stages": compiled.pruning.stages,
            "tokens_before": compiled.pruning.tokens_before,
            "tokens_after": compiled.pruning.tokens_after,
            "budget_tokens": compiled.pruning.budget_tokens,
            "summary": compiled.pruning.summary,
        },
        "messages": len(compiled.messages),
        "what_you_know_epoch": {
            "rebuilt": tc.knowledge.rebuilt if tc.knowledge else None,
            "frozen": len(tc.knowledge.frozen) if tc.knowledge else None,
            "since": len(tc.knowledge.since) if tc.knowledge else 0,
        },
        "integrity_problems": compiled.problems,
        "tokens": {
            "static": sum(s["tokens"] for s in static),
            "dynamic": sum(s["tokens"] for s in dynamic),
            "messages": message_tokens,
        },
    }
