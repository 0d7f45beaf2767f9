"""Entity enrichment: the model finds the entities regex missed and merges aliases; offline it is skipped
with the reason recorded and nothing stamped."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import ensure_tenant
from shared.infra.config import Settings, get_settings
from shared.infra.db import Conn
from shared.maintenance import jobs
from shared.maintenance.enrichment import parse_entities
from shared.memory.entities import entity_info
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from shared.turns.accept import ensure_user

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(autocommit_conn: Conn) -> Conn:
    return autocommit_conn


def test_the_model_links_missed_entities_and_merges_aliases(conn: Conn, fake_llm: FakeLLM) -> None:
    tenant_id = ensure_tenant(conn, "default")
    alice = Scope(tenant_id, ensure_user(conn, tenant_id, "alice"))
    nickname = store_memory(conn, alice, MemoryInput(key="bob", value="Bob Builder fixed the roof"), "api").memory
    lowercase = store_memory(
        conn, alice, MemoryInput(key="climbing", value="goes climbing with robert smith from initech"), "api"
    ).memory
    assert entity_info(conn, tenant_id, alice.user_id, "robert smith") is None  # regex needs capitals
    fake_llm.script(
        FakeReply(
            text=json.dumps(
                {
                    "1": [{"name": "Bob Builder", "aliases": []}],
                    "2": [
                        {"name": "Robert Smith", "aliases": ["Bob Builder", "Rob"]},
                        {"name": "Initech", "aliases": []},
                    ],
                }
            )
        )
    )
    settings = Settings(llm_provider="anthropic", anthropic_api_key="k", anthropic_base_url=fake_llm.anthropic_base_url)
    result = jobs.run("enrichment", settings)

    assert result.counts["memories_enriched"] == 2 and result.counts["entities_merged"] == 1
    robert = entity_info(conn, tenant_id, alice.user_id, "rob")
    assert robert is not None and robert["canonical_name"] == "Robert Smith"
    assert {"bob builder", "rob"} <= set(robert["aliases"])
    assert {m["id"] for m in robert["memories"]} == {nickname["id"], lowercase["id"]}  # the merged entity's links moved
    assert entity_info(conn, tenant_id, alice.user_id, "initech") is not None
    stamped = conn.execute("SELECT count(*) AS n FROM memories WHERE enriched_at IS NOT NULL").fetchone()
    assert stamped["n"] == 2
    assert conn.execute("SELECT purpose FROM llm_calls").fetchall() == [{"purpose": "enrichment"}]

    again = jobs.run("enrichment", settings, as_of=datetime.now(UTC) + timedelta(days=1))
    assert again.counts == {} and len(fake_llm.requests) == 1  # nothing left: no model call


def test_offline_enrichment_is_skipped_with_the_reason_and_stamps_nothing(conn: Conn) -> None:
    tenant_id = ensure_tenant(conn, "default")
    alice = Scope(tenant_id, ensure_user(conn, tenant_id, "alice"))
    store_memory(conn, alice, MemoryInput(key="note", value="goes climbing with robert"), "api")
    result = jobs.run("enrichment", get_settings())
    assert result.status == "done" and result.counts == {"skipped_no_extractor": 1}
    assert "spaCy" in result.details["skipped"]
    assert conn.execute("SELECT count(*) AS n FROM memories WHERE enriched_at IS NOT NULL").fetchone()["n"] == 0
    run = conn.execute("SELECT details FROM job_runs WHERE job = 'enrichment'").fetchone()
    assert "no accurate entity extractor" in run["details"]["skipped"]


def test_model_answers_are_read_defensively() -> None:
    assert parse_entities('Sure! {"1": [{"name": "Ana", "aliases": ["Annie", 3]}], "x": [], "2": "no"}') == {
        1: [{"name": "Ana", "aliases": ["Annie"]}]
    }
    assert parse_entities("no json here") == {}
