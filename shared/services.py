"""Where Postgres and Redis are: configured URLs win; otherwise the embedded servers that
`engram up` started, whose addresses it records in `<data_dir>/run/services.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.config import Settings


class ServiceNotConfigured(RuntimeError):
    pass


def services_file(settings: Settings) -> Path:
    return settings.run_dir / "services.json"


def read_services(settings: Settings) -> dict[str, Any]:
    try:
        data = json.loads(services_file(settings).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write_services(settings: Settings, **values: Any) -> None:
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    data = read_services(settings)
    data.update(values)
    tmp = services_file(settings).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(services_file(settings))


def _resolve(settings: Settings, configured: str | None, key: str, env: str) -> str:
    if configured:
        return configured
    url = read_services(settings).get(key)
    if not url:
        raise ServiceNotConfigured(
            f"{env} is not set and no embedded server is running for data dir {settings.data_dir}: "
            f"start the stack with `engram up`, or set {env}"
        )
    return str(url)


def resolve_database_url(settings: Settings) -> str:
    return _resolve(settings, settings.database_url, "database_url", "ENGRAM_DATABASE_URL")


def resolve_redis_url(settings: Settings) -> str:
    return _resolve(settings, settings.redis_url, "redis_url", "ENGRAM_REDIS_URL")
