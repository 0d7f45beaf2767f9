"""Compaction for the offline provider: an extractive summary with the same five headings a model writes,
and the active task, from the user's own sentences (no model)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.memory.keys import injection_category
from shared.pipeline.compaction import (
    COMPRESSED_ITEM_CHARS,
    MAX_TASK_CHARS,
    OFFLINE_SUMMARY_CHARS,
    SUMMARY_HEADINGS,
    render_sections,
)
from shared.pipeline.extraction import TranscriptMessage, is_conversational, is_steering, split_sentences, truncate

_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_DECISION = re.compile(
    r"^(?:(?:so|ok|okay|alright|then|fine)[,\s]+)?(?:"
    r"(?:i|we)(?:'ve| have)? (?:finally |just )?decided\b|"
    r"(?:i|we) (?:chose|picked|settled on|went with)\b|"
    r"(?:i'll|i will|we'll|we will|i'm going to|we're going to) (?:go with|use|stick with|switch to|pick|choose)\b|"
    r"(?:we'll|we will|let's|let us) (?!see\b|talk\b|think\b|chat\b|discuss\b|look\b|check\b|say\b|not\b|get\b|"
    r"continue\b|begin\b|start\b|try\b)\w+"
    r")",
    re.IGNORECASE,
)
_ACTION = re.compile(
    r"\b(?:(?:i|we) (?:really )?(?:need|have|must|should|got) to|remind me|to-?do|don't forget|do not forget)\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"^(?:(?:also|and|btw|actually)[,\s]+)?"
    r"(?:i (?:really |much |also |generally )?(?:prefer|like|love|hate|dislike|enjoy)|i (?:don't|do not) like|"
    r"i'd rather|(?:please )?always|please never|from now on|going forward)\b",
    re.IGNORECASE,
)
_TASK = re.compile(
    r"^(?:(?:ok|okay|so|now|next|alright|hey|hi)[,\s]+)*(?:please\s+)?(?:"
    r"(?:can|could|would|will) you (?:please )?|"
    r"i (?:need|want|would like|'d like)(?: you)? to |"
    r"help me (?:to )?|"
    r"let's "
    r")?(?P<verb>write|create|build|make|fix|add|implement|refactor|debug|update|change|draft|review|summari[sz]e|"
    r"translate|find|generate|set up|setup|plan|design|compare|convert|rewrite|edit|test|deploy|migrate|analy[sz]e|"
    r"calculate|book|schedule|send|prepare|organi[sz]e|outline|compose|research|install|configure|remove|delete|"
    r"rename|optimi[sz]e|document|investigate|finish|continue|help|explain|list|check)\b",
    re.IGNORECASE,
)
_TASK_NEED = re.compile(r"^(?:(?:ok|okay|so|now|next|alright)[,\s]+)*i (?:need|want|would like|'d like) to \w+", re.I)


def _clean_sentences(content: str) -> list[str]:
    text = _CODE_FENCE.sub("\n", content).replace("’", "'")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(">")]
    return [s for s in split_sentences("\n".join(lines)) if injection_category(s) is None]


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t\"'”’)").endswith("?")


def offline_summary(messages: Sequence[TranscriptMessage]) -> str:
    """An extractive summary with the five headings (≤ 2,000 characters), for the offline provider.

    From user sentences (assistant text is only used to tell whether a question was answered):
    decisions = "I/we decided …", "we'll/let's <verb> …", "I'll go with …"; action items = "I need
    to …", "remind me …", "todo …"; preferences = "I prefer/like/hate …", "always/from now on …";
    open questions = user questions with no assistant reply after them; key insights = from each
    of the three longest user messages, its first statement (not a question) of 4+ words not already listed. Each
    section keeps its first five sentences (≤ 160 chars each); sections are trimmed from their
    longest tail until it fits.
    """
    conversation = [m for m in messages if is_conversational(m)]
    last_reply = max((i for i, m in enumerate(conversation) if m.role == "assistant"), default=-1)
    sections: dict[str, list[str]] = {heading: [] for heading in SUMMARY_HEADINGS}

    def add(heading: str, sentence: str) -> None:
        item = truncate(" ".join(sentence.split()), COMPRESSED_ITEM_CHARS)
        if item and item not in sections[heading] and len(sections[heading]) < 5:
            sections[heading].append(item)

    user_messages = [(i, m) for i, m in enumerate(conversation) if m.role == "user"]
    for index, message in user_messages:
        for sentence in _clean_sentences(message.content):
            question = _is_question(sentence)
            if question and index > last_reply:
                add("Open questions", sentence)
            if _ACTION.search(sentence) and (not question or "remind me" in sentence.lower()):
                add("Action items", sentence)
            elif not question and _DECISION.match(sentence):
                add("Decisions", sentence)
            elif not question and _PREFERENCE.match(sentence):
                add("Preferences", sentence)
    used = {item for items in sections.values() for item in items}
    longest = sorted(user_messages, key=lambda pair: (-len(pair[1].content), pair[0]))[:3]
    for _, message in sorted(longest, key=lambda pair: pair[0]):
        # The first sentence that says something (4+ words) and is not already listed elsewhere.
        for sentence in _clean_sentences(message.content):
            item = truncate(" ".join(sentence.split()), COMPRESSED_ITEM_CHARS)
            if len(sentence.split()) >= 4 and item not in used and not _is_question(sentence):
                add("Key insights", sentence)
                break
    return _fit(sections, OFFLINE_SUMMARY_CHARS)


def _fit(sections: dict[str, list[str]], limit: int) -> str:
    text = render_sections(sections)
    while len(text) > limit and any(sections.values()):
        fullest = max(SUMMARY_HEADINGS, key=lambda h: (len(sections[h]), sum(map(len, sections[h]))))
        sections[fullest].pop()
        text = render_sections(sections)
    return text


def offline_active_task(messages: Sequence[TranscriptMessage]) -> str | None:
    """The latest user request that looks like a task, one line (≤ 300 chars), or None.

    A task is an imperative ("Write a cover letter…", "please fix…"), a request ("Can you
    draft…?") or a stated need ("I need to…", "I want to…"). User messages are scanned newest
    first; within a message the last matching sentence wins.
    """
    for message in reversed(messages):
        if message.role != "user" or is_steering(message.content):
            continue
        for sentence in reversed(_clean_sentences(message.content)):
            if _TASK.match(sentence) or _TASK_NEED.match(sentence):
                return truncate(" ".join(sentence.split()), MAX_TASK_CHARS)
    return None
