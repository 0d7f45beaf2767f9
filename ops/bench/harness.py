"""What every benchmark under ops/bench shares: one percentile definition, one way to summarise a
latency distribution, one `--json` convention (the last line of stdout is one JSON object) and one
way to turn a benchmark's own errors into a message and an exit code instead of a traceback.

A benchmark keeps its workload; the plumbing lives here (stack start and cleanup: ops.bench.stack).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ops.bench.stack import BenchError

__all__ = [
    "BenchError",
    "add_json_flag",
    "distribution",
    "emit",
    "percentile",
    "ratio",
    "run_main",
]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), so a p99 of a few hundred
    samples is not simply the maximum. None when there are no values (not 0: nothing was measured)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(
    values: Sequence[float], quantiles: Iterable[float] = (50, 95, 99), digits: int = 1
) -> dict[str, float | int | None]:
    """{"p50": …, "p95": …, "p99": …, "max": …, "n": …} rounded to `digits`."""

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, digits)

    summary: dict[str, float | int | None] = {f"p{q:g}": rounded(percentile(values, q)) for q in quantiles}
    summary["max"] = rounded(max(values)) if values else None
    summary["n"] = len(values)
    return summary


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return round(numerator / denominator, digits)


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="after the report, print the figures as one JSON object (the last line)"
    )


def emit(report: str, summary: Mapping[str, Any], as_json: bool) -> None:
    """Print the human report; with --json, then one compact JSON object as the very last line."""
    print(report, flush=True)
    if as_json:
        print(json.dumps(summary, separators=(",", ":"), default=str), flush=True)


def run_main(main: Callable[[], int]) -> int:
    """Run a benchmark's main(): a BenchError becomes `error: …` on stderr and exit code 1, Ctrl-C
    exit code 130 — never a traceback for a condition the benchmark itself detected."""
    try:
        return main()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
