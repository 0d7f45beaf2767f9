"""CI turns skips into failures; a developer's machine keeps them as skips."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

_SUITE = """
import pytest

def test_needs_a_service():
    pytest.skip("no Redis here")

@pytest.mark.xfail(reason="known")
def test_known_failure():
    assert False

def test_fine():
    pass
"""


def test_a_skip_fails_the_run_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(_SUITE)
    result = pytester.runpytest_inprocess("-p", "tests.support.ci")
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*skipped under CI, where every test must run*no Redis here*"])


def test_a_skip_stays_a_skip_outside_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(_SUITE)
    result = pytester.runpytest_inprocess("-p", "tests.support.ci")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
