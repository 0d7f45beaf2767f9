"""Before-send pruning of the message list: shrink old tool results, never drop messages.

Three stages run in order, each only when the conversation is still over its line:

1. micro-compact (over `micro_compact_threshold_tokens`, default 0.25 x budget): old results of bulky
   tools (`prunable_tools`: file reads, shell output, web pages) become a one-line marker. It is applied
   only if it saves more than 20,000 tokens in total; smaller savings are not worth changing earlier
   messages, which would break the provider's prompt cache for everything after them.
2. soft trim (over 0.3 x budget): unprotected tool results longer than 3,000 chars keep their first and
   last 1,500 chars (the start and the end of an output are usually what matters: headers, errors,
   totals).
3. hard clear (still over 0.5 x budget): unprotected tool results are replaced by a short marker.

Invariants: the output has the same length and roles as the input; user messages are never changed;
assistant messages keep their tool calls (both providers reject a tool result whose call is missing);
the most recent work is protected (the last 3 assistant messages and the tool results answering their
calls, plus for micro-compact the 3 most recent tool results); a replacement is only made if it makes
the message smaller, so pruning never adds tokens. Running it again on its own output changes nothing
while the totals stay under the lines that triggered it, and a soft-trimmed result is never trimmed twice.

The default micro-compact line sits just under the soft-trim line so that, as a conversation grows, the
cheap and targeted stage gets the first chance before every tool result is trimmed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from shared.context.tokens import TokenCounter
from shared.llm.types import ChatMessage


@dataclass(frozen=True)
class PruneSettings:
    micro_compact_ratio: float = 0.25  # of the budget, when no explicit threshold is given
    micro_compact_min_saving_tokens: int = 20_000  # applied only when the saving is strictly greater
    protect_recent_tool_results: int = 3  # for micro-compact
    protect_recent_assistant_messages: int = 3
    soft_trim_ratio: float = 0.3
    hard_clear_ratio: float = 0.5
    soft_trim_min_chars: int = 3_000  # results longer than this are trimmed
    head_chars: int = 1_500
    tail_chars: int = 1_500


DEFAULT_SETTINGS: Final = PruneSettings()

CLEARED_MARKER: Final = "[old tool result cleared]"
_SOFT_TRIM_MARKER = re.compile(r"\n…\[trimmed \d+ chars\]…\n")


def micro_compact_marker(tool_name: str | None) -> str:
    return f"[trimmed: {tool_name or 'tool'} result]"


def soft_trimmed(content: str, head_chars: int, tail_chars: int) -> str:
    removed = len(content) - head_chars - tail_chars
    return f"{content[:head_chars]}\n…[trimmed {removed} chars]…\n{content[len(content) - tail_chars :]}"


def _is_soft_trimmed(content: str, head_chars: int, tail_chars: int) -> bool:
    match = _SOFT_TRIM_MARKER.match(content, head_chars)
    return match is not None and len(content) == match.end() + tail_chars


@dataclass
class PruneReport:
    stages: list[str] = field(default_factory=list)  # names of the stages that changed something
    tokens_before: int = 0
    tokens_after: int = 0
    budget_tokens: int = 0
    micro_compacted: list[int] = field(default_factory=list)  # indices whose content became a marker
    trimmed: list[int] = field(default_factory=list)  # indices soft-trimmed to head + tail
    cleared: list[int] = field(default_factory=list)  # indices hard-cleared
    summary: str = ""


def _protected_indices(messages: Sequence[ChatMessage], recent_assistants: int) -> set[int]:
    """Indices of the last N assistant messages and of every tool result that answers one of their calls.

    Tool results are matched by `tool_call_id`; a tool message after the earliest protected assistant
    message is protected too, so a result with a missing or odd id in the recent tail is still safe.
    """
    assistant_indices = [i for i, m in enumerate(messages) if m.role == "assistant"]
    recent = assistant_indices[-recent_assistants:] if recent_assistants > 0 else []
    protected = set(recent)
    if not recent:
        return protected
    call_ids = {call.id for i in recent for call in messages[i].tool_calls}
    for i, message in enumerate(messages):
        if message.role == "tool" and (message.tool_call_id in call_ids or i > recent[0]):
            protected.add(i)
    return protected


def _total(messages: Sequence[ChatMessage], counter: TokenCounter) -> int:
    return counter.count_messages(messages)


def prune_messages(
    messages: Sequence[ChatMessage],
    *,
    budget_tokens: int,
    counter: TokenCounter,
    prunable_tools: frozenset[str] = frozenset(),
    micro_compact_threshold_tokens: int | None = None,
    settings: PruneSettings = DEFAULT_SETTINGS,
) -> tuple[list[ChatMessage], PruneReport]:
    """Return a pruned copy of `messages` and a report of what was done; `messages` is not modified."""
    if budget_tokens <= 0:
        raise ValueError("budget_tokens must be positive")
    result = list(messages)
    report = PruneReport(budget_tokens=budget_tokens)
    report.tokens_before = total = _total(result, counter)
    protected = _protected_indices(result, settings.protect_recent_assistant_messages)
    tool_indices = [i for i, m in enumerate(result) if m.role == "tool"]

    def shrink(index: int, new_content: str) -> int:
        """Replace a tool result's content if that makes it smaller; return the tokens saved (0 if not)."""
        old = result[index]
        saved = counter.count(old.content) - counter.count(new_content)
        if saved <= 0:
            return 0
        result[index] = replace(old, content=new_content)
        return saved

    # Stage 1: micro-compact.
    threshold = (
        micro_compact_threshold_tokens
        if micro_compact_threshold_tokens is not None
        else int(settings.micro_compact_ratio * budget_tokens)
    )
    if prunable_tools and total > threshold:
        keep = settings.protect_recent_tool_results
        recent_tools = set(tool_indices[-keep:]) if keep > 0 else set()
        candidates: list[tuple[int, str]] = []
        saving = 0
        for i in tool_indices:
            message = result[i]
            if i in protected or i in recent_tools or message.tool_name not in prunable_tools:
                continue
            marker = micro_compact_marker(message.tool_name)
            gain = counter.count(message.content) - counter.count(marker)
            if gain > 0:
                candidates.append((i, marker))
                saving += gain
        # All or nothing: a small saving does not pay for invalidating the cached prefix.
        if saving > settings.micro_compact_min_saving_tokens:
            for i, marker in candidates:
                total -= shrink(i, marker)
                report.micro_compacted.append(i)
            report.stages.append("micro_compact")

    # Stage 2: soft trim.
    if total > settings.soft_trim_ratio * budget_tokens:
        for i in tool_indices:
            content = result[i].content
            if i in protected or len(content) <= settings.soft_trim_min_chars:
                continue
            if _is_soft_trimmed(content, settings.head_chars, settings.tail_chars):
                continue
            saved = shrink(i, soft_trimmed(content, settings.head_chars, settings.tail_chars))
            if saved:
                total -= saved
                report.trimmed.append(i)
        if report.trimmed:
            report.stages.append("soft_trim")

    # Stage 3: hard clear.
    if total > settings.hard_clear_ratio * budget_tokens:
        for i in tool_indices:
            content = result[i].content
            # A micro-compact marker already says which tool ran and is about as short as ours: keep it.
            if i in protected or content in (CLEARED_MARKER, micro_compact_marker(result[i].tool_name)):
                continue
            saved = shrink(i, CLEARED_MARKER)
            if saved:
                total -= saved
                report.cleared.append(i)
        if report.cleared:
            report.stages.append("hard_clear")

    # Recount rather than trust the running total: a counter's per-message overhead is not additive
    # in general (it is for ours, but the protocol does not promise it).
    report.tokens_after = _total(result, counter) if report.stages else report.tokens_before
    report.summary = _summary(report)
    return result, report


def _summary(report: PruneReport) -> str:
    head = f"{report.tokens_before:,} tokens against a budget of {report.budget_tokens:,}"
    if not report.stages:
        return f"{head}: nothing pruned"
    parts = []
    if report.micro_compacted:
        parts.append(f"micro-compacted {len(report.micro_compacted)} bulky tool result(s)")
    if report.trimmed:
        parts.append(f"trimmed {len(report.trimmed)} long tool result(s) to head and tail")
    if report.cleared:
        parts.append(f"cleared {len(report.cleared)} old tool result(s)")
    return f"{head}: {'; '.join(parts)}; now {report.tokens_after:,} tokens"
