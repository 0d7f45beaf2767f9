"""Consolidation on scripted conversations: offline rules end to end through the CLI, and a fake model
that finds a contradiction under another key; re-runs add nothing; a new session queues the old one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.maintenance import jobs
from shared.maintenance.consolidation import jaccard, sessions_to_queue
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from tests.support.scopes import make_scope

# Consolidation is run by hand on conversations written here: no shared worker may mine them first.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_shared_workers")]


@pytest.fixture
def conn(autocommit_conn: Conn) -> Conn:
    return autocommit_conn


def conversation(conn: Conn, scope: Scope, key: str, user_lines: list[str], hours_ago: float = 2) -> int:
    when = datetime.now(UTC) - timedelta(hours=hours_ago)
    session_id = conn.execute(
        "INSERT INTO sessions (tenant_id, user_id, session_key, created_at) VALUES (%s, %s, %s, %s) RETURNING id",
        (scope.tenant_id, scope.user_id, key, when),
    ).fetchone()["id"]
    for line in user_lines:
        for role, content in (("user", line), ("assistant", "Noted!")):
            conn.execute(
                """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, created_at)
                   VALUES (%s, %s, %s, %s, %s, %s)""",
                (scope.tenant_id, scope.user_id, session_id, role, content, when),
            )
    return session_id


def engram(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def active(conn: Conn, scope: Scope) -> dict[str, str]:
    rows = conn.execute(
        "SELECT key, value FROM memories WHERE user_id = %s AND valid_until IS NULL ORDER BY key", (scope.user_id,)
    ).fetchall()
    return {row["key"]: row["value"] for row in rows}


def test_offline_consolidation_end_to_end_supersedes_keeps_history_and_reruns_add_nothing(conn: Conn) -> None:
    alice = make_scope(conn)
    first = conversation(
        conn, alice, "s1", ["Hi! I live in Lisbon.", "I prefer green tea over coffee.", "I work at Acme Corp."]
    )
    today = datetime.now(UTC)
    run = engram("jobs", "run", "consolidation", "--as-of", today.isoformat(), "--json")
    assert run["changed"] == 3 and run["facts_added"] == 3 and run["sessions_consolidated"] == 1
    assert run["messages_read"] == 6
    assert active(conn, alice) == {
        "coffee-vs-green-tea": "Prefers green tea over coffee",
        "user/employer": "User works at Acme Corp",
        "user/location": "User lives in Lisbon",
    }
    assert conn.execute("SELECT consolidated_at FROM sessions WHERE id = %s", (first,)).fetchone()["consolidated_at"]

    # The next session moves the user and repeats a preference in other words.
    conversation(conn, alice, "s2", ["I moved to Porto.", "I prefer green tea over coffee!"], hours_ago=1)
    tomorrow = today + timedelta(days=1)
    second = engram("jobs", "run", "consolidation", "--as-of", tomorrow.isoformat(), "--json")
    assert second["facts_superseded"] == 1 and second["changed"] == 2 and second["duplicates_skipped"] == 1
    facts = active(conn, alice)
    assert facts["user/location"] == "User moved to Porto" and len(facts) == 3
    history = conn.execute(
        """SELECT value, valid_until IS NULL AS live, supersedes_id FROM memories
           WHERE user_id = %s AND key = 'user/location' ORDER BY id""",
        (alice.user_id,),
    ).fetchall()
    assert [(h["value"], h["live"]) for h in history] == [
        ("User lives in Lisbon", False),
        ("User moved to Porto", True),
    ]
    events = conn.execute(
        "SELECT action, actor FROM memory_events WHERE user_id = %s AND key = 'user/location' ORDER BY id",
        (alice.user_id,),
    ).fetchall()
    assert [(e["action"], e["actor"]) for e in events] == [("add", "consolidation"), ("supersede", "consolidation")]

    # Re-runs add nothing: the same period is a no-op, a later one finds every session consolidated.
    assert engram("jobs", "run", "consolidation", "--as-of", tomorrow.isoformat(), "--json")["changed"] == 0
    later = engram("jobs", "run", "consolidation", "--as-of", (today + timedelta(days=2)).isoformat(), "--json")
    assert later["changed"] == 0 and later.get("messages_read", 0) == 0
    assert active(conn, alice) == facts


def test_a_contradiction_under_another_key_is_judged_by_the_model_and_superseded(conn: Conn, fake_llm: FakeLLM) -> None:
    alice = make_scope(conn)
    old = store_memory(
        conn, alice, MemoryInput(key="user/company", value="User works at Acme Corp", namespace="entity/default"), "api"
    ).memory
    conversation(conn, alice, "s1", ["Big news: I joined Initech last week as their new designer."])
    extraction = {
        "preferences": [],
        "entities": [{"key": "user/employer", "value": "User works at Initech"}],
        "decisions": [],
        "styles": [{"key": "excited", "value": "Shares news enthusiastically"}],
        "artifacts": [],
    }
    fake_llm.script(FakeReply(text=json.dumps(extraction)), FakeReply(text='{"contradicted": [1]}'))
    settings = Settings(llm_provider="anthropic", anthropic_api_key="k", anthropic_base_url=fake_llm.anthropic_base_url)
    result = jobs.run("consolidation", settings)

    assert result.counts["contradictions_resolved"] == 1 and result.counts["facts_added"] == 1
    assert result.changed == 2
    facts = active(conn, alice)
    assert facts == {"user/employer": "User works at Initech"}  # styles are extraction's business
    new = conn.execute("SELECT id, supersedes_id, metadata FROM memories WHERE key = 'user/employer'").fetchone()
    assert new["supersedes_id"] == old["id"] and new["metadata"]["supersedes"] == old["id"]
    closed = conn.execute("SELECT valid_until FROM memories WHERE id = %s", (old["id"],)).fetchone()
    assert closed["valid_until"] is not None  # kept as history
    event = conn.execute(
        "SELECT action, actor, details FROM memory_events WHERE memory_id = %s ORDER BY id DESC LIMIT 1", (old["id"],)
    ).fetchone()
    assert (event["action"], event["actor"], event["details"]["superseded_by"]) == (
        "supersede",
        "consolidation",
        new["id"],
    )
    purposes = conn.execute("SELECT purpose, count(*) AS n FROM llm_calls GROUP BY purpose").fetchall()
    assert {(p["purpose"], p["n"]) for p in purposes} == {("consolidation", 2)}
    judge = fake_llm.requests[1].body
    assert "User works at Acme Corp" in json.dumps(judge)

    # Nothing left to read: a later run calls no model and adds nothing.
    again = jobs.run("consolidation", settings, as_of=datetime.now(UTC) + timedelta(days=1))
    assert again.changed == 0 and len(fake_llm.requests) == 2


def test_a_new_session_queues_the_users_earlier_ones(conn: Conn) -> None:
    alice = make_scope(conn)
    old = conversation(conn, alice, "s1", ["I live in Lisbon."], hours_ago=0)
    assert sessions_to_queue(conn) == []
    conversation(conn, alice, "s2", ["Hello again"], hours_ago=0)
    assert sessions_to_queue(conn) == [old]


def test_jaccard_dedup_threshold() -> None:
    assert jaccard("Prefers green tea over coffee", "prefers green tea over coffee!") == 1.0
    assert jaccard("User lives in Lisbon", "User lives in Porto") < 0.75


def test_second_level_dedup_threshold_is_a_setting(conn: Conn) -> None:
    """A paraphrase sharing 5 of 8 words (0.625) is kept at the default 0.75 and a duplicate at 0.6; another
    fact of the same user is a duplicate at neither."""
    from shared.maintenance.consolidation import duplicate_of

    alice = make_scope(conn)
    stored = store_memory(
        conn,
        alice,
        MemoryInput(key="tea", value="Prefers green tea over coffee in the morning", namespace="tacit/preferences"),
        "api",
    ).memory
    paraphrase = MemoryInput(key="green-tea", value="Prefers green tea over coffee", namespace="tacit/preferences")
    other = MemoryInput(key="coffee", value="Prefers black coffee after lunch", namespace="tacit/preferences")
    default = Settings().consolidation_dedup_jaccard
    assert duplicate_of(conn, alice, paraphrase, default) is None
    assert duplicate_of(conn, alice, paraphrase, 0.6) == stored["id"]
    assert duplicate_of(conn, alice, other, 0.6) is None
    assert Settings(consolidation_dedup_jaccard=0.6).consolidation_dedup_jaccard == 0.6
