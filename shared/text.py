"""Small text helpers shared across the domain."""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (~4 characters per token for English prose)."""
    return (len(text) + 3) // 4 if text else 0


def escape_like(text: str) -> str:
    """`text` as a literal inside a LIKE/ILIKE pattern (backslash is Postgres's default escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
