"""Where Postgres and Redis are: configured URLs win; otherwise the embedded servers that
`engram up` started, whose addresses it records in `<data_dir>/run/services.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.infra.config import Settings
from shared.infra.sentinel import SentinelTarget, is_sentinel_url, parse_sentinels


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
    """The single server's URL; with Sentinel configured use `resolve_redis_sentinel` (shared/infra/redis_client.py
    builds clients for either)."""
    return _resolve(settings, settings.redis_url, "redis_url", "ENGRAM_REDIS_URL")


def resolve_redis_sentinel(settings: Settings) -> SentinelTarget | None:
    """The sentinels to ask for the Redis primary (ENGRAM_REDIS_SENTINELS, or a `sentinel://`
    ENGRAM_REDIS_URL, or the one `engram up` recorded); None for a single server. Sentinels win over a
    plain ENGRAM_REDIS_URL."""
    if settings.redis_sentinels:
        return SentinelTarget(parse_sentinels(settings.redis_sentinels), settings.redis_sentinel_service)
    url = settings.redis_url or read_services(settings).get("redis_url")
    if is_sentinel_url(url):
        return SentinelTarget(parse_sentinels(str(url), "ENGRAM_REDIS_URL"), settings.redis_sentinel_service)
    return None
