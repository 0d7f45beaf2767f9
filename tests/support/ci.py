"""What changes under CI (`CI` is set by CI systems and by .ci/run).

- Every test must run: a skip (a required service missing, external URLs that cannot be restarted)
  fails the run instead of passing it quietly.
- Hypothesis is derandomized: CI checks the same examples on every run, so a red run is reproducible
  and never a coin toss; developers' runs keep exploring new examples (and `@example` pins the
  failures they find).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings


def skips_fail() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


if skips_fail():
    # Loaded when pytest imports this plugin, before test modules build their `settings(...)`.
    settings.register_profile("ci", derandomize=True, database=None)
    settings.load_profile("ci")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if skips_fail() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every test must run: {reason}"
