"""job_runs bookkeeping: every run once per (job, period, scope), resumable, observable.

How a run goes (`run_job`):
1. The period comes from the run's clock (`as_of`, now unless given: tests and backfills pass one).
2. A Redis lock per (job, period, scope) keeps two processes off one run; a lock whose holder
   process is provably dead (same machine) is taken over at once, any other expires with its TTL.
3. The job_runs row is inserted, or found: `done` → nothing to do (a duplicate beat fire, a
   redelivered task, a manual re-run); `running` or `failed` → the run resumes from its cursor with
   the clock it started with, under a new `attempt` number.
4. The job works in pages. Each page commits its effects together with the run's new cursor and
   counts, conditioned on the attempt number, so a killed run resumes exactly where its last page
   committed (no double effects) and a superseded attempt can commit nothing.
5. A run given a deadline (Celery tasks: `ENGRAM_JOB_SLICE_SECONDS`) stops between pages when it
   passes and reports `paused`; the task sends itself again and the next slice resumes.
6. Memories a run writes are indexed (embedded) by the caller once the slice returns (`to_embed`). An
   attempt that died instead (SIGKILL, a crash, an error) never handed over the memories its committed
   pages wrote: the next attempt finds them (active, written since the run started, no chunks yet) and
   hands them over itself. Without this they stayed out of vector search until the unindexed-memory
   sweep, which waits 15 minutes (tests/integration/test_maintenance_worker_kill.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from shared.infra import db
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.infra.locks import HeartbeatLock, take_over_if_holder_dead
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.maintenance.schedule import period_of, spec_of, timezone

log = get_logger(__name__)

ALL = "all"


class RunSuperseded(RuntimeError):
    """Another attempt took this run over (this one lost its lock): stop without committing."""


class JobUserNotFound(LookupError):
    pass


@dataclass(frozen=True)
class UserRef:
    tenant_id: int
    user_id: int


@dataclass
class Page:
    """What one page of work did; committed with the page's effects."""

    conn: Conn
    cursor: dict[str, Any]
    counts: Counter[str] = field(default_factory=Counter)
    changed: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] += n


@dataclass
class RunHandle:
    """A run in progress, as a job sees it."""

    id: int
    job: str
    period: str
    scope: str
    attempt: int
    as_of: datetime
    settings: Settings
    cursor: dict[str, Any]
    counts: Counter[str]
    changed: int
    details: dict[str, Any]
    user: UserRef | None
    deadline: float | None = None  # time.monotonic() past which the run pauses between pages
    lock: HeartbeatLock | None = None
    paused: bool = False
    provider: Any = None  # a ChatProvider for tests; None = from settings (see `model`)
    to_embed: list[int] = field(default_factory=list)  # memories whose text the run wrote (to index)

    def model(self) -> Any:
        """The run's ChatProvider, built once on first use and then shared by every call of the run.

        Built per call (complete(provider=None)), each model call constructed a new SDK client with a
        new TLS context and connection pool: 26 % of the samples of a 1,000-user enrichment run
        (py-spy), and a new connection per call. Lazily, so a job that never calls a model (decay of a
        user without styles, cache eviction) never needs the model configured."""
        if self.provider is None:
            from shared.llm.factory import chat_provider

            self.provider = chat_provider(self.settings)
        return self.provider

    def should_stop(self) -> bool:
        """Between pages: True when the slice is over (the run pauses) — or the lock was lost (it raises)."""
        if self.lock is not None and self.lock.lost:
            raise RunSuperseded(f"lost the lock of {self.job} {self.period}")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.paused = True
        return self.paused

    def users(self, conn: Conn, after: int, limit: int = 100) -> list[UserRef]:
        """The run's users after id `after`, in id order (only the one user of a --user run)."""
        if self.user is not None:
            return [self.user] if self.user.user_id > after else []
        rows = conn.execute(
            "SELECT id, tenant_id FROM users WHERE id > %s ORDER BY id LIMIT %s", (after, limit)
        ).fetchall()
        return [UserRef(row["tenant_id"], row["id"]) for row in rows]

    def each_user(self) -> Iterator[UserRef]:
        """Users from the cursor on; the cursor's `user_id` is the last user finished."""
        after = int(self.cursor.get("user_id", 0))
        while True:
            with db.connection() as conn:
                batch = self.users(conn, after)
            if not batch:
                return
            for user in batch:
                yield user
                after = user.user_id

    @contextmanager
    def page(self, cursor: dict[str, Any] | None = None) -> Iterator[Page]:
        """One page of work in one transaction, committed with the run's progress."""
        with db.connection() as conn:
            page = Page(conn, dict(self.cursor if cursor is None else cursor))
            yield page
            counts = self.counts + page.counts
            details = {**self.details, **page.details}
            row = conn.execute(
                """UPDATE job_runs SET cursor = %s, counts = %s, changed = changed + %s, details = %s,
                       heartbeat_at = now()
                   WHERE id = %s AND attempt = %s AND status = 'running' RETURNING changed""",
                (Jsonb(page.cursor), Jsonb(dict(counts)), page.changed, Jsonb(details), self.id, self.attempt),
            ).fetchone()
            if row is None:
                raise RunSuperseded(f"run {self.id} was taken over; this attempt's page is rolled back")
        # Committed: only now does the in-memory view move on.
        self.cursor, self.counts, self.changed, self.details = page.cursor, counts, row["changed"], details

    def user_done(self, user: UserRef) -> None:
        """Move the cursor past a finished user (in its own small commit if no page did)."""
        if int(self.cursor.get("user_id", 0)) < user.user_id:
            with self.page({"user_id": user.user_id}):
                pass


@dataclass
class RunResult:
    job: str
    period: str
    scope: str
    status: str  # done, paused, busy (another process runs it), failed
    changed: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    already_ran: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    as_of: datetime | None = None
    to_embed: list[int] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job,
            "period": self.period,
            "changed": self.changed,
            "status": self.status,
            "scope": self.scope,
            "already_ran": self.already_ran,
            "as_of": self.as_of.isoformat() if self.as_of else None,
        }
        if self.error:
            body["error"] = self.error
        if self.details:
            body["details"] = self.details
        for name, value in sorted(self.counts.items()):
            body.setdefault(name, value)
        return body


JobFunction = Callable[[RunHandle], None]


def lock_name(job: str, period: str, scope: str) -> str:
    return f"engram:lock:job:{job}:{period}:{scope}"


def scope_of(user: UserRef | None) -> str:
    return ALL if user is None else f"user:{user.tenant_id}:{user.user_id}"


def scope_user(scope: str) -> UserRef | None:
    """The user of a run's scope ('user:<tenant id>:<user id>'), None for 'all'."""
    if scope == ALL:
        return None
    _, tenant_id, user_id = scope.split(":")
    return UserRef(int(tenant_id), int(user_id))


# Runs older than this are left alone (a new period has its own run); a run that failed this many times
# waits for a person (`engram jobs run` resumes it) instead of being retried forever.
RESUME_WITHIN_DAYS = 2
MAX_ATTEMPTS = 10


def unfinished_runs(conn: Conn) -> list[dict[str, Any]]:
    return conn.execute(
        """SELECT id, job, period, scope, as_of, attempt, status FROM job_runs
           WHERE status IN ('running', 'failed') AND attempt < %s
             AND started_at > now() - make_interval(days => %s)
             AND heartbeat_at < now() - interval '1 minute'
           ORDER BY id""",
        (MAX_ATTEMPTS, RESUME_WITHIN_DAYS),
    ).fetchall()


def _take_lock(settings: Settings, name: str) -> HeartbeatLock | None:
    client = get_redis()
    lock = HeartbeatLock(client, name, settings.session_lock_ttl_seconds)
    if lock.acquire():
        return lock
    if take_over_if_holder_dead(client, name) and lock.acquire():
        return lock
    return None


def resolve_user(conn: Conn, tenant: str, external_id: str) -> UserRef:
    row = conn.execute(
        """SELECT u.id, u.tenant_id FROM users u JOIN tenants t ON t.id = u.tenant_id
           WHERE t.name = %s AND u.external_id = %s""",
        (tenant, external_id),
    ).fetchone()
    if row is None:
        raise JobUserNotFound(f"no user {external_id!r} in tenant {tenant!r}")
    return UserRef(row["tenant_id"], row["id"])


def _claim(job: str, period: str, scope: str, as_of: datetime) -> dict[str, Any] | None:
    """The run's row, started or resumed under a new attempt; None when the period already ran."""
    with db.connection() as conn:
        row = conn.execute(
            """INSERT INTO job_runs (job, period, scope, as_of) VALUES (%s, %s, %s, %s)
               ON CONFLICT (job, period, scope) DO NOTHING RETURNING *""",
            (job, period, scope, as_of),
        ).fetchone()
        if row is not None:
            return row
        row = conn.execute(
            "SELECT * FROM job_runs WHERE job = %s AND period = %s AND scope = %s FOR UPDATE", (job, period, scope)
        ).fetchone()
        assert row is not None
        if row["status"] == "done":
            return None
        return conn.execute(
            """UPDATE job_runs SET attempt = attempt + 1, status = 'running', error = NULL, heartbeat_at = now()
               WHERE id = %s RETURNING *""",
            (row["id"],),
        ).fetchone()


def _done_row(job: str, period: str, scope: str) -> dict[str, Any] | None:
    with db.connection() as conn:
        return conn.execute(
            "SELECT * FROM job_runs WHERE job = %s AND period = %s AND scope = %s", (job, period, scope)
        ).fetchone()


def run_job(
    job: str,
    function: JobFunction,
    settings: Settings,
    *,
    as_of: datetime | None = None,
    user: UserRef | None = None,
    slice_seconds: float | None = None,
    provider: Any = None,
) -> RunResult:
    """Run (or resume, or skip) `job` for the period of `as_of`; see the module docstring."""
    spec_of(job)
    as_of = (as_of or datetime.now(UTC)).astimezone(UTC)
    period = period_of(job, as_of, timezone(settings))
    scope = scope_of(user)
    lock = _take_lock(settings, lock_name(job, period, scope))
    if lock is None:
        return RunResult(job, period, scope, "busy", as_of=as_of, details={"reason": "another process runs it"})
    try:
        row = _claim(job, period, scope, as_of)
        if row is None:
            previous = _done_row(job, period, scope) or {}
            return RunResult(
                job,
                period,
                scope,
                "done",
                already_ran=True,
                as_of=previous.get("as_of", as_of),
                details={"previous_run": {"changed": previous.get("changed"), **(previous.get("counts") or {})}},
            )
        handle = RunHandle(
            id=row["id"],
            job=job,
            period=period,
            scope=scope,
            attempt=row["attempt"],
            as_of=row["as_of"],
            settings=settings,
            cursor=dict(row["cursor"]),
            counts=Counter(row["counts"]),
            changed=row["changed"],
            details=dict(row["details"]),
            user=user,
            deadline=None if slice_seconds is None else time.monotonic() + slice_seconds,
            lock=lock,
            provider=provider,
        )
        if row["attempt"] > 1:
            log.info(
                "resuming job run", job=job, period=period, scope=scope, attempt=row["attempt"], cursor=row["cursor"]
            )
            if handle.details.get(CLEAN_PAUSE) != row["attempt"] - 1:
                handle.to_embed.extend(_unindexed_since(row["started_at"], user))
        try:
            function(handle)
        except RunSuperseded:
            raise
        except Exception as exc:
            _fail(handle, exc)
            raise
        result = RunResult(
            job,
            period,
            scope,
            "paused" if handle.paused else "done",
            handle.changed,
            dict(handle.counts),
            details=handle.details,
            as_of=handle.as_of,
            to_embed=handle.to_embed,
        )
        if handle.paused:
            # The caller indexes this slice's writes once we return: the next attempt need not look for them.
            with handle.page() as page:
                page.details[CLEAN_PAUSE] = handle.attempt
        else:
            _finish(handle)
        return result
    finally:
        lock.release()


# details key: the attempt that paused between pages and handed its writes over (see step 6 above).
CLEAN_PAUSE = "paused_attempt"
UNINDEXED_LIMIT = 10_000


def _unindexed_since(started_at: datetime, user: UserRef | None) -> list[int]:
    """Active memories written since the run started (in its scope) that have no chunks yet.

    A memory someone else wrote meanwhile may be among them, its own embedding task still queued:
    indexing is idempotent, so it is at worst embedded twice."""
    with db.connection() as conn:
        rows = conn.execute(
            """SELECT m.id FROM memories m
               WHERE m.updated_at >= %(since)s AND m.valid_until IS NULL
                 AND (%(user)s::bigint IS NULL OR (m.tenant_id = %(tenant)s AND m.user_id = %(user)s))
                 AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id)
               ORDER BY m.id LIMIT %(limit)s""",
            {
                "since": started_at,
                "user": user.user_id if user else None,
                "tenant": user.tenant_id if user else None,
                "limit": UNINDEXED_LIMIT,
            },
        ).fetchall()
    return [int(row["id"]) for row in rows]


def _finish(handle: RunHandle) -> None:
    with db.connection() as conn:
        row = conn.execute(
            """UPDATE job_runs SET status = 'done', finished_at = now(), heartbeat_at = now()
               WHERE id = %s AND attempt = %s AND status = 'running' RETURNING id""",
            (handle.id, handle.attempt),
        ).fetchone()
    if row is None:
        raise RunSuperseded(f"run {handle.id} was taken over before it finished")


def _fail(handle: RunHandle, exc: BaseException) -> None:
    message = f"{type(exc).__name__}: {exc}"[:2000]
    try:
        with db.connection() as conn:
            conn.execute(
                """UPDATE job_runs SET status = 'failed', error = %s, heartbeat_at = now()
                   WHERE id = %s AND attempt = %s""",
                (message, handle.id, handle.attempt),
            )
    except Exception as write_error:  # the original error matters more; the row stays 'running' and resumes
        log.warning("could not record a failed job run", job=handle.job, error=str(write_error))


# --------------------------------------------------------------------------------------- reading


def last_runs(conn: Conn, jobs: list[str]) -> dict[str, dict[str, Any]]:
    """The most recent all-users run of each job."""
    rows = conn.execute(
        """SELECT DISTINCT ON (job) job, period, scope, status, as_of, attempt, counts, changed, details, error,
                  started_at, finished_at, heartbeat_at
           FROM job_runs WHERE job = ANY(%s) AND scope = 'all' ORDER BY job, started_at DESC, id DESC""",
        (jobs,),
    ).fetchall()
    return {row["job"]: row for row in rows}


def run_summary(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    finished = row["finished_at"]
    return {
        "period": row["period"],
        "status": row["status"],
        "as_of": row["as_of"],
        "started_at": row["started_at"],
        "finished_at": finished,
        "duration_seconds": round((finished - row["started_at"]).total_seconds(), 3) if finished else None,
        "attempts": row["attempt"],
        "changed": row["changed"],
        "counts": row["counts"],
        "details": row["details"],
        "error": row["error"],
    }
