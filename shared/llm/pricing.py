"""What an LLM call cost, from per-model prices in the settings (ENGRAM_LLM_PRICES).

Prices are configuration, not code: they change, differ by contract, and a wrong built-in table would be
worse than none. A model without a price has no cost (the metric is simply not recorded for it).
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.llm.types import Usage

TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


def call_cost(model: str, usage: Usage, prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """US dollars for one call, from prices in dollars per million tokens of each kind; None when the model
    has no price. A kind missing from a model's prices costs nothing."""
    price = prices.get(model)
    if price is None:
        return None
    counts = {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write": usage.cache_write_tokens,
    }
    return sum(counts[kind] * float(price.get(kind, 0.0)) for kind in TOKEN_KINDS) / 1_000_000
