"""Lock tokens name their owner, so a waiter on the same machine can tell a dead holder from a live one."""

from __future__ import annotations

import os
import subprocess
import sys

from shared.infra.locks import Holder, holder_state, owner_token


def test_a_token_of_this_process_names_a_live_holder() -> None:
    assert holder_state(owner_token()) is Holder.ALIVE
    assert holder_state(owner_token().encode()) is Holder.ALIVE


def test_a_token_of_a_process_that_exited_names_a_dead_holder() -> None:
    child = subprocess.run(
        [sys.executable, "-c", "from shared.infra.locks import owner_token; print(owner_token())"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    token = child.stdout.strip()
    assert token.split("|")[3] != str(os.getpid())
    assert holder_state(token) is Holder.DEAD  # run() reaped it: the PID is gone


def test_a_reused_pid_is_not_taken_for_the_holder() -> None:
    version, boot_id, namespace, pid, started, nonce = owner_token().split("|")
    other_start = f"{float(started) - 1000:.2f}"  # same PID, another process (started earlier)
    assert holder_state("|".join((version, boot_id, namespace, pid, other_start, nonce))) is Holder.DEAD


def test_holders_elsewhere_or_unknown_tokens_are_never_judged_dead() -> None:
    version, _boot_id, namespace, pid, started, nonce = owner_token().split("|")
    other_machine = "|".join((version, "another-boot-id", namespace, pid, started, nonce))
    assert holder_state(other_machine) is Holder.UNKNOWN
    other_namespace = "|".join((version, _boot_id, "pid:[1]", "999999", started, nonce))
    assert holder_state(other_namespace) is Holder.UNKNOWN
    assert holder_state("3f2a9c1e0b7d4e55a1c2b3d4e5f60718") is Holder.UNKNOWN  # redis-py's default token
    assert holder_state("o1|||||") is Holder.UNKNOWN
