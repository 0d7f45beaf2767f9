"""Texts that exercise a local embedder's edges: short, empty, non-ASCII, and far past 256 tokens."""

from __future__ import annotations

EDGE_TEXTS = [
    "I love dogs",
    "Caroline: I went to the LGBTQ support group yesterday [image: a poster with a rainbow flag]",
    "quarterly tax filing",
    "",
    "Melanie: pottery class on Saturdays, then a run by the lake " * 40,  # far past 256 tokens: truncated
    "naïve café — 東京 🙂",
    "ok",
]
