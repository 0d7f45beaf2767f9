"""/readyz names a failing dependency with a generic reason; the exception text stays in the server log."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.routes import health

SECRET = "redis://:hunter2@10.1.2.3:6379/0"


class RecordingLog:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.entries.append({"event": event, **fields})


def test_failing_dependency_is_named_without_its_exception_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_redis() -> str:
        raise ConnectionError(f"Error 111 connecting to {SECRET}. Connection refused.")

    monkeypatch.setattr(health, "_check_postgres", lambda: "ok")
    monkeypatch.setattr(health, "_check_redis", broken_redis)
    log = RecordingLog()
    monkeypatch.setattr(health, "log", log, raising=False)
    app = FastAPI()
    app.include_router(health.router)
    response = TestClient(app).get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["redis"] and body["checks"] == {"postgres": "ok", "redis": "unavailable"}
    assert "hunter2" not in response.text and "10.1.2.3" not in response.text and "Error" not in response.text
    # The operator still finds out why, in the log.
    assert any(entry.get("dependency") == "redis" and SECRET in entry.get("error", "") for entry in log.entries)
