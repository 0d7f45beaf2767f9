"""Which commit is "the previous release" (tests/support/previous_release.py), on small repositories made here:
the main line before the newest migration landed, and a loud failure where the history is missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.previous_release import HistoryMissing, previous_release_commit

NEWEST = "migrations/0002_second.sql"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def commit_file(repo: Path, path: str, message: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(message)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: first migration, then a branch adding the newest migration merged with --no-ff, then more work."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "migrations/0001_first.sql", "first")
    commit_file(repo, "README", "work on main")
    git(repo, "checkout", "-q", "-b", "feature")
    commit_file(repo, NEWEST, "second")
    git(repo, "checkout", "-q", "main")
    commit_file(repo, "other", "more work on main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    commit_file(repo, "later", "after the merge")
    return repo


def test_the_previous_release_is_the_main_line_before_the_newest_migration_landed(repo: Path) -> None:
    before_merge = git(repo, "rev-parse", "HEAD~1^1")
    assert previous_release_commit(repo, NEWEST) == (before_merge, NEWEST)
    assert "second" not in git(repo, "ls-tree", "-r", "--name-only", before_merge)


def test_an_uncommitted_newest_migration_makes_head_the_previous_release(repo: Path) -> None:
    assert previous_release_commit(repo, "migrations/0003_not_committed.sql")[0] == git(repo, "rev-parse", "HEAD")


def test_a_shallow_clone_fetches_its_history_or_fails_loudly(repo: Path, tmp_path: Path) -> None:
    expected = previous_release_commit(repo, NEWEST)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    assert previous_release_commit(shallow, NEWEST) == expected  # the origin was reachable: history fetched

    cut_off = tmp_path / "cut-off"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(cut_off)], check=True)
    git(cut_off, "remote", "remove", "origin")
    with pytest.raises(HistoryMissing, match="shallow: run `git fetch --unshallow`"):
        previous_release_commit(cut_off, NEWEST)
