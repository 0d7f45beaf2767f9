"""The dynamic tail: everything that changes from request to request, sent after the conversation.

A prompt cache serves the longest unchanged prefix, so the request is ordered by how often each part
changes: tools → static system prompt → conversation history (append-only) → this tail. The tail is
rebuilt for every model call and never stored, so the history the next call sends is byte-identical
to what this call sent before its tail (shared/llm/*_layout.py put it after the last message).

It is wrapped in one tag so the model can tell it from what the user wrote, and so tools reading a
request (the fake model server, benchmarks) can find it.
"""

from __future__ import annotations

from collections.abc import Iterable

OPEN = "<turn-context>"
CLOSE = "</turn-context>"
PREFACE = (
    "Context for this reply, supplied by the system and rebuilt for every request (not written by the user; "
    "do not quote it as theirs):"
)


def render_tail(parts: Iterable[str]) -> str:
    """The tail around the given non-empty parts (dynamic sections, steering notes), or "" if none."""
    body = [part.strip() for part in parts if part and part.strip()]
    if not body:
        return ""
    return "\n\n".join([OPEN, PREFACE, *body, CLOSE])
