"""`engram doctor`: each check says what it found and, when it fails, how to fix it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.infra.sentinel import SentinelTarget


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def run_checks(settings: Settings) -> Iterator[Check]:
    from shared.infra.services import (
        ServiceNotConfigured,
        resolve_database_url,
        resolve_redis_sentinel,
        resolve_redis_url,
    )

    yield Check("data dir", True, str(settings.data_dir))
    try:
        database_url = resolve_database_url(settings)
    except ServiceNotConfigured as exc:
        yield Check("postgres", False, str(exc), "run `engram up` (embedded) or set ENGRAM_DATABASE_URL")
        database_url = None
    if database_url:
        yield from _check_postgres(database_url)
    sentinel = resolve_redis_sentinel(settings)
    try:
        redis_url = resolve_redis_url(settings) if sentinel is None else None
    except ServiceNotConfigured as exc:
        yield Check("redis", False, str(exc), "run `engram up` (embedded) or set ENGRAM_REDIS_URL")
        redis_url = None
    if redis_url or sentinel is not None:
        yield from _check_redis_and_workers(redis_url, sentinel)
    yield _check_provider(settings)
    model_file = _check_embedding_model_file(settings)
    if model_file is not None:
        yield model_file


def _check_embedding_model_file(settings: Settings) -> Check | None:
    """Whether the local ONNX backend's model file is there, or can be made where it is looked for."""
    from shared.embeddings.providers import onnx_model_files

    files = onnx_model_files(settings)
    if files is None:
        return None
    path = files.run_path
    if path.is_file():
        return Check("embedding model", True, f"{settings.embedding_backend}: {path}")
    prepare = " ".join(["python -m shared.embeddings.providers", *files.prepare_args()])
    if not _can_create(path):
        return Check(
            "embedding model",
            False,
            f"{settings.embedding_backend}: {path} is missing and cannot be written there",
            f"run `{prepare}` as a user who can write there, or set ENGRAM_EMBEDDING_ONNX_PATH to a writable place",
        )
    # Not a failure: `engram up` makes it before starting anything, and a process that embeds first makes it
    # itself (slower, and that process keeps torch loaded).
    return Check("embedding model", True, f"{settings.embedding_backend}: not made yet ({path}); `{prepare}` makes it")


def _can_create(path: Path) -> bool:
    """Whether `path` could be written: its nearest existing ancestor is a writable directory."""
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    return ancestor.is_dir() and os.access(ancestor, os.W_OK)


def _check_postgres(url: str) -> Iterator[Check]:
    from shared.infra.db import connect
    from shared.infra.migrate import pending_migrations

    try:
        with connect(url) as conn:
            version = conn.execute("SELECT current_setting('server_version') AS v").fetchone() or {"v": "?"}
            yield Check("postgres", True, f"reachable, version {version['v']}")
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            if row:
                yield Check("pgvector", True, f"extension installed, version {row['extversion']}")
            else:
                available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
                yield Check(
                    "pgvector",
                    False,
                    "extension not installed" + ("" if available else " and not available"),
                    "run `engram migrate`"
                    if available
                    else "use a Postgres with pgvector (e.g. pgvector/pgvector image)",
                )
            yield _check_embeddings(conn)
            yield _check_secret_keys(conn)
            pending = pending_migrations(conn)
            yield Check(
                "migrations",
                not pending,
                "up to date" if not pending else f"{len(pending)} pending: {[m.version for m in pending]}",
                "run `engram migrate`",
            )
    except Exception as exc:
        yield Check("postgres", False, f"cannot connect: {exc}", "check ENGRAM_DATABASE_URL, or run `engram up`")


def _check_secret_keys(conn: Conn) -> Check:
    """Where the secret keys come from and whether they open every stored channel secret."""
    from shared.channels.connections import check_stored_secrets
    from shared.infra.config import get_settings
    from shared.infra.secretbox import ENV_NAME, SecretKeyError, SecretKeyMissing

    try:
        found = check_stored_secrets(conn, get_settings())
    except SecretKeyMissing as exc:
        return Check("secret key", False, str(exc), f"set {ENV_NAME} to the key the secrets were sealed with")
    except SecretKeyError as exc:
        runbook = "docs/operations/runbooks/rotate-keys.md"
        return Check("secret key", False, str(exc), f"see the rotate-keys runbook ({runbook})")
    except Exception:  # tables not created yet: the migrations check reports that
        return Check("secret key", True, "no channel tables yet")
    finally:
        conn.rollback()
    if found.key_source is None:
        detail = f"none yet (no channel secrets stored); `engram up` makes one, or set {ENV_NAME}"
        return Check("secret key", True, detail)
    plain = ""
    if found.plain:
        plain = f"; {found.plain} still in plain text (sealed at the next `engram up` or `engram migrate`)"
    return Check(
        "secret key",
        True,
        f"{found.keys} key(s) from {found.key_source}; they open the secrets of {found.sealed} connection(s){plain}",
    )


def _check_embeddings(conn: Conn) -> Check:
    from shared.embeddings import current_space
    from shared.embeddings.providers import embedder_from_settings
    from shared.embeddings.space import follow_recorded_space
    from shared.infra.config import get_settings

    try:
        space = current_space(conn)
    except Exception:  # tables not created yet: the migrations check reports that
        return Check("embeddings", True, "no embedding space yet")
    embedder = embedder_from_settings(get_settings())
    follow_recorded_space(embedder, space)  # the default backend serves either local space
    configured = f"{embedder.provider}/{embedder.model} ({embedder.dimension} dims)"
    if space is None:
        return Check("embeddings", True, f"{configured}; recorded at first use")
    stored = f"{space['provider']}/{space['model']} ({space['dimension']} dims)"
    if (space["model"], space["dimension"]) != (embedder.model, embedder.dimension):
        return Check(
            "embeddings",
            False,
            f"vectors were made with {stored}, configured is {configured}",
            "run `engram reindex`, or configure the recorded model again",
        )
    if space["status"] != "ready":
        return Check(
            "embeddings",
            False,
            f"{stored}: a reindex is unfinished (search uses full text only)",
            "run `engram reindex` to finish it",
        )
    return Check("embeddings", True, stored)


def _check_redis_and_workers(url: str | None, sentinel: SentinelTarget | None) -> Iterator[Check]:
    import redis
    import redis.sentinel

    from shared.infra.worker_heartbeats import live_workers

    try:
        client: redis.Redis
        if sentinel is None:
            assert url is not None
            client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        else:
            timeouts = {"socket_connect_timeout": 3, "socket_timeout": 3}
            client = redis.sentinel.Sentinel(
                list(sentinel.sentinels), sentinel_kwargs=timeouts, socket_connect_timeout=3, socket_timeout=3
            ).master_for(sentinel.service)
        client.ping()
        beating = len(live_workers(client))
    except redis.RedisError as exc:
        fix = (
            "check ENGRAM_REDIS_URL, or run `engram up`"
            if sentinel is None
            else f"check ENGRAM_REDIS_SENTINELS and that the sentinels monitor {sentinel.service!r}"
        )
        yield Check("redis", False, f"cannot connect: {exc}", fix)
        return
    yield Check(
        "redis", True, "reachable" if sentinel is None else f"reachable (Sentinel primary of {sentinel.service!r})"
    )
    from shared.queueing.queues import QUEUES
    from workers.app import app

    # A broadcast cannot know how many workers will answer, so it waits out its whole timeout, unless told how many
    # replies to expect: the workers with a heartbeat. (None beating: wait, in case one runs without them.)
    replies = app.control.inspect(timeout=2.0, limit=beating or None).active_queues() or {}
    consumed = {queue["name"] for queues in replies.values() for queue in queues}
    if not replies:
        yield Check("workers", False, "no worker answered", "start the stack with `engram up` (or run celery workers)")
        return
    missing = [q for q in QUEUES if q not in consumed]
    yield Check(
        "workers",
        not missing,
        f"{len(replies)} worker(s): {', '.join(sorted(replies))}" + (f"; no consumer for {missing}" if missing else ""),
        f"start a worker with -Q {','.join(missing)}" if missing else "",
    )


def _check_provider(settings: Settings) -> Check:
    from shared.llm.factory import chat_model, cheap_model, provider_name, provider_problems

    problems = provider_problems(settings)
    name = provider_name(settings)
    detail = f"{name}: chat model {chat_model(settings)}, background model {cheap_model(settings)}"
    if name == "offline" and not problems:
        detail += " (offline rules, no language model: set ENGRAM_ANTHROPIC_API_KEY or ENGRAM_OPENAI_API_KEY for one)"
    return Check(
        "llm provider", not problems, detail if not problems else "; ".join(problems), "see docs/reference/settings.md"
    )
