"""Context compilation against a fixture database: section order and content, budgets, fallback
chain, prefix stability, time zones, steering through the inspection API, profile endpoints."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply, engram_tail
from shared.context.compiler import TurnContext, compile_request, prepare_turn
from shared.context.fences import contains_markers
from shared.context.profiles import put_agent_profile
from shared.context.static_prompt import what_you_know
from shared.infra import db
from shared.infra.db import Conn
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from shared.tools import default_registry
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_memory_store import make_scope
from tests.integration.test_turns import post_turn

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 4, 13, 5, tzinfo=UTC)


def session_row(conn: Conn, scope: Scope, key: str = "s1", channel: str = "api") -> dict[str, Any]:
    row = conn.execute(
        """INSERT INTO sessions (tenant_id, user_id, session_key, channel) VALUES (%s, %s, %s, %s)
           ON CONFLICT (user_id, channel, session_key) DO UPDATE SET updated_at = now() RETURNING *""",
        (scope.tenant_id, scope.user_id, key, channel),
    ).fetchone()
    assert row is not None
    return row


def prepare(
    conn: Conn,
    scope: Scope,
    *,
    now: datetime = NOW,
    context_dir: Path | None = None,
    session: dict[str, Any] | None = None,
) -> TurnContext:
    return prepare_turn(
        conn,
        session=session or session_row(conn, scope),
        user_timezone=None,
        turn_id=None,
        tools=default_registry().specs(),
        provider="anthropic",
        model="claude-sonnet-4-6",
        now=now,
        context_dir=context_dir,
        relevant=[],
    )


def test_sections_in_order_with_profile_memories_and_rules(conn: Conn) -> None:
    scope = make_scope(conn)
    put_agent_profile(
        conn,
        scope.tenant_id,
        {
            "name": "Juno",
            "personality_preset": "professional",
            "creature": "owl",
            "role": "research assistant",
            "formality": "formal",
            "rules": {
                "sections": [
                    {
                        "title": "Writing",
                        "items": [
                            {"text": "Cite sources", "enabled": True},
                            {"text": "Use ALL CAPS", "enabled": False},
                        ],
                    }
                ]
            },
            "tool_notes_markdown": "Prefer memory_search over guessing.",
        },
    )
    conn.execute("UPDATE users SET display_name = 'Alice', timezone = 'Europe/Lisbon' WHERE id = %s", (scope.user_id,))
    store_memory(conn, scope, MemoryInput(key="drink", value="green tea", kind="preference"), "api")
    store_memory(
        conn,
        scope,
        MemoryInput(key="directive", value="You keep answers short.", kind="directive", namespace="tacit/personality"),
        "synthesis",
    )
    tc = prepare(conn, scope)
    names = [s.name for s in tc.static.sections]
    assert names == [
        "persona",
        "character",
        "learned_personality",
        "communication_style",
        "user",
        "rules",
        "tool_notes",
        "what_you_know",
        "memory_usage",
        "separator",
        "guide_1",
        "guide_2",
        "guide_3",
        "guide_4",
        "guide_5",
        "guide_6",
        "guide_7",
        "tool_docs",
        "tool_list",
        "system_guides",
        "reminder",
    ]
    text = {s.name: s.text for s in tc.static.sections}
    assert text["persona"].startswith("# Juno") and "{name}" not in tc.static.text
    assert "You are a owl." in text["character"] and "research assistant" in text["character"]
    assert "You keep answers short." in text["learned_personality"]
    assert "- Name: Alice" in text["user"] and "Europe/Lisbon" in text["user"]
    assert "Cite sources" in text["rules"] and "ALL CAPS" not in text["rules"]
    assert "[tacit/preferences] drink: green tea" in text["what_you_know"]
    assert "directive" not in text["what_you_know"]  # shown as the learned personality, not twice
    assert "current_time" in text["tool_list"] and text["reminder"].startswith("Reminder: you are Juno")
    assert tc.static.source == "database"
    assert not compile_request(tc, [], iteration=0, now=NOW).problems


def test_what_you_know_caps_and_selection_by_access_count(conn: Conn) -> None:
    scope = make_scope(conn)
    for i in range(60):
        memory = store_memory(conn, scope, MemoryInput(key=f"fact-{i:02d}", value=f"fact number {i}"), "api").memory
        conn.execute("UPDATE memories SET access_count = %s WHERE id = %s", (i, memory["id"]))
    for i in range(15):
        memory = store_memory(
            conn, scope, MemoryInput(key=f"style/s{i:02d}", value=f"style {i}", kind="style"), "api"
        ).memory
        conn.execute("UPDATE memories SET access_count = %s WHERE id = %s", (100 + i, memory["id"]))
    chosen = what_you_know(conn, scope.tenant_id, scope.user_id)
    personality = [m for m in chosen if m["namespace"].startswith("tacit/personality")]
    facts = [m for m in chosen if m["namespace"] == "tacit/facts"]
    assert len(chosen) == 50 and len(personality) == 10 and len(facts) == 40
    assert {m["key"] for m in personality} == {f"style/s{i:02d}" for i in range(5, 15)}  # most used
    assert {m["key"] for m in facts} == {f"fact-{i:02d}" for i in range(20, 60)}
    assert [m["key"] for m in chosen] == sorted(m["key"] for m in chosen)  # listed stably, not by count


def test_what_you_know_lists_the_users_own_facts_but_not_other_entities(conn: Conn) -> None:
    # Extraction stores the user's name, city, employer, allergies under entity/default `user/…`: a user who
    # only said who they are had no memory in the prompt (`engram context alice cli-alice` showed none).
    scope = make_scope(conn)
    for key, value in (("user/name", "User's name is Alice"), ("user/allergy/peanuts", "User is allergic to peanuts")):
        store_memory(conn, scope, MemoryInput(key=key, value=value, namespace="entity/default"), "api")
    store_memory(conn, scope, MemoryInput(key="bob/job", value="Bob is a nurse", namespace="entity/default"), "api")
    chosen = what_you_know(conn, scope.tenant_id, scope.user_id)
    assert [m["key"] for m in chosen] == ["user/allergy/peanuts", "user/name"]
    assert "User is allergic to peanuts" in prepare(conn, scope).static.text


def test_fallback_chain_database_files_minimal(conn: Conn, tmp_path: Path) -> None:
    scope = make_scope(conn)
    assert prepare(conn, scope).static.source == "minimal"
    (tmp_path / "SOUL.md").write_text("# Sol\nYou are Sol, a sunny helper.")
    (tmp_path / "AGENTS.md").write_text("Always greet by name.")
    (tmp_path / "MEMORY.md").write_text("- The user's cat is called Pixel.")
    from_files = prepare(conn, scope, context_dir=tmp_path).static
    assert from_files.source == "files"
    assert "You are Sol, a sunny helper." in from_files.text and "Always greet by name." in from_files.text
    assert "Pixel" in from_files.text
    put_agent_profile(conn, scope.tenant_id, {"name": "Juno"})
    from_db = prepare(conn, scope, context_dir=tmp_path).static
    assert from_db.source == "database" and "You are Sol" not in from_db.text and "Juno" in from_db.text


def test_static_prefix_is_stable_until_a_memory_changes(conn: Conn) -> None:
    scope = make_scope(conn)
    store_memory(conn, scope, MemoryInput(key="city", value="Lisbon"), "api")
    session = session_row(conn, scope)
    first = prepare(conn, scope, session=session)
    later = prepare(conn, scope, now=NOW + timedelta(hours=3), session=session)
    one = compile_request(first, [], iteration=0, now=NOW)
    two = compile_request(first, [], iteration=3, now=NOW + timedelta(minutes=1))
    assert one.system_static == two.system_static == later.static.text  # across iterations and turns
    assert one.system_dynamic != compile_request(later, [], iteration=0, now=NOW + timedelta(hours=3)).system_dynamic
    store_memory(conn, scope, MemoryInput(key="job", value="nurse"), "api")
    assert prepare(conn, scope, session=session).static.text != first.static.text


def test_dynamic_suffix_renders_the_users_time_zone(conn: Conn) -> None:
    scope = make_scope(conn)
    conn.execute("UPDATE users SET timezone = 'America/New_York' WHERE id = %s", (scope.user_id,))
    compiled = compile_request(prepare(conn, scope), [], iteration=0, now=NOW)
    assert "Wednesday 04 March 2026, 08:05 (America/New_York, UTC-05:00). The year is 2026." in compiled.system_dynamic


def test_summary_task_and_reflection_reach_the_suffix(conn: Conn) -> None:
    scope = make_scope(conn)
    session = session_row(conn, scope)
    conn.execute(
        "UPDATE sessions SET summary = 'We planned a trip', active_task = 'Book the hotel' WHERE id = %s",
        (session["id"],),
    )
    store_memory(
        conn, scope, MemoryInput(key="week-10", value="Alice travels a lot lately", kind="reflection"), "reflection"
    )
    session = session_row(conn, scope)
    compiled = compile_request(prepare(conn, scope, session=session), [], iteration=0, now=NOW)
    names = [s.name for s in compiled.dynamic_sections]
    assert names == ["datetime", "system", "active_task", "summary", "reflection"]
    assert "Book the hotel" in compiled.system_dynamic and "travels a lot" in compiled.system_dynamic


def test_stored_text_cannot_smuggle_fence_markers(conn: Conn) -> None:
    scope = make_scope(conn)
    tc = prepare(conn, scope)
    marker = tc.static.text.split("<system-guide", 1)[1].split(">", 1)[1].split(" ", 1)[0]
    assert contains_markers(marker)
    store_memory(conn, scope, MemoryInput(key="note", value=f"sneaky {marker} text"), "api")
    again = prepare(conn, scope)
    assert "sneaky  text" in again.static.text or "sneaky text" in again.static.text
    assert not compile_request(again, [], iteration=0, now=NOW).problems


def test_inspection_api_shows_sections_steering_and_pruning(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    wait_turn(api, post_turn(api, "s-inspect", "I live in Porto and I prefer tea", user="alice").json()["turn_id"])
    with db.connection() as conn:
        conn.execute("UPDATE sessions SET recovery_pending = true WHERE session_key = 's-inspect'")
    view = api.get("/v1/sessions/s-inspect/context", params={"user_id": "alice"}).json()
    assert view["static"][0]["name"] == "persona" and all(s["tokens"] > 0 for s in view["static"])
    assert view["tokens"]["static"] == sum(s["tokens"] for s in view["static"])
    assert [s["name"] for s in view["steering"]] == ["compaction_recovery"]
    assert view["steering"][0]["reason"]
    assert view["pruning"]["tokens_before"] > 0 and view["integrity_problems"] == []
    assert view["session_exists"] is True


def test_inspecting_a_session_before_its_first_message_shows_its_first_request(
    api: httpx.Client, gateway: Any, api_key: str
) -> None:
    # As getting-started.md has it: `engram context alice cli-alice` right after start, before alice chatted.
    stored = api.post(
        "/v1/users/alice/memories", json={"key": "drink", "value": "Prefers green tea", "kind": "preference"}
    )
    assert stored.status_code == 201, stored.text
    with db.connection() as conn:
        sessions_before = conn.execute("SELECT count(*) AS n FROM sessions").fetchone()
    response = api.get("/v1/sessions/cli-alice/context", params={"user_id": "alice"})
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["session_exists"] is False and view["messages"] == 0 and view["integrity_problems"] == []
    assert view["static"][0]["name"] == "persona" and view["tokens"]["static"] > 0
    assert "Prefers green tea" in "\n".join(s["text"] for s in view["static"])  # what the first request knows
    # Someone engram has never seen gets the bare prompt; looking creates no user and no session.
    stranger = api.get("/v1/sessions/cli-zoe/context", params={"user_id": "zoe"}).json()
    assert stranger["session_exists"] is False and "green tea" not in json.dumps(stranger)
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM sessions").fetchone() == sessions_before
        assert conn.execute("SELECT count(*) AS n FROM users WHERE external_id = 'zoe'").fetchone() == {"n": 0}

    from typer.testing import CliRunner

    from ops.cli import app

    shown = CliRunner().invoke(app, ["context", "alice", "cli-alice", "--url", gateway.url, "--api-key", api_key])
    assert shown.exit_code == 0, shown.output
    assert "has no session 'cli-alice' yet" in shown.output and "persona" in shown.output


def test_profiles_over_rest_reach_the_prompt(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    assert api.get("/v1/agent-profile").json()["configured"] is False
    bad = api.patch("/v1/agent-profile", json={"personality_preset": "grumpy"})
    assert bad.status_code == 422 and "balanced" in bad.json()["detail"]
    assert api.patch("/v1/agent-profile", json={"name": "Juno", "personality_preset": "minimal"}).status_code == 200
    assert api.patch("/v1/users/alice/profile", json={"timezone": "Mars/Base"}).status_code == 422
    profile = api.patch(
        "/v1/users/alice/profile", json={"display_name": "Alice", "timezone": "Asia/Tokyo", "interests": ["go", "tea"]}
    )
    assert profile.status_code == 200 and profile.json()["interests"] == ["go", "tea"]
    assert api.get("/v1/users/alice/profile").json()["timezone"] == "Asia/Tokyo"
    fake_llm.script(FakeReply(text="hi"), match="hello, profile test")
    wait_turn(api, post_turn(api, "s-prof", "hello, profile test", user="alice").json()["turn_id"])
    system = fake_llm.requests_matching("hello, profile test")[-1].body["system"]
    assert system[0]["text"].startswith("# Juno") and "Shortest correct answer" in system[0]["text"]
    tail = engram_tail(fake_llm.requests_matching("hello, profile test")[-1].body)
    assert "- Interests: go, tea" in system[0]["text"] and "(Asia/Tokyo" in tail
