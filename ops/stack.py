"""The whole stack on one machine: what `engram up` starts, in order, and stops in reverse."""

from __future__ import annotations

import os
import secrets
import sys

import psutil

from ops.embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedServiceError, free_port, wait_for_port
from ops.supervisor import ChildSpec, Supervisor
from shared.config import Settings
from shared.db import Conn
from shared.logging import get_logger
from shared.services import read_services, services_file, write_services
from workers.queues import BACKGROUND_QUEUES, INTERACTIVE_QUEUES

log = get_logger(__name__)


class StackError(RuntimeError):
    pass


def ensure_dev_key(settings: Settings, conn: Conn) -> str:
    """The default tenant's development key: fixed by ENGRAM_DEV_API_KEY, else made once and kept
    in the data dir (mode 600) so restarts print the same key."""
    from shared.auth import DEFAULT_TENANT, ensure_tenant, generate_key, key_is_valid, register_key

    tenant_id = ensure_tenant(conn, DEFAULT_TENANT)
    if settings.dev_api_key is not None:
        key = settings.dev_api_key.get_secret_value()
    elif settings.dev_key_file.exists() and key_is_valid(conn, settings.dev_key_file.read_text().strip()):
        key = settings.dev_key_file.read_text().strip()
    else:
        key = generate_key()
    register_key(conn, tenant_id, key, "dev")
    settings.dev_key_file.write_text(key + "\n")
    settings.dev_key_file.chmod(0o600)
    return key


def ensure_flower_password(settings: Settings) -> str:
    """Flower's basic-auth password: ENGRAM_FLOWER_PASSWORD, else made once and kept in the data dir (mode 600)
    so restarts (and the browser's saved login) keep working."""
    if settings.flower_password is not None:
        return settings.flower_password.get_secret_value()
    path = settings.flower_password_file
    password = path.read_text().strip() if path.exists() else ""
    if not password:
        password = secrets.token_urlsafe(18)  # URL-safe alphabet: no ',' (Flower splits its setting there)
    path.write_text(password + "\n")
    path.chmod(0o600)
    return password


# Workers have nothing to learn from each other (mingle: revoked ids at start; gossip: peer events),
# and both bootsteps reconnect badly after Redis restarts (a worker can stop consuming).
_WORKER_FLAGS = ("--without-mingle", "--without-gossip")


def _port_free(host: str, port: int) -> bool:
    return free_port(port, host) == port


class Stack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self.supervisor = Supervisor(settings.run_dir, dict(os.environ))
        self.lock_file = settings.run_dir / "engram-up.pid"

    # -- lifecycle -------------------------------------------------------------------------------

    def _take_run_lock(self) -> None:
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        if self.lock_file.exists():
            try:
                pid = int(self.lock_file.read_text().strip())
            except ValueError:
                pid = -1
            if pid > 0 and pid != os.getpid() and psutil.pid_exists(pid):
                raise StackError(
                    f"engram is already running from this data dir (pid {pid}); stop it first or use another "
                    f"ENGRAM_DATA_DIR"
                )
        self.lock_file.write_text(str(os.getpid()))

    def start(self) -> str:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_run_lock()
        for what in self.supervisor.clean_stale():
            log.warning("stopped a process left over from an earlier run", process=what)
        for name, host, port in (("gateway", s.host, s.port), ("flower", s.flower_host, s.flower_port)):
            if not _port_free(host, port):
                raise StackError(
                    f"{name} port {host}:{port} is already in use; free it or set ENGRAM_"
                    f"{'PORT' if name == 'gateway' else 'FLOWER_PORT'}"
                )
        database_url, redis_url = self._start_services()
        write_services(s, database_url=database_url, redis_url=redis_url)
        key = self._prepare_database(database_url)
        flower_password = ensure_flower_password(s)
        self._spawn_processes(database_url, redis_url, flower_password)
        if not wait_for_port(s.host, s.port, 60):
            raise StackError(f"the gateway did not start listening on {s.host}:{s.port}")
        return self._banner(key, database_url, redis_url, flower_password)

    def _start_services(self) -> tuple[str, str]:
        s = self.settings
        try:
            if s.database_url:
                database_url = s.database_url
            else:
                self.postgres = EmbeddedPostgres(s.data_dir / "postgres")
                database_url = self.postgres.start()
                self.supervisor.watch("postgres", self.postgres)
            if s.redis_url:
                redis_url = s.redis_url
            else:
                previous = read_services(s).get("redis_port")
                self.redis = EmbeddedRedis(s.data_dir / "valkey", port=previous)
                redis_url = self.redis.start()
                self.supervisor.watch("valkey", self.redis)
                write_services(s, redis_port=self.redis.port)
        except EmbeddedServiceError as exc:
            raise StackError(str(exc)) from exc
        return database_url, redis_url

    def _prepare_database(self, database_url: str) -> str:
        from shared.db import connect
        from shared.migrate import apply_migrations

        with connect(database_url) as conn:
            applied = apply_migrations(conn)
            if applied:
                log.info("migrations applied", versions=[m.version for m in applied])
            conn.autocommit = False
            key = ensure_dev_key(self.settings, conn)
            conn.commit()
            self._check_embedding_space(conn)
        return key

    def _check_embedding_space(self, conn: Conn) -> None:
        """Refuse to start on vectors of another model: searches would compare incomparable vectors."""
        from shared.embeddings import EmbeddingSpaceMismatch, embedder_from_settings, ensure_embedding_space

        try:
            ensure_embedding_space(conn, embedder_from_settings(self.settings))
            conn.commit()
        except EmbeddingSpaceMismatch as exc:
            raise StackError(str(exc)) from exc

    def _spawn_processes(self, database_url: str, redis_url: str, flower_password: str) -> None:
        s = self.settings
        env = {
            "ENGRAM_DATABASE_URL": database_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_DATA_DIR": str(s.data_dir),
            "PYTHONUNBUFFERED": "1",
        }
        # Flower's API can run and revoke tasks: a login is required (through the environment, so the
        # password is not on a command line for `ps` to show), and an unauthenticated API set in the
        # caller's environment is switched off.
        flower_env = {
            **env,
            "FLOWER_BASIC_AUTH": f"{s.flower_user}:{flower_password}",
            "FLOWER_UNAUTHENTICATED_API": "false",
        }
        py = sys.executable
        celery = [py, "-m", "celery", "-A", "workers.app"]
        for spec in (
            ChildSpec(
                "gateway",
                [
                    py,
                    "-m",
                    "uvicorn",
                    "api.app:create_app",
                    "--factory",
                    "--host",
                    s.host,
                    "--port",
                    str(s.port),
                    "--no-access-log",
                ],
                env,
            ),
            ChildSpec(
                "worker-turns",
                [
                    *celery,
                    "worker",
                    "-Q",
                    ",".join(INTERACTIVE_QUEUES),
                    "-n",
                    "turns@%h",
                    "-c",
                    str(s.turn_worker_concurrency),
                    "--loglevel",
                    s.log_level,
                    *_WORKER_FLAGS,
                ],
                env,
            ),
            ChildSpec(
                "worker-background",
                [
                    *celery,
                    "worker",
                    "-Q",
                    ",".join(BACKGROUND_QUEUES),
                    "-n",
                    "background@%h",
                    "-c",
                    str(s.background_worker_concurrency),
                    "--loglevel",
                    s.log_level,
                    *_WORKER_FLAGS,
                ],
                env,
            ),
            ChildSpec(
                "beat", [*celery, "beat", "-s", str(s.run_dir / "celerybeat-schedule"), "--loglevel", s.log_level], env
            ),
            ChildSpec(
                "flower", [*celery, "flower", f"--address={s.flower_host}", f"--port={s.flower_port}"], flower_env
            ),
        ):
            self.supervisor.spawn(spec)

    def _banner(self, key: str, database_url: str, redis_url: str, flower_password: str) -> str:
        s = self.settings
        from shared.llm.factory import chat_model, provider_name

        provider = provider_name(s)
        note = "  (offline mode: no language model configured; see README)" if provider == "offline" else ""
        return "\n".join(
            [
                "engram is running",
                f"  gateway   http://{s.host}:{s.port}   (OpenAPI: http://{s.host}:{s.port}/docs)",
                f"  flower    http://{s.flower_host}:{s.flower_port}   (login {s.flower_user} / {flower_password})",
                f"  data dir  {s.data_dir}",
                f"  postgres  {'embedded' if self.postgres else 'external'}: {database_url}",
                f"  redis     {'embedded' if self.redis else 'external'}: {redis_url}",
                f"  model     {provider} / {chat_model(s)}{note}",
                f"  API key   {key}   (dev key of tenant 'default', saved in {s.dev_key_file})",
                "try: engram chat --user alice      Ctrl-C stops everything",
            ]
        )

    def stop(self) -> None:
        self.supervisor.stop_all()
        for service in (self.redis, self.postgres):
            if service is not None:
                try:
                    service.stop()
                except Exception as exc:  # keep stopping the rest
                    log.error("could not stop embedded service", error=str(exc))
        # Forget the addresses (nothing listens there now) but keep the Redis port for next time.
        if services_file(self.settings).exists():
            write_services(self.settings, database_url=None, redis_url=None)
        self.lock_file.unlink(missing_ok=True)
