"""structlog setup shared by the gateway, workers and CLI.

Context such as request_id, task_id, session_id and turn_id is bound with `structlog.contextvars` so
every line logged while handling a request or task carries it without passing loggers around. Lines
from the standard library's loggers (Celery, uvicorn, libraries) go through the same processors, so
with ENGRAM_LOG_JSON every line is one JSON object with the same context fields, and the trace and
span ids when tracing is on.

What users say never reaches a log at INFO or above: fields that hold conversation or memory text
(`text`, `reply`, `content`, `value`, …) and credentials (`api_key`, `password`, `authorization`, …)
are replaced by a placeholder at those levels. Code logs ids and counts; this is the safety net.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_configured = False

# Field names whose values are user text or secrets. Matched against the whole (lowercased) key.
TEXT_FIELDS = frozenset(
    {"text", "reply", "content", "value", "prompt", "messages", "message_text", "summary", "query", "body"}
)
_SECRET_KEY = re.compile(r"(^|_)(api_key|apikey|key_secret|password|passwd|secret|authorization|auth|cookie)($|_)")
REDACTED = "[redacted]"
_DEBUG = logging.DEBUG


def redact(_logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Replace text and secret fields at INFO and above (DEBUG is for a developer's own machine)."""
    level = logging.getLevelName(str(event_dict.get("level", method_name)).upper())
    if isinstance(level, int) and level <= _DEBUG:
        return event_dict
    for key in list(event_dict):
        lowered = key.lower()
        if lowered in TEXT_FIELDS or _SECRET_KEY.search(lowered):
            event_dict[key] = REDACTED
    return event_dict


def add_trace_ids(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    from shared.infra.tracing import current_trace_ids

    for key, value in current_trace_ids().items():
        event_dict.setdefault(key, value)
    return event_dict


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (test runners and daemonizers swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _shared_processors() -> list[structlog.typing.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        add_trace_ids,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
    ]


def configure_logging(level: str = "INFO", json_lines: bool = False) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared = _shared_processors()
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Standard-library records (Celery, uvicorn, psycopg, …) rendered by the same chain.
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    # uvicorn installs its own plain-text handlers before it loads the app; send its lines through ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
