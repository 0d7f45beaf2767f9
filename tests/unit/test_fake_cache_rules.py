"""The fake model server's prompt-cache rules (ops/fake_cache.py), one by one, so that a benchmark
run against it cannot report cache hits the real provider would not give."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from ops.fake_cache import (
    LOOKBACK_BLOCKS,
    TTL_SECONDS,
    AnthropicCache,
    CacheRuleError,
    OpenAICache,
    min_cacheable_tokens,
)
from ops.fake_llm import FakeLLM

Json = dict[str, Any]
CC = {"type": "ephemeral"}
LONG = "x" * 8000  # about 2,000 tokens


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def body(*blocks: str, marks: tuple[int, ...] = (), model: str = "claude-sonnet-4-5") -> Json:
    """One user message of text blocks; `marks` are the indexes of blocks carrying cache_control."""
    content = [
        {"type": "text", "text": text, **({"cache_control": CC} if i in marks else {})} for i, text in enumerate(blocks)
    ]
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def test_prefix_match_per_breakpoint_and_marker_not_part_of_it() -> None:
    cache = AnthropicCache(0, clock=Clock())
    first = cache.usage(body("a" * 400, "b" * 400, "tail", marks=(1,)))
    assert (first.cache_read_tokens, first.cache_write_tokens) == (0, 202)
    # Same prefix, the marker moved one block on: the old entry is read, the new block written.
    second = cache.usage(body("a" * 400, "b" * 400, "c" * 400, marks=(2,)))
    assert (second.cache_read_tokens, second.cache_write_tokens) == (202, 101)
    # One changed byte before the breakpoint: nothing matches.
    third = cache.usage(body("A" + "a" * 399, "b" * 400, "c" * 400, marks=(2,)))
    assert third.cache_read_tokens == 0 and third.cache_write_tokens == 303


def test_minimum_cacheable_length_per_model_family() -> None:
    assert min_cacheable_tokens("claude-sonnet-4-5") == 1024
    assert min_cacheable_tokens("claude-sonnet-4-6") == 1024
    assert min_cacheable_tokens("claude-opus-4-6") == 4096
    assert min_cacheable_tokens("claude-3-5-haiku-latest") == 2048
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert min_cacheable_tokens("claude-opus-4-5-20251101") == 4096
    cache = AnthropicCache(clock=Clock())
    short = "y" * 3000  # about 750 tokens: below Sonnet's 1,024
    for _ in range(2):
        usage = cache.usage(body(short, "q", marks=(0,)))
        assert (usage.cache_read_tokens, usage.cache_write_tokens) == (0, 0) and usage.input_tokens > 750
    cache.usage(body(LONG, "q", marks=(0,)))
    assert cache.usage(body(LONG, "q", marks=(0,))).cache_read_tokens == 2001
    # The same 2,000 tokens are too short for Haiku 4.5.
    haiku = cache.usage(body(LONG, "q", marks=(0,), model="claude-haiku-4-5"))
    assert (haiku.cache_read_tokens, haiku.cache_write_tokens) == (0, 0)


def test_entries_live_five_minutes_after_their_last_use() -> None:
    clock = Clock()
    cache = AnthropicCache(0, clock=clock)
    request = body(LONG, "q", marks=(0,))
    cache.usage(request)
    clock.now += TTL_SECONDS - 1
    assert cache.usage(request).cache_read_tokens > 0  # and the read refreshed it
    clock.now += TTL_SECONDS - 1
    assert cache.usage(request).cache_read_tokens > 0
    clock.now += TTL_SECONDS + 1
    expired = cache.usage(request)
    assert expired.cache_read_tokens == 0 and expired.cache_write_tokens > 0


def test_lookback_finds_an_entry_at_most_20_blocks_before_a_breakpoint() -> None:
    def grown(extra: int) -> Json:
        blocks = [LONG, *[f"block {i}" for i in range(extra)]]
        return body(*blocks, marks=(len(blocks) - 1,))

    near = AnthropicCache(0, clock=Clock())
    near.usage(body(LONG, marks=(0,)))
    assert near.usage(grown(LOOKBACK_BLOCKS)).cache_read_tokens == 2001
    far = AnthropicCache(0, clock=Clock())
    far.usage(body(LONG, marks=(0,)))
    assert far.usage(grown(LOOKBACK_BLOCKS + 1)).cache_read_tokens == 0


def test_more_than_four_breakpoints_is_refused() -> None:
    cache = AnthropicCache(0, clock=Clock())
    cache.usage(body("a", "b", "c", "d", marks=(0, 1, 2, 3)))
    with pytest.raises(CacheRuleError):
        cache.usage(body("a", "b", "c", "d", "e", marks=(0, 1, 2, 3, 4)))
    with FakeLLM() as fake:
        client = anthropic.Anthropic(api_key="k", base_url=fake.anthropic_base_url, max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
            client.messages.create(model="fake-model", max_tokens=5, **_five_marks())


def _five_marks() -> dict[str, Any]:
    payload = body("a", "b", "c", "d", "e", marks=(0, 1, 2, 3, 4))
    return {"messages": payload["messages"]}


def test_openai_prefix_needs_1024_tokens_and_expires() -> None:
    clock = Clock()
    cache = OpenAICache(clock=clock)
    small = {"messages": [{"role": "system", "content": "s" * 2000}, {"role": "user", "content": "a"}]}
    cache.usage(small)
    assert cache.usage(small).cache_read_tokens == 0  # 500 tokens: below the minimum
    big = {"messages": [{"role": "system", "content": LONG}, {"role": "user", "content": "a"}]}
    cache.usage(big)
    follow = {"messages": [*big["messages"], {"role": "assistant", "content": "b"}]}
    assert cache.usage(follow).cache_read_tokens == cache.usage(big).prompt_tokens
    clock.now += TTL_SECONDS + 1
    assert cache.usage(big).cache_read_tokens == 0
