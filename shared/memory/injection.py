"""Prompt-injection detection for text that is about to become a memory.

Memories end up in later prompts, so text that tries to instruct the model must not be stored:
`injection_category(text)` names the kind of injection found, or returns None. The patterns look
for *directives aimed at the model* rather than for words: "ignore" needs an object that is the
model's instructions ("ignore your previous instructions", not "I ignore my boss's emails"), "system"
needs the shape of a role label or a tag ("SYSTEM: you ...", "<|im_start|>system", not "my system
administrator job"), "DAN" needs a persona context, and so on.

Obfuscation is undone before scanning: each text is scanned in several views
(shared/memory/text_views.py), and a pattern matches if it matches any of them.

A hit found only in a derived view is reported with " (obfuscated)" after its category.

Each pattern runs over at most a few kilobytes (memory values are capped) in a handful of views;
every quantifier is bounded and no pattern starts with a whitespace quantifier, so scanning stays
linear in practice.
"""

from __future__ import annotations

from shared.memory.injection_patterns import PATTERNS, SQUASHED_ANCHORS, SQUASHED_PATTERNS
from shared.memory.text_views import squashed as squashed_letters
from shared.memory.text_views import views as text_views


def injection_category(text: str) -> str | None:
    """The category of the first prompt-injection pattern found in `text`, or None.

    Patterns are tried in order over every view of the text (see the module docstring); a category
    found only in a derived view gets " (obfuscated)" appended.
    """
    views = [(view, view.lower(), derived) for view, derived in text_views(text)]
    for category, anchors, pattern in PATTERNS:
        for view, lowered, derived in views:
            if any(anchor in lowered for anchor in anchors) and pattern.search(view):
                return f"{category} (obfuscated)" if derived else category
    squashed = squashed_letters(text)
    if any(anchor in squashed for anchor in SQUASHED_ANCHORS):
        for category, pattern in SQUASHED_PATTERNS:
            if pattern.search(squashed):
                return f"{category} (obfuscated)"
    return None
