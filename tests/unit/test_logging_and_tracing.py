"""Log redaction and the tracing settings, without servers (the end-to-end checks are in
tests/integration/test_tracing.py)."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from shared.infra.config import Settings
from shared.infra.logging import REDACTED, redact
from shared.infra.tracing import configure_tracing, parse_headers, traces_endpoint


@pytest.mark.parametrize("level", ["info", "warning", "error"])
def test_text_and_secrets_are_redacted_at_info_and_above(level: str) -> None:
    event = {
        "event": "turn done",
        "level": level,
        "text": "my locker code is 1234",
        "reply": "noted",
        "value": "Prefers green tea",
        "api_key": "egm_secret",
        "flower_password": "hunter2",
        "Authorization": "Bearer egm_x",
        "turn_id": 7,
        "input_tokens": 12,
        "session_id": 3,
    }
    out = redact(None, level, dict(event))
    for key in ("text", "reply", "value", "api_key", "flower_password", "Authorization"):
        assert out[key] == REDACTED, key
    # Ids and counts stay: they are what makes a line useful.
    assert (out["turn_id"], out["input_tokens"], out["session_id"], out["event"]) == (7, 12, 3, "turn done")


def test_debug_lines_keep_text() -> None:
    out = redact(None, "debug", {"event": "x", "level": "debug", "text": "hello"})
    assert out["text"] == "hello"


def test_stdlib_lines_are_json_with_context(capsys: pytest.CaptureFixture[str]) -> None:
    import shared.infra.logging as engram_logging

    saved = (engram_logging._configured, structlog.get_config(), logging.getLogger().handlers[:])
    engram_logging._configured = False
    try:
        engram_logging.configure_logging("INFO", json_lines=True)
        with structlog.contextvars.bound_contextvars(request_id="r-1", task_id="t-1"):
            logging.getLogger("celery.app.trace").info("Task %s succeeded", "engram.turns.drain")
            structlog.get_logger("x").info("turn done", text="private words", turn_id=5)
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    finally:
        engram_logging._configured = saved[0]
        structlog.configure(**saved[1])
        logging.getLogger().handlers = saved[2]
    celery_line, engram_line = lines[-2:]
    assert celery_line["event"] == "Task engram.turns.drain succeeded"
    assert celery_line["logger"] == "celery.app.trace"
    assert (celery_line["request_id"], celery_line["task_id"]) == ("r-1", "t-1")
    assert engram_line["request_id"] == "r-1" and engram_line["turn_id"] == 5
    assert engram_line["text"] == REDACTED


def test_tracing_is_off_by_default() -> None:
    assert configure_tracing("gateway", Settings(_env_file=None)) is False  # type: ignore[call-arg]


def test_otlp_settings() -> None:
    assert traces_endpoint(Settings(_env_file=None)) is None  # type: ignore[call-arg]
    settings = Settings(_env_file=None, otel_endpoint="http://collector:4318/")  # type: ignore[call-arg]
    assert traces_endpoint(settings) == "http://collector:4318/v1/traces"
    assert parse_headers("x-api-key=abc=,  team = core ,") == {"x-api-key": "abc=", "team": "core"}
    with pytest.raises(ValueError, match="name=value"):
        parse_headers("novalue")


def test_llm_call_cost_from_configured_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.llm.pricing import call_cost
    from shared.llm.types import Usage

    prices = {"claude-sonnet-4-6": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}}
    usage = Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=10_000, cache_write_tokens=2000)
    # 1000×3 + 200×15 + 10000×0.3 + 2000×3.75 = 16,500 per million → $0.0165
    assert call_cost("claude-sonnet-4-6", usage, prices) == pytest.approx(0.0165)
    assert call_cost("gpt-4.1", usage, prices) is None  # unpriced: no cost recorded
    monkeypatch.setenv("ENGRAM_LLM_PRICES", '{"m": {"input": 1}}')
    assert Settings(_env_file=None).llm_prices == {"m": {"input": 1.0}}  # type: ignore[call-arg]
    monkeypatch.setenv("ENGRAM_LLM_PRICES", '{"m": {"inptu": 1}}')
    with pytest.raises(ValueError, match="unknown token kinds"):
        Settings(_env_file=None)  # type: ignore[call-arg]
