"""WAL positions as the read-your-writes headers carry them, and the freshness a replica earns from them."""

from __future__ import annotations

from typing import Any, cast

import pytest

from shared.infra.config import Settings
from shared.infra.replicas import _Replica, _Router, format_lsn, parse_lsn, replica_urls


def test_positions_read_as_postgres_writes_them() -> None:
    assert parse_lsn("0/16B3748") == 0x16B3748
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn("0/10") > parse_lsn("0/F")  # by number, not as text
    for text in ("0/16B3748", "16/B374D848", "FFFFFFFF/FFFFFFFF"):
        assert format_lsn(parse_lsn(text)) == text


@pytest.mark.parametrize("bad", ["", "16B3748", "0/", "/1", "0/G", "1/2/3", " 0/1", "123456789/0"])
def test_anything_else_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a WAL position"):
        parse_lsn(bad)


def test_replica_urls_are_a_comma_separated_list() -> None:
    settings = Settings(database_replica_urls=" postgresql://a/x , ,postgresql://b/x")
    assert replica_urls(settings) == ["postgresql://a/x", "postgresql://b/x"]
    assert replica_urls(Settings()) == []


def test_a_replica_is_fresh_as_of_the_newest_primary_position_it_replayed() -> None:
    router = _Router(Settings(database_replica_max_lag_seconds=5), [])
    router.samples = ((100.0, 10), (101.0, 20), (102.0, 30))
    replica = _Replica(0, "postgresql://r/x", cast(Any, None))
    router._note_replayed(replica, 25)
    assert replica.fresh_as_of == 101.0
    assert replica.usable(106.0, 5) and not replica.usable(106.5, 5)
    router._note_replayed(replica, 5)  # an older answer never moves it back
    assert replica.fresh_as_of == 101.0 and replica.replayed == 25
    replica.down_until = 200.0
    assert not replica.usable(102.0, 5)
