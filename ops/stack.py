"""The whole stack on one machine: what `engram up` starts, in order, and stops in reverse."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from ops.embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedServiceError, free_port, wait_for_port
from ops.process_commands import beat_argv, flower_argv, flower_env, gateway_argv, pool_argv, worker_argv
from ops.supervisor import ChildSpec, Supervisor
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.infra.logging import get_logger
from shared.infra.services import read_services, resolve_redis_sentinel, services_file, write_services
from shared.queueing.queues import BACKGROUND_QUEUES, INTERACTIVE_QUEUES, POOLS

log = get_logger(__name__)


class StackError(RuntimeError):
    pass


def ensure_dev_key(settings: Settings, conn: Conn) -> str:
    """The default tenant's development key: fixed by ENGRAM_DEV_API_KEY, else made once and kept
    in the data dir (mode 600) so restarts print the same key."""
    from shared.access.auth import DEFAULT_TENANT, ensure_tenant, generate_key, key_is_valid, register_key

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


# `engram up --cluster`: gateways and beats (workers: one process per pool of shared/queueing/queues.py POOLS).
CLUSTER_GATEWAYS = 2
CLUSTER_BEATS = 2
# How long `engram up` waits for the gateway to listen (it imports the app and opens its pools first).
GATEWAY_START_TIMEOUT_SECONDS = 180


def _port_free(host: str, port: int) -> bool:
    return free_port(port, host) == port


def _gateway_ready(host: str, port: int, timeout: float) -> bool:
    """/healthz answered: a gateway is up (one is enough; the other joins the port when it is ready)."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    url = f"http://{'[' + target + ']' if ':' in target else target}:{port}/healthz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


class Stack:
    def __init__(self, settings: Settings, *, cluster: bool = False) -> None:
        self.settings = settings
        self.cluster = cluster
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self.supervisor = Supervisor(settings.run_dir, dict(os.environ))
        self.lock_file = settings.run_dir / "engram-up.pid"
        self.metrics_ports: dict[str, int] = {}  # worker process name → its exporter's port

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
        workers = [f"worker-{pool}" for pool in POOLS] if self.cluster else ["worker-turns", "worker-background"]
        self.metrics_ports = dict(zip(workers, self._metrics_ports(len(workers)), strict=True))
        database_url, redis_url = self._start_services()
        write_services(s, database_url=database_url, redis_url=redis_url)
        key = self._prepare_database(database_url)
        self._prepare_embedding_model()
        flower_password = ensure_flower_password(s)
        if self.cluster:
            self._spawn_cluster(database_url, redis_url, flower_password)
            if not _gateway_ready(s.host, s.port, 90):
                raise StackError(f"no gateway answered on {s.host}:{s.port}; see {self.log_dir}")
            return self._cluster_banner(key, database_url, redis_url, flower_password)
        self._spawn_processes(database_url, redis_url, flower_password)
        waiting = "processes started; waiting for the gateway (it loads the embedding model first)"
        log.info(waiting, logs=str(self.log_dir))
        # Generous: on a loaded machine (2 cores shared with other work) importing the gateway alone took 60 s.
        if not wait_for_port(s.host, s.port, GATEWAY_START_TIMEOUT_SECONDS):
            raise StackError(
                f"the gateway did not start listening on {s.host}:{s.port}; see {self.log_dir / 'gateway.log'}"
            )
        return self._banner(key, database_url, redis_url, flower_password)

    @property
    def log_dir(self) -> Path:
        return self.settings.run_dir / "logs"

    def _metrics_ports(self, count: int) -> list[int]:
        """One exporter port per worker pool process (each serves its own pool's processes; see
        workers/metrics.py): ENGRAM_UP_WORKER_METRICS_PORT and the ports after it, or free ones for 0."""
        s = self.settings
        host = s.worker_metrics_host
        if s.up_worker_metrics_port == 0:
            ports: list[int] = []
            while len(ports) < count:
                port = free_port(None, host)
                if port not in ports:
                    ports.append(port)
            return ports
        ports = list(range(s.up_worker_metrics_port, s.up_worker_metrics_port + count))
        for port in ports:
            if port > 65535 or not _port_free(host, port):
                raise StackError(
                    f"worker metrics port {host}:{port} is not available; free it or set "
                    f"ENGRAM_UP_WORKER_METRICS_PORT (the first of {count} consecutive ports; 0 = any free ports)"
                )
        return ports

    def _start_services(self) -> tuple[str, str]:
        s = self.settings
        try:
            if s.database_url:
                database_url = s.database_url
            else:
                self.postgres = EmbeddedPostgres(s.data_dir / "postgres")
                database_url = self.postgres.start()
                self.supervisor.watch("postgres", self.postgres)
            sentinel = resolve_redis_sentinel(s)
            if sentinel is not None:
                # Children inherit ENGRAM_REDIS_SENTINELS; the `sentinel://` URL says the same to URL readers.
                redis_url = sentinel.broker_url
            elif s.redis_url:
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
        from shared.infra.db import connect
        from shared.infra.migrate import SchemaTooNew, apply_migrations, check_schema_known

        with connect(database_url) as conn:
            try:
                check_schema_known(conn)
            except SchemaTooNew as exc:
                raise StackError(str(exc)) from exc
            applied = apply_migrations(conn)
            if applied:
                log.info("migrations applied", versions=[m.version for m in applied])
            conn.autocommit = False
            key = ensure_dev_key(self.settings, conn)
            conn.commit()
            self._seal_channel_secrets(conn)
            self._check_embedding_space(conn)
        return key

    def _seal_channel_secrets(self, conn: Conn) -> None:
        """Generate the secret key file on first start (unless ENGRAM_SECRET_KEY is set), encrypt channel
        secrets stored in plain text before 0017, and refuse to start on keys that do not open them."""
        from shared.channels.connections import seal_at_start
        from shared.infra.secretbox import SecretKeyError

        try:
            sealed = seal_at_start(conn, self.settings, create_key=True)
            conn.commit()
        except SecretKeyError as exc:
            conn.rollback()
            raise StackError(str(exc)) from exc
        if sealed:
            log.info("encrypted the channel secrets stored in plain text", connections=sealed)

    def _check_embedding_space(self, conn: Conn) -> None:
        """Refuse to start on vectors of another model: searches would compare incomparable vectors."""
        from shared.embeddings import EmbeddingSpaceMismatch, ensure_embedding_space
        from shared.embeddings.providers import embedder_from_settings

        try:
            ensure_embedding_space(conn, embedder_from_settings(self.settings))
            conn.commit()
        except EmbeddingSpaceMismatch as exc:
            raise StackError(str(exc)) from exc

    def _prepare_embedding_model(self) -> None:
        """Export the local model to ONNX once, before any process needs it (the first start on a machine).

        Otherwise the gateway (which loads the model before it listens) and every embedding process would
        each import torch and export at the same time, on a loaded machine past the gateway's start
        timeout. A child process does it, so this long-lived supervisor never holds torch in memory.
        """
        from shared.embeddings.providers import onnx_model_files

        files = onnx_model_files(self.settings)
        if files is None or files.run_path.is_file():
            return
        path = files.export
        log.info("exporting the embedding model to ONNX (once per machine)", path=str(path), int8=files.int8)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "shared.embeddings.providers", *files.prepare_args()],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise StackError(
                f"could not export the embedding model to {path}: {last}; set ENGRAM_EMBEDDING_ONNX_PATH to a "
                "writable file or ENGRAM_EMBEDDING_BACKEND=torch"
            )
        log.info("embedding model exported", path=str(path), seconds=round(time.monotonic() - started, 1))

    def _spawn_processes(self, database_url: str, redis_url: str, flower_password: str) -> None:
        s = self.settings
        env = self._child_env(database_url, redis_url)
        for spec in (
            ChildSpec("gateway", gateway_argv(s.host, s.port), env),
            ChildSpec(
                "worker-turns",
                worker_argv(INTERACTIVE_QUEUES, "turns", concurrency=s.turn_worker_concurrency, log_level=s.log_level),
                {**env, "ENGRAM_WORKER_METRICS_PORT": str(self.metrics_ports["worker-turns"])},
            ),
            ChildSpec(
                "worker-background",
                worker_argv(
                    BACKGROUND_QUEUES, "background", concurrency=s.background_worker_concurrency, log_level=s.log_level
                ),
                {**env, "ENGRAM_WORKER_METRICS_PORT": str(self.metrics_ports["worker-background"])},
            ),
            ChildSpec("beat", beat_argv(s.log_level), env),
            ChildSpec("flower", flower_argv(s.flower_host, s.flower_port), self._flower_env(env, flower_password)),
        ):
            # Their start-up chatter (Celery's banners and root warning, Flower's inspect retries) goes to a
            # file per process; the terminal keeps the banner and the supervisor's one line per event.
            spec.log_file = self.log_dir / f"{spec.name}.log"
            self.supervisor.spawn(spec)

    def _child_env(self, database_url: str, redis_url: str) -> dict[str, str]:
        return {
            "ENGRAM_DATABASE_URL": database_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_DATA_DIR": str(self.settings.data_dir),
            "PYTHONUNBUFFERED": "1",
        }

    def _flower_env(self, env: dict[str, str], flower_password: str) -> dict[str, str]:
        # Through the environment, so the password is not on a command line for `ps` to show.
        return {**env, **flower_env(self.settings.flower_user, flower_password)}

    def _spawn_cluster(self, database_url: str, redis_url: str, flower_password: str) -> None:
        """Every process of a cluster deployment on this machine, each logging to <run_dir>/logs/<name>.log."""
        s = self.settings
        env = self._child_env(database_url, redis_url)
        specs: list[ChildSpec] = []
        # Gateways on SO_REUSEPORT sockets of one port; ops/cluster_gateway.py says why (not a shared
        # socket, uvicorn --workers or a proxy).
        for index in range(1, CLUSTER_GATEWAYS + 1):
            specs.append(ChildSpec(f"gateway-{index}", [sys.executable, "-m", "ops.cluster_gateway"], env))
        for pool in POOLS:
            name = f"worker-{pool}"
            metrics = {"ENGRAM_WORKER_METRICS_PORT": str(self.metrics_ports[name])}
            specs.append(ChildSpec(name, pool_argv(s, pool), {**env, **metrics}))
        # RedBeat (workers/app.py): the beats share a leader lock in Redis; the other one stands by and takes
        # over within ENGRAM_BEAT_LOCK_TIMEOUT_SECONDS of the leader's death.
        for index in range(1, CLUSTER_BEATS + 1):
            specs.append(ChildSpec(f"beat-{index}", beat_argv(s.log_level), env))
        flower = flower_argv(s.flower_host, s.flower_port)
        specs.append(ChildSpec("flower", flower, self._flower_env(env, flower_password)))
        for spec in specs:
            spec.log_file = self.log_dir / f"{spec.name}.log"
            self.supervisor.spawn(spec)

    def _metrics_lines(self) -> list[str]:
        host = self.settings.worker_metrics_host
        return [f"  metrics   {name:<18} http://{host}:{port}/metrics" for name, port in self.metrics_ports.items()] + [
            "            (bearer key with the metrics scope: engram keys create --scopes metrics)"
        ]

    def _cluster_banner(self, key: str, database_url: str, redis_url: str, flower_password: str) -> str:
        s = self.settings
        from shared.llm.factory import chat_model, provider_name

        return "\n".join(
            [
                "engram cluster is running",
                f"  gateway   http://{s.host}:{s.port}   ({CLUSTER_GATEWAYS} gateways sharing the port, SO_REUSEPORT)",
                *(f"  pool      {pool:<12} queues {','.join(queues)}" for pool, queues in POOLS.items()),
                f"  beat      {CLUSTER_BEATS} (RedBeat leader lock, {s.beat_lock_timeout_seconds}s)",
                f"  flower    http://{s.flower_host}:{s.flower_port}   (login {s.flower_user} / {flower_password})",
                *self._metrics_lines(),
                f"  logs      {self.log_dir}",
                f"  data dir  {s.data_dir}",
                f"  postgres  {'embedded' if self.postgres else 'external'}: {database_url}",
                f"  redis     {'embedded' if self.redis else 'external'}: {redis_url}",
                f"  model     {provider_name(s)} / {chat_model(s)}",
                f"  API key   {key}   (dev key of tenant 'default', saved in {s.dev_key_file})",
                "Ctrl-C stops everything",
            ]
        )

    def _banner(self, key: str, database_url: str, redis_url: str, flower_password: str) -> str:
        s = self.settings
        from shared.llm.factory import chat_model, provider_name

        provider = provider_name(s)
        note = (
            "  (offline mode: no language model configured; see docs/reference/settings.md, Language model)"
            if provider == "offline"
            else ""
        )
        return "\n".join(
            [
                "engram is running",
                f"  gateway   http://{s.host}:{s.port}   (OpenAPI: http://{s.host}:{s.port}/docs)",
                f"  console   http://{s.host}:{s.port}/console   (sign in with the API key below)",
                f"  flower    http://{s.flower_host}:{s.flower_port}   (login {s.flower_user} / {flower_password})",
                *self._metrics_lines(),
                f"  logs      {self.log_dir}   (gateway.log, worker-turns.log, worker-background.log, beat.log, "
                "flower.log)",
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
