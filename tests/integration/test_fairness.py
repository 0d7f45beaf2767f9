"""Fair turns between tenants: one tenant's burst of turns does not keep another tenant's turn waiting behind
it (shared/queueing/fairness.py). Real gateway, real Redis and Postgres, real Celery workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.redis_client import get_redis
from shared.queueing import fairness
from shared.queueing.queues import broker_keys
from tests.conftest import CeleryStack, Gateway, make_key, wait_turn

pytestmark = pytest.mark.integration

BURST_SESSIONS = 8
BURST_TURNS = 5  # each: 40 turns of tenant A


def _client(gateway: Gateway, key: str) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture
def stopped_workers(celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM) -> Iterator[CeleryStack]:
    """No worker runs until the test starts one: the burst is all stored before any of it runs. After the test
    nothing of the burst is left to run into the next one, whatever the outcome: the worker (which may still be
    draining it) is stopped and the queue emptied; the next test's clean_state removes the turns and the slots."""
    celery_stack.stop()
    get_redis().delete(*broker_keys("turns"))
    yield celery_stack
    celery_stack.stop()
    get_redis().delete(*broker_keys("turns"))


def _burst_turns() -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute(
            """SELECT t.id, t.finished_at FROM turns t JOIN sessions s ON s.id = t.session_id
               WHERE s.session_key LIKE 'a%'"""
        ).fetchall()


def test_a_burst_does_not_hold_back_another_tenants_turn(
    gateway: Gateway, stopped_workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    key_a, key_b = make_key("burst-tenant"), make_key("quiet-tenant")
    with _client(gateway, key_a) as a, _client(gateway, key_b) as b:
        burst = [
            a.post(f"/v1/sessions/a{s}/turns", json={"user_id": f"user-{s}", "text": f"turn {t} of session {s}"})
            for t in range(BURST_TURNS)
            for s in range(BURST_SESSIONS)
        ]
        assert {r.status_code for r in burst} == {202}
        # Every turn is accepted at once; only the tenant's slots' worth of drains went to the queue.
        limit = get_settings().turn_slots_per_tenant
        queued = sum(get_redis().llen(k) for k in broker_keys("turns"))
        assert queued == limit, f"{queued} drains on the queue after the burst, {limit} expected (slots per tenant)"
        quiet = b.post("/v1/sessions/b1/turns", json={"user_id": "bob", "text": "hello from the quiet tenant"})
        assert quiet.status_code == 202

        stopped_workers.ensure("anthropic")
        done = wait_turn(b, quiet.json()["turn_id"])
        assert done["status"] == "done"
        finished_b = _finished_at(done["turn_id"])
        # When B's turn finished, A's backlog had barely begun: at most its slots' worth of drains ran first.
        a_turns = _burst_turns()
        finished_first = [t for t in a_turns if t["finished_at"] is not None and t["finished_at"] < finished_b]
        assert len(finished_first) <= 2 * limit * get_settings().drain_max_turns
        # A's turns all run in the end, each once, without anyone sending them again.
        for turn in burst:
            assert wait_turn(a, turn.json()["turn_id"])["status"] == "done"
    with db.connection() as conn:
        replies = conn.execute(
            "SELECT turn_id, count(*) AS n FROM session_messages WHERE role = 'assistant' GROUP BY turn_id"
        ).fetchall()
    assert len(replies) == BURST_SESSIONS * BURST_TURNS + 1 and {r["n"] for r in replies} == {1}


def _finished_at(turn_id: int) -> Any:
    with db.connection() as conn:
        row = conn.execute("SELECT finished_at FROM turns WHERE id = %s", (turn_id,)).fetchone()
    assert row is not None
    return row["finished_at"]


def test_slots_are_handed_to_the_sessions_that_waited_longest(clean_state: Any) -> None:
    """The admission rules: N slots per tenant, a session holding one is not sent twice, a freed slot goes
    to the session whose queued turn is oldest, and a lease that ran out frees its slot."""
    client = get_redis()
    limits = fairness.FairnessLimits(max_sessions=2, lease_seconds=60)
    with db.connection() as conn:
        tenant = int(conn.execute("INSERT INTO tenants (name) VALUES ('t') RETURNING id").fetchone()["id"])  # type: ignore[index]
        user = int(
            conn.execute(
                "INSERT INTO users (tenant_id, external_id) VALUES (%s, 'u') RETURNING id", (tenant,)
            ).fetchone()["id"]  # type: ignore[index]
        )
        sessions = [
            int(
                conn.execute(
                    "INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, %s) RETURNING id",
                    (tenant, user, f"s{n}"),
                ).fetchone()["id"]  # type: ignore[index]
            )
            for n in range(4)
        ]
        # Queued turns, oldest first: s0, s1, s3, s2.
        for index in (0, 1, 3, 2):
            conn.execute(
                "INSERT INTO turns (tenant_id, user_id, session_id) VALUES (%s, %s, %s)",
                (tenant, user, sessions[index]),
            )
        conn.commit()

        admissions = [fairness.admit(client, tenant, sid, limits).admission for sid in sessions]
        assert admissions == [
            fairness.Admission.SEND,
            fairness.Admission.SEND,
            fairness.Admission.HELD,
            fairness.Admission.HELD,
        ]
        assert fairness.admit(client, tenant, sessions[0], limits).admission is fairness.Admission.IN_FLIGHT

        conn.execute("UPDATE turns SET status = 'done' WHERE session_id = %s", (sessions[0],))
        conn.commit()
        # The tenant's other session still runs: the new one's drain goes behind other tenants' first ones.
        assert fairness.finish(conn, client, tenant, sessions[0], limits) == [
            (sessions[3], fairness.OTHER_SLOT_PRIORITY)
        ]

        # s1's drain was lost: once its lease runs out, its slot is free for s2.
        client.zadd(fairness.slots_key(tenant), {str(sessions[1]): 0})
        ticket = fairness.admit(client, tenant, sessions[2], limits)
        assert ticket.admission is fairness.Admission.SEND and ticket.priority == fairness.OTHER_SLOT_PRIORITY
