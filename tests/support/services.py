"""Real Postgres (+pgvector) and Redis for tests.

Order of preference: URLs from ENGRAM_TEST_DATABASE_URL / ENGRAM_TEST_REDIS_URL; containers
(pgvector/pgvector, redis) when a Docker engine answers; otherwise the same embedded servers
`engram up` uses, in a temporary directory. Embedded servers can be stopped and started again
on the same address, which the outage tests need.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.embedded import EmbeddedPostgres, EmbeddedRedis


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class TestServices:
    __test__ = False  # not a test class, despite the name

    database_url: str
    redis_url: str
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    containers: list[Any] = field(default_factory=list)

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
        for container in self.containers:
            container.stop()


def start_services(workdir: Path) -> TestServices:
    db_url = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    redis_url = os.environ.get("ENGRAM_TEST_REDIS_URL")
    services = TestServices(database_url=db_url or "", redis_url=redis_url or "")
    use_docker = (not db_url or not redis_url) and docker_available()
    if not db_url:
        if use_docker:
            from testcontainers.postgres import PostgresContainer

            pg = PostgresContainer("pgvector/pgvector:pg17", driver=None).start()
            services.containers.append(pg)
            services.database_url = pg.get_connection_url()
        else:
            services.postgres = EmbeddedPostgres(workdir / "postgres")
            services.database_url = services.postgres.start()
    if not redis_url:
        if use_docker:
            from testcontainers.redis import RedisContainer

            rc = RedisContainer("redis:7").start()
            services.containers.append(rc)
            services.redis_url = f"redis://{rc.get_container_host_ip()}:{rc.get_exposed_port(6379)}/0"
        else:
            services.redis = EmbeddedRedis(workdir / "valkey")
            services.redis_url = services.redis.start()
    return services
