"""Real Postgres (+pgvector) and Redis for tests.

URLs from ENGRAM_TEST_DATABASE_URL / ENGRAM_TEST_REDIS_URL when given; otherwise the same embedded
servers `engram up` uses, in a temporary directory, on every machine (with or without Docker): they
can be stopped and started again on the same address, which the outage tests need, so those tests
run everywhere. (Containers were used when Docker answered, and the outage tests skipped there.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ops.embedded import EmbeddedPostgres, EmbeddedRedis


@dataclass
class TestServices:
    __test__ = False  # not a test class, despite the name

    database_url: str
    redis_url: str
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None

    @property
    def can_restart(self) -> bool:
        return self.postgres is not None and self.redis is not None

    def stop_postgres(self) -> None:
        assert self.postgres is not None
        self.postgres.stop()

    def start_postgres(self) -> None:
        assert self.postgres is not None
        self.postgres.start()

    def stop_redis(self) -> None:
        assert self.redis is not None
        self.redis.stop()

    def start_redis(self) -> None:
        assert self.redis is not None
        self.redis.start(same_port=True)  # clients reconnect to the same URL

    def close(self) -> None:
        for service in (self.redis, self.postgres):
            if service is not None:
                service.stop()


def start_services(workdir: Path) -> TestServices:
    db_url = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    redis_url = os.environ.get("ENGRAM_TEST_REDIS_URL")
    services = TestServices(database_url=db_url or "", redis_url=redis_url or "")
    if not db_url:
        services.postgres = EmbeddedPostgres(workdir / "postgres")
        services.database_url = services.postgres.start()
    if not redis_url:
        services.redis = EmbeddedRedis(workdir / "valkey")
        services.redis_url = services.redis.start()
    return services
