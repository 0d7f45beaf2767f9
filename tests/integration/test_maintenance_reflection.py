"""Weekly reflection (offline rules and a fake model), the per-tenant token budget, and deletion
following through to everything derived from a memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.embeddings import embed_texts
from shared.infra import db
from shared.infra.config import Settings, get_settings
from shared.maintenance import jobs
from shared.maintenance.runs import UserRef
from shared.memory.indexing import index_memory
from shared.memory.memory_input import MemoryInput
from shared.memory.search import SearchOptions, search
from shared.memory.service import process_embedder
from shared.memory.store import Scope, store_memory
from shared.turns.accept import ensure_user
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

FACTS = (
    ("theremin", "Caroline Smith taught the user to play the theremin"),
    ("city", "Moved to Lisbon in October"),
    ("tea", "Prefers green tea over coffee"),
)


def engram(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def scope_of(user: str, tenant: str = "tenant-a") -> Scope:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT u.id, u.tenant_id FROM users u JOIN tenants t ON t.id = u.tenant_id "
            "WHERE t.name = %s AND u.external_id = %s",
            (tenant, user),
        ).fetchone()
    assert row is not None
    return Scope(row["tenant_id"], row["id"])


def add_facts(api: httpx.Client, user: str, facts: tuple[tuple[str, str], ...] = FACTS) -> list[int]:
    return [
        api.post(f"/v1/users/{user}/memories", json={"key": key, "value": value}).json()["memory"]["id"]
        for key, value in facts
    ]


def test_two_reflection_runs_in_one_period_leave_one_reflection_shown_in_the_context(api: httpx.Client) -> None:
    ids = add_facts(api, "alice")
    add_facts(api, "bob", FACTS[:2])  # two facts: too few
    first = engram("jobs", "run", "reflection", "--json")
    second = engram("jobs", "run", "reflection", "--json")
    assert first["changed"] == 1 and first["reflections_written"] == 1 and first["skipped_too_few_facts"] == 1
    assert second["changed"] == 0 and second["already_ran"] is True and second["period"] == first["period"]

    reflections = api.get("/v1/users/alice/memories", params={"kind": "reflection"}).json()
    assert len(reflections) == 1
    reflection = reflections[0]
    assert reflection["tags"] == ["weekly"] and reflection["decay_rate"] == 0
    assert sorted(reflection["metadata"]["source_memory_ids"]) == sorted(ids)
    assert "offline mode" in reflection["value"] and "theremin" in reflection["value"]
    assert api.get("/v1/users/bob/memories", params={"kind": "reflection"}).json() == []

    # A run of its own (one user) a day later: the 6-day rule holds it back.
    alice = scope_of("alice")
    later = jobs.run(
        "reflection",
        get_settings(),
        as_of=datetime.now(UTC) + timedelta(days=1),
        user=UserRef(alice.tenant_id, alice.user_id),
    )
    assert later.changed == 0 and later.counts == {"skipped_recent_reflection": 1}
    assert len(api.get("/v1/users/alice/memories", params={"kind": "reflection"}).json()) == 1

    view = api.get("/v1/sessions/s1/context", params={"user_id": "alice"}).json()
    sections = {section["name"]: section for section in view["dynamic"]}
    assert "theremin" in sections["reflection"]["text"]


def anthropic_settings(fake: FakeLLM, budget: int) -> Settings:
    return Settings(
        llm_provider="anthropic",
        anthropic_api_key="test-key",
        anthropic_base_url=fake.anthropic_base_url,
        maintenance_daily_token_budget=budget,
    )


def test_a_tenant_over_its_background_budget_is_stopped_and_the_run_says_why(
    clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    with db.connection() as conn:
        scopes = {}
        for tenant in ("spender", "thrifty"):
            tenant_id = conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING id", (tenant,)).fetchone()["id"]
            scope = Scope(tenant_id, ensure_user(conn, tenant_id, "carol"))
            for key, value in FACTS:
                store_memory(conn, scope, MemoryInput(key=key, value=value), "api")
            scopes[tenant] = scope
        conn.execute(
            """INSERT INTO llm_calls (tenant_id, purpose, provider, model, input_tokens, output_tokens)
               VALUES (%s, 'consolidation', 'anthropic', 'claude-haiku-4-5', 900, 200)""",
            (scopes["spender"].tenant_id,),
        )
    fake_llm.script(FakeReply(text="This week the user took up the theremin and moved to Lisbon."))
    result = jobs.run("reflection", anthropic_settings(fake_llm, budget=1000))

    assert result.status == "done" and result.changed == 1
    assert result.counts["tenants_over_budget"] == 1 and result.counts["reflections_written"] == 1
    stopped = result.details["stopped_tenants"]
    assert (
        list(stopped) == [str(scopes["spender"].tenant_id)]
        and "1,100 of 1,000 tokens" in stopped[str(scopes["spender"].tenant_id)]
    )
    assert len(fake_llm.requests) == 1  # only the tenant under budget called the model
    with db.connection() as conn:
        written = conn.execute(
            "SELECT tenant_id, value FROM memories WHERE kind = 'reflection' AND valid_until IS NULL"
        ).fetchall()
        assert [(r["tenant_id"], r["value"]) for r in written] == [
            (scopes["thrifty"].tenant_id, "This week the user took up the theremin and moved to Lisbon.")
        ]
        ledger = conn.execute("SELECT tenant_id FROM llm_calls WHERE purpose = 'reflection'").fetchall()
        assert [r["tenant_id"] for r in ledger] == [scopes["thrifty"].tenant_id]
        run = conn.execute("SELECT details FROM job_runs WHERE job = 'reflection'").fetchone()
        assert run["details"]["stopped_tenants"] == stopped


def test_a_deleted_fact_is_found_by_no_search_leg_and_shown_in_no_prompt_section(api: httpx.Client) -> None:
    ids = add_facts(api, "alice")
    theremin = ids[0]
    alice = scope_of("alice")
    # The model the workers use too: a worker already running may embed these facts (the gateway asks for it)
    # before this test does, and a second model would then meet a space that is not its own.
    embedder = process_embedder()
    with db.connection() as conn:
        for memory_id in ids:
            index_memory(conn, embedder, memory_id)
        conn.execute("UPDATE memories SET access_count = 5 WHERE id = %s", (theremin,))  # in "What You Know"
    jobs.run("reflection", get_settings())
    query = "Who taught me the theremin, Caroline Smith?"

    def found_by(leg: str) -> bool:
        with db.connection() as conn:
            vector = embed_texts(conn, embedder, [query], 8)[0] if leg == "vector" else None
            options = SearchOptions(legs=(leg,), relative_floor=0.0)  # type: ignore[arg-type]
            results = search(conn, alice, query, query_vector=vector, options=options)
        return any("theremin" in r.value for r in results)

    def prompt_text() -> str:
        view = api.get("/v1/sessions/s1/context", params={"user_id": "alice", "full": True}).json()
        return json.dumps(view)

    assert all(found_by(leg) for leg in ("text", "vector", "entity"))
    assert "theremin" in prompt_text()
    with db.connection() as conn:
        hashes = [
            r["content_hash"]
            for r in conn.execute("SELECT content_hash FROM memory_chunks WHERE memory_id = %s", (theremin,))
        ]
        assert conn.execute(
            "SELECT count(*) AS n FROM embedding_cache WHERE content_hash = ANY(%s)", (hashes,)
        ).fetchone()["n"]

    assert api.delete(f"/v1/users/alice/memories/{theremin}").status_code == 204

    assert not any(found_by(leg) for leg in ("text", "vector", "entity"))
    assert "theremin" not in prompt_text() and "Caroline" not in prompt_text()
    with db.connection() as conn:
        assert (
            conn.execute("SELECT count(*) AS n FROM memory_chunks WHERE memory_id = %s", (theremin,)).fetchone()["n"]
            == 0
        )
        assert (
            conn.execute(
                "SELECT count(*) AS n FROM embedding_cache WHERE content_hash = ANY(%s)", (hashes,)
            ).fetchone()["n"]
            == 0
        )
        assert (
            conn.execute(
                "SELECT count(*) AS n FROM entities WHERE user_id = %s AND normalized_name LIKE 'caroline%%'",
                (alice.user_id,),
            ).fetchone()["n"]
            == 0
        )
        reflection = conn.execute(
            "SELECT id, valid_until, metadata FROM memories WHERE user_id = %s AND kind = 'reflection'",
            (alice.user_id,),
        ).fetchone()
        assert reflection["valid_until"] is not None and theremin not in reflection["metadata"]["source_memory_ids"]
        events = conn.execute(
            "SELECT action, actor FROM memory_events WHERE memory_id = %s ORDER BY id", (reflection["id"],)
        ).fetchall()
        assert [(e["action"], e["actor"]) for e in events][-1] == ("delete", "api")
        # The other facts keep their chunks.
        assert (
            conn.execute("SELECT count(*) AS n FROM memory_chunks WHERE memory_id = ANY(%s)", (ids[1:],)).fetchone()[
                "n"
            ]
            == 2
        )
