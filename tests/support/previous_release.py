"""The previous release's source tree, for tests of a rolling upgrade (old code on the new schema).

There are no release tags: "the previous release" is the main line just before the newest migration landed,
found from git history (the first-parent commit that added the newest migration file, then its first parent),
and exported with `git archive` into a directory. When the newest migration is not committed yet, HEAD is the
release before it. A shallow clone fetches its history first; one that cannot fails the test with what to
run: a test of the previous release that silently tested today's code would pass for nothing.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from shared.infra.migrate import available_migrations

REPO = Path(__file__).resolve().parents[2]


class HistoryMissing(RuntimeError):
    """The clone lacks the history that names the previous release."""


@dataclass(frozen=True)
class PreviousRelease:
    commit: str
    lacks: str  # the migration it does not ship (this release's newest)
    tree: Path


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise HistoryMissing(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def newest_migration_path() -> str:
    newest = max(available_migrations(), key=lambda m: m.version)
    return f"migrations/{newest.version:04d}_{newest.name}.sql"


def previous_release_commit(repo: Path = REPO, path: str | None = None) -> tuple[str, str]:
    """(commit of the previous release, `path`: the newest migration, which that release lacks)."""
    path = path or newest_migration_path()
    if _git(repo, "rev-parse", "--is-shallow-repository") == "true":
        # A shallow clone (CI's may be one) lacks the history; fetch it when the origin is reachable.
        subprocess.run(["git", "-C", str(repo), "fetch", "--unshallow", "--quiet"], capture_output=True, timeout=300)
    if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"HEAD:{path}"], capture_output=True).returncode:
        return _git(repo, "rev-parse", "HEAD"), path  # the newest migration is not committed: HEAD is before it
    added = _git(
        repo,
        "log",
        "--first-parent",
        "--diff-merges=first-parent",
        "--diff-filter=A",
        "--no-patch",
        "--format=%H",
        "-1",
        "HEAD",
        "--",
        path,
    )
    shallow = _git(repo, "rev-parse", "--is-shallow-repository") == "true"
    try:
        if not added:
            raise HistoryMissing(f"no commit on HEAD's first-parent line adds {path}")
        return _git(repo, "rev-parse", "--verify", f"{added}^1"), path
    except HistoryMissing as exc:
        hint = " (this clone is shallow: run `git fetch --unshallow`)" if shallow else ""
        raise HistoryMissing(f"cannot find the release before {path}{hint}: {exc}") from exc


def export_previous_release(into: Path) -> PreviousRelease:
    """`git archive` of the previous release into `into` (created); checked to lack the newest migration."""
    commit, lacks = previous_release_commit()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit], capture_output=True, timeout=120
    )
    if archive.returncode != 0:
        raise HistoryMissing(f"git archive {commit} failed: {archive.stderr.decode(errors='replace').strip()}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    assert not (into / lacks).exists(), f"{commit} already ships {lacks}: not the release before it"
    assert (into / "migrations").is_dir() and (into / "workers").is_dir(), f"{commit} is not an engram tree"
    return PreviousRelease(commit=commit, lacks=lacks, tree=into)
