"""One form for text that looks the same (shared/text.py `clean_text`), which every door applies."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.text import INVISIBLE, clean_text

# Letters with accents that have precomposed forms, combining marks, emoji with joiners, and what hides.
pieces = st.sampled_from(
    ["a", "e", "café", "e\u0301", "n\u0303", "Å", "A\u030a", "🎻", "👨\u200d👩\u200d👧", " ", "\n", "日本", "ß"]
)
hidden = st.sampled_from(["\u200b", "\u2060", "\ufeff", "\u202e", "\u2066", "\U000e0041", "\U000e007f", "\u200e"])
texts = st.lists(st.one_of(pieces, hidden, st.text(max_size=5)), max_size=20).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_clean_text_is_one_visible_form(text: str) -> None:
    cleaned = clean_text(text)
    assert clean_text(cleaned) == cleaned  # a fixed point: cleaning twice changes nothing
    assert unicodedata.is_normalized("NFC", cleaned)
    assert not any(ord(ch) in INVISIBLE for ch in cleaned)
    # Text that looks the same is the same: decomposed or composed, with or without what renders as nothing.
    assert clean_text(unicodedata.normalize("NFD", text)) == clean_text(unicodedata.normalize("NFC", text))
    assert clean_text("\u200b".join(text) + "\U000e0041") == clean_text(text)


def test_what_renders_stays() -> None:
    assert clean_text("plain ASCII\tstays") == "plain ASCII\tstays"
    assert clean_text("cafe\u0301") == "café"
    family = "👨\u200d👩\u200d👧"  # joiners make one emoji of three: they are not hidden text
    assert clean_text(family) == family
    assert clean_text("pay\U000e0041\U000e0042 now\u200b") == "pay now"
