"""ENGRAM_CELERY_TASK_EVENTS: Celery task events are off unless asked for (each is a Redis PUBLISH)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.infra.config import get_settings


@pytest.fixture
def fresh_settings(placeholder_broker: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    get_settings.cache_clear()


@pytest.mark.parametrize(("value", "expected"), [(None, False), ("false", False), ("true", True)])
def test_task_events_follow_the_setting(fresh_settings: pytest.MonkeyPatch, value: str | None, expected: bool) -> None:
    from workers.app import create_celery

    if value is None:
        fresh_settings.delenv("ENGRAM_CELERY_TASK_EVENTS", raising=False)
    else:
        fresh_settings.setenv("ENGRAM_CELERY_TASK_EVENTS", value)
    get_settings.cache_clear()
    app = create_celery()
    assert app.conf.worker_send_task_events is expected
    assert app.conf.task_send_sent_event is expected
