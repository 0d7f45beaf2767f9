"""The prompt-cache rules of the fake model server (ops/fake_llm.py), explicit and unit-tested
(tests/unit/test_fake_cache_rules.py), so that the context benchmark cannot flatter engram's layout.

Anthropic (what engram's default provider is billed by):
1. Prefix match per breakpoint. The prompt is a sequence of blocks in the order tools → system →
   messages; a `cache_control` marker on a block asks for the prefix ending there to be cached. The
   marker itself is not part of the cached content (moving it does not change the prefix).
2. Lookback. A request reads the longest live cache entry found at one of its breakpoints or at most
   `LOOKBACK_BLOCKS` (20) blocks before one; an entry further back is not found, even though it is a
   prefix of the request.
3. Minimum cacheable length per model family. A breakpoint whose prefix is shorter than the model's
   minimum is neither written nor read (`min_cacheable_tokens`).
4. TTL. An entry lives `TTL_SECONDS` (5 minutes) after it was last written or read.
5. At most `MAX_BREAKPOINTS` (4) markers per request; more is a 400 error, as the API answers.
Billing: tokens up to the longest entry read are `cache_read`; the rest up to the last (cacheable)
breakpoint are `cache_creation` (written, and then live for every cacheable breakpoint); the
remainder is uncached input.

OpenAI caches automatically: the longest live prefix of whole messages (tools first) that an earlier
request sent, if it is at least `openai_min_tokens` (1,024) long, is `cached_tokens`; the same TTL.

Token counts are estimates (about four characters per token), the same for every side of a comparison.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

TTL_SECONDS = 300.0
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
OPENAI_MIN_TOKENS = 1024

# Minimum cacheable prompt length by model family, most specific first (Anthropic's documentation).
ANTHROPIC_MIN_TOKENS: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
    ("claude-haiku", 2048),
    ("claude", 1024),  # Sonnet 3.7 / 4 / 4.5 / 4.6, Opus 3 / 4 / 4.1
)


class CacheRuleError(ValueError):
    """A request the real API refuses (too many breakpoints); the fake answers it with a 400."""


@dataclass(frozen=True)
class PromptUsage:
    input_tokens: int  # uncached
    cache_read_tokens: int
    cache_write_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


def estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


def min_cacheable_tokens(model: str) -> int:
    """The family's minimum; 0 for a model name no family matches (tests' "fake-model")."""
    lowered = model.lower()
    return next((tokens for prefix, tokens in ANTHROPIC_MIN_TOKENS if prefix in lowered), 0)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def content_text(content: Any) -> str:
    """The text of a message's content in either wire format (tool results included)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            texts.append(content_text(block.get("content")))
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "".join(texts)


def part_tokens(part: Any) -> int:
    if isinstance(part, str):
        return estimate_tokens(part)
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return estimate_tokens(part["text"])
    if isinstance(part, dict) and part.get("type") == "tool_result":
        return estimate_tokens(content_text(part.get("content")))
    return estimate_tokens(canonical(part))


def _without_cache_control(part: Any) -> Any:
    # The marker decides where a cache entry ends, not what it contains.
    if isinstance(part, dict):
        return {key: value for key, value in part.items() if key != "cache_control"}
    return part


def prefix_digests(parts: list[Any]) -> Iterator[tuple[str, int]]:
    """(hash of parts[:i+1], tokens of parts[:i+1]) for every i, computed incrementally."""
    digest = hashlib.sha256()
    tokens = 0
    for part in parts:
        digest.update(canonical(_without_cache_control(part)).encode())
        digest.update(b"\x00")
        tokens += part_tokens(part)
        yield digest.hexdigest(), tokens


def anthropic_parts(body: Json) -> tuple[list[Any], list[int]]:
    """Prompt blocks in Anthropic's cache order, and the indexes of blocks that carry cache_control."""
    parts: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, str) and system:
        parts.append(system)
    elif isinstance(system, list):
        parts.extend(system)
    for message in body.get("messages") or []:
        content = message.get("content")
        # A string is the same prompt as one text block (and caches the same).
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        # The role is part of what the model sees, so it is part of the cached identity.
        parts.extend({**block, "_role": message.get("role")} for block in blocks)
    breakpoints = [i for i, part in enumerate(parts) if isinstance(part, dict) and part.get("cache_control")]
    return parts, breakpoints


class _Entries:
    """Cache entries by prefix hash, each with the time it expires."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._expires: dict[str, float] = {}

    def live(self, digest: str, now: float) -> bool:
        return self._expires.get(digest, float("-inf")) > now

    def touch(self, digest: str, now: float) -> None:
        self._expires[digest] = now + self.ttl

    def clear(self) -> None:
        self._expires.clear()


class AnthropicCache:
    def __init__(
        self,
        min_tokens: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = TTL_SECONDS,
        lookback: int = LOOKBACK_BLOCKS,
    ) -> None:
        self._min_tokens = min_tokens  # None: by model family
        self._clock = clock
        self._lookback = lookback
        self._entries = _Entries(ttl)

    def usage(self, body: Json, now: float | None = None) -> PromptUsage:
        now = self._clock() if now is None else now
        parts, breakpoints = anthropic_parts(body)
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise CacheRuleError(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(breakpoints)}."
            )
        prefixes = list(prefix_digests(parts))
        total = prefixes[-1][1] if prefixes else 0
        minimum = self._min_tokens if self._min_tokens is not None else min_cacheable_tokens(str(body.get("model")))
        cacheable = [i for i in breakpoints if prefixes[i][1] >= minimum]
        if not cacheable:
            return PromptUsage(input_tokens=total, cache_read_tokens=0, cache_write_tokens=0)
        hits = [self._nearest_live(prefixes, b, now) for b in cacheable]
        read_at = max((i for i in hits if i is not None), default=None)
        read = prefixes[read_at][1] if read_at is not None else 0
        cached_end = prefixes[cacheable[-1]][1]
        if read_at is not None:
            self._entries.touch(prefixes[read_at][0], now)  # a read refreshes the entry's lifetime
        for index in cacheable:
            self._entries.touch(prefixes[index][0], now)
        return PromptUsage(
            input_tokens=total - cached_end, cache_read_tokens=read, cache_write_tokens=max(cached_end - read, 0)
        )

    def _nearest_live(self, prefixes: list[tuple[str, int]], breakpoint: int, now: float) -> int | None:
        """The block index of the longest live entry at `breakpoint` or within the lookback before it."""
        for index in range(breakpoint, max(breakpoint - self._lookback, 0) - 1, -1):
            if self._entries.live(prefixes[index][0], now):
                return index
        return None

    def clear(self) -> None:
        self._entries.clear()


class OpenAICache:
    def __init__(
        self,
        min_tokens: int = OPENAI_MIN_TOKENS,
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = TTL_SECONDS,
    ) -> None:
        self._min_tokens = min_tokens
        self._clock = clock
        self._entries = _Entries(ttl)

    def usage(self, body: Json, now: float | None = None) -> PromptUsage:
        now = self._clock() if now is None else now
        # Tools precede the messages in the prompt, so they open the prefix as one part.
        parts: list[Any] = [{"tools": body.get("tools") or []}, *(body.get("messages") or [])]
        prefixes = list(prefix_digests(parts))[1:]  # only whole-message prefixes count
        total = prefixes[-1][1] if prefixes else 0
        hit = max(
            (
                (tokens, digest)
                for digest, tokens in prefixes
                if tokens >= self._min_tokens and self._entries.live(digest, now)
            ),
            default=None,
        )
        for digest, tokens in prefixes:
            if tokens >= self._min_tokens:
                self._entries.touch(digest, now)
        cached = hit[0] if hit is not None else 0
        return PromptUsage(input_tokens=total - cached, cache_read_tokens=cached, cache_write_tokens=0)

    def clear(self) -> None:
        self._entries.clear()
