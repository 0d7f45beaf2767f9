"""Task names: every task a worker registers is listed in shared/queueing/task_names.py, every listed name is
registered, and beat only sends listed names (a sender naming a task nobody registers loses its work)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest

from shared.maintenance.schedule import JOBS
from shared.queueing import task_names

# Registering a task with a queue is what engram_task has always done; Celery's notice about it is not news here.
pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")


@pytest.fixture
def celery_app(placeholder_broker: None) -> Iterator[object]:
    from workers.app import TASK_MODULES, app

    for module in TASK_MODULES:
        importlib.import_module(module)
    yield app


def test_registered_tasks_are_the_listed_names(celery_app: object) -> None:
    registered = {name for name in celery_app.tasks if name.startswith(task_names.PREFIX)}  # type: ignore[attr-defined]
    assert registered == task_names.ALL


def test_beat_and_the_job_table_send_listed_names(celery_app: object) -> None:
    from workers.app import create_celery

    schedule = create_celery().conf.beat_schedule
    assert {entry["task"] for entry in schedule.values()} <= task_names.ALL
    assert {spec.task for spec in JOBS.values()} <= task_names.ALL
    for name, spec in JOBS.items():  # a job's task is named like the job
        assert spec.task == task_names.task_name("maintenance", name.replace("-", "_"))


def test_an_unlisted_task_is_refused(celery_app: object) -> None:
    from workers.base import engram_task

    def not_listed() -> None:
        pass

    with pytest.raises(ValueError, match=r"shared/queueing/task_names\.py"):
        engram_task("turns")(not_listed)
