"""The startup check that no task can stay unacknowledged past the broker's visibility timeout: a retry's
backoff (or a debounced task's delay) waits on the worker before the task runs, and both count."""

from __future__ import annotations

import importlib

import pytest

from shared.infra.config import Settings
from workers.limits import check_visibility_timeout, longest_retry_countdown


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, 0),  # no autoretry: the task never waits for a retry
        ({"autoretry_for": (OSError,), "retry_backoff": 2, "max_retries": 5}, 32),  # 2 × 2⁴
        ({"autoretry_for": (OSError,), "retry_backoff": 2, "retry_backoff_max": 60, "max_retries": 8}, 60),
        ({"autoretry_for": (OSError,), "retry_backoff": True, "max_retries": 30}, 600),  # Celery's cap
        ({"autoretry_for": (OSError,), "retry_backoff": 1, "retry_backoff_max": 30, "max_retries": None}, 30),
        ({"autoretry_for": (OSError,)}, 180),  # no backoff: Celery's default_retry_delay
        ({"autoretry_for": (OSError,), "retry_backoff": 2, "max_retries": 0}, 0),
    ],
)
def test_longest_retry_countdown_follows_celerys_autoretry(options: dict[str, object], expected: float) -> None:
    assert longest_retry_countdown(options) == expected


def test_backoff_plus_time_limit_must_fit_in_the_visibility_timeout() -> None:
    options = {"autoretry_for": (OSError,), "retry_backoff": 2, "retry_backoff_max": 120, "max_retries": 8}
    # The time limit alone (90 s) fits in 120 s; the 120 s backoff in front of it does not.
    with pytest.raises(ValueError, match=r"engram\.embeddings\.x.*wait 120 s.*above 210"):
        check_visibility_timeout(
            "engram.embeddings.x", options, settings(broker_visibility_timeout=120, turn_time_limit=90)
        )
    check_visibility_timeout(
        "engram.embeddings.x", options, settings(broker_visibility_timeout=211, turn_time_limit=90)
    )


def test_a_debounce_delay_counts_like_a_backoff() -> None:
    tight = settings(broker_visibility_timeout=100, turn_time_limit=90)
    with pytest.raises(ValueError, match="wait 15 s"):
        check_visibility_timeout("engram.extraction.extract", {}, tight, countdown=15)


@pytest.mark.usefixtures("placeholder_broker")
def test_the_real_tasks_pass_with_the_defaults_and_are_refused_when_it_is_too_short() -> None:
    from workers.app import TASK_MODULES

    for module in TASK_MODULES:  # registers every engram task (each is checked against the defaults here)
        importlib.import_module(module)
    from workers.base import DECLARED, check_declared

    assert {"engram.turns.drain", "engram.extraction.extract", "engram.embeddings.embed_memory"} <= DECLARED.keys()
    check_declared(settings())
    # 120 s was accepted before (it exceeds the 90 s time limit), yet embedding retries back off up to 120 s.
    with pytest.raises(ValueError, match="ENGRAM_BROKER_VISIBILITY_TIMEOUT"):
        check_declared(settings(broker_visibility_timeout=120, turn_time_limit=90))
    check_declared(settings(broker_visibility_timeout=400, turn_time_limit=90))  # what the test suite uses
