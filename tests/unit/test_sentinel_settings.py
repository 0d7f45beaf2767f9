"""Where Redis is: ENGRAM_REDIS_SENTINELS (or a `sentinel://` URL) names the sentinels, every other
setting keeps the single server; a bad address is refused at start with the entry named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from shared.infra.config import Settings
from shared.infra.sentinel import SentinelTarget, parse_sentinels
from shared.infra.services import resolve_redis_sentinel


@pytest.fixture
def redis_conf(placeholder_broker: None) -> Iterator[Any]:
    from workers.app import redis_conf

    yield redis_conf


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, **values)  # type: ignore[call-arg]


def test_a_single_server_is_the_default_and_unchanged(tmp_path: Path, redis_conf: Any) -> None:
    s = settings(tmp_path, redis_url="redis://10.0.0.5:6379/0")
    assert resolve_redis_sentinel(s) is None
    conf = redis_conf(s)
    assert conf["broker_url"] == conf["redbeat_redis_url"] == "redis://10.0.0.5:6379/0"
    assert "master_name" not in conf["broker_transport_options"]
    assert "redbeat_redis_options" not in conf


def test_sentinels_win_over_the_url_and_configure_broker_and_beat(tmp_path: Path, redis_conf: Any) -> None:
    s = settings(
        tmp_path,
        redis_url="redis://10.0.0.5:6379/0",
        redis_sentinels="10.0.0.1:26379, 10.0.0.2:26380,10.0.0.3",
        redis_sentinel_service="prod",
    )
    target = resolve_redis_sentinel(s)
    assert target == SentinelTarget((("10.0.0.1", 26379), ("10.0.0.2", 26380), ("10.0.0.3", 26379)), "prod")
    conf = redis_conf(s)
    assert conf["broker_url"] == "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26380;sentinel://10.0.0.3:26379"
    assert conf["broker_transport_options"]["master_name"] == "prod"
    assert conf["redbeat_redis_url"].startswith("redis-sentinel://")
    assert conf["redbeat_redis_options"]["sentinels"] == list(target.sentinels)
    assert conf["redbeat_redis_options"]["service_name"] == "prod"


def test_a_kombu_style_sentinel_url_means_the_same(tmp_path: Path) -> None:
    s = settings(tmp_path, redis_url="sentinel://h1:26379;sentinel://h2:26379/0")
    assert resolve_redis_sentinel(s) == SentinelTarget((("h1", 26379), ("h2", 26379)), "engram")


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("redis_sentinels", "10.0.0.1:notaport", "10.0.0.1:notaport"),
        ("redis_sentinels", "h1:26379,:26379", ":26379"),
        ("redis_url", "sentinel://h1:99999", "h1:99999"),
        ("redis_sentinels", "secret@h1:26379", "passwords are not supported"),
    ],
)
def test_a_bad_sentinel_address_is_refused_with_the_entry_named(
    tmp_path: Path, field: str, value: str, named: str
) -> None:
    with pytest.raises(ValidationError) as error:
        settings(tmp_path, **{field: value})
    assert named in str(error.value)


def test_an_empty_sentinel_list_means_none(tmp_path: Path) -> None:
    assert settings(tmp_path, redis_sentinels=" ").redis_sentinels is None
    with pytest.raises(ValueError, match="no sentinel address"):
        parse_sentinels(" , ")
