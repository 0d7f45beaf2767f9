"""Whose facts extraction writes, with real Postgres (and, for the ingest path, real Celery workers and the
offline rules extractor): a two-person conversation gives each person's facts under their own name and key,
a later batch with only one of them still names them, and one person (an import, or engram's own chat turns
under the profile's display name) stays "User"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.infra import db
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.memory.rows import Scope
from shared.pipeline.jobs import extract_session
from shared.pipeline.memory_prompt import SEVERAL_SPEAKERS
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_ingest_pipeline import configured, wait_idle
from tests.integration.test_memory_store import make_scope, make_session
from tests.integration.test_pipeline import PIPELINE_ENV
from tests.integration.test_turns import post_turn
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

OFFLINE = Settings(llm_provider="offline")


def _memories(conn: Conn, user_id: int | None = None) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        """SELECT m.key, m.value, m.valid_until FROM memories m JOIN users u ON u.id = m.user_id
           WHERE %(user)s::bigint IS NULL OR m.user_id = %(user)s ORDER BY m.id""",
        {"user": user_id},
    ).fetchall()
    return {row["key"]: row for row in rows}


def _write(conn: Conn, scope: Scope, session_id: int, lines: list[tuple[str | None, str]], *, mined: bool) -> None:
    for name, text in lines:
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, name, extracted_at)
               VALUES (%s, %s, %s, 'user', %s, %s, CASE WHEN %s THEN now() END)""",
            (scope.tenant_id, scope.user_id, session_id, text, name, mined),
        )


@pytest.fixture
def two_sessions(no_shared_workers: None, clean_state: TestServices) -> tuple[int, int, Scope, Scope]:
    """A two-person session whose first batch (both people) is mined and whose next holds only Melanie's lines,
    and another user's one-person session with a named speaker."""
    with db.connection() as conn:
        pair, solo = make_scope(conn), make_scope(conn, "bob")
        talk = make_session(conn, pair, "talk")
        _write(conn, pair, talk, [("Caroline", "I moved to Porto."), ("Melanie", "Nice, I like Porto.")], mined=True)
        _write(
            conn, pair, talk, [("Melanie", "I live in Boston."), ("Melanie", "I have a peanut allergy.")], mined=False
        )
        alone = make_session(conn, solo, "alone")
        _write(conn, solo, alone, [("Dana", "I live in Oslo."), ("Dana", "I have a peanut allergy.")], mined=False)
    return talk, alone, pair, solo


def test_a_later_batch_with_one_of_two_people_still_names_them(two_sessions: tuple[int, int, Scope, Scope]) -> None:
    talk, alone, pair, solo = two_sessions
    assert extract_session(talk, OFFLINE).skipped is None
    assert extract_session(alone, OFFLINE).skipped is None
    with db.connection() as conn:
        named, users = _memories(conn, pair.user_id), _memories(conn, solo.user_id)
    assert {k: m["value"] for k, m in named.items()} == {
        "person/melanie/location": "Melanie lives in Boston",
        "person/melanie/allergy/peanut": "Melanie is allergic to peanut",
    }
    # One person, even with a name, is the user.
    assert {k: m["value"] for k, m in users.items()} == {
        "user/location": "User lives in Oslo",
        "user/allergy/peanut": "User is allergic to peanut",
    }


def test_the_model_is_told_the_session_has_several_people(
    two_sessions: tuple[int, int, Scope, Scope], fake_llm: FakeLLM
) -> None:
    talk, alone, _pair, _solo = two_sessions
    fake_llm.default = lambda _body: FakeReply(text=json.dumps({"entities": []}))
    settings = Settings(
        llm_provider="anthropic",
        anthropic_api_key="test-key",  # type: ignore[arg-type]
        anthropic_base_url=fake_llm.anthropic_base_url,
        llm_max_attempts=1,
    )
    extract_session(talk, settings)
    extract_session(alone, settings)
    first, second = (r.body for r in fake_llm.requests if "memory worker" in json.dumps(r.body.get("system")))
    several, one = json.dumps(first["messages"]), json.dumps(second["messages"])
    assert "Melanie" in several and "Caroline" not in several  # the batch holds only Melanie's lines
    assert SEVERAL_SPEAKERS in several and SEVERAL_SPEAKERS not in one
    assert first["system"] == second["system"]  # the cached prefix


# ------------------------------------------------------------------------------------ the whole stack


@pytest.fixture
def offline_stack(celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM) -> Iterator[CeleryStack]:
    """A new user's setup: the offline model (rules extraction), automatic memory."""
    with configured(celery_stack, "offline", {**PIPELINE_ENV, "ENGRAM_LLM_PROVIDER": "offline"}) as stack:
        yield stack


def _ingest(api: httpx.Client, session: str, *lines: tuple[str | None, str]) -> None:
    messages = [{"role": "user", "content": text, **({"name": name} if name else {})} for name, text in lines]
    response = api.post(f"/v1/users/alice/sessions/{session}/messages", json={"messages": messages})
    assert response.status_code == 202, response.text


def test_a_two_person_ingest_names_each_person_and_one_person_stays_the_user(
    api: httpx.Client, offline_stack: CeleryStack
) -> None:
    _ingest(
        api,
        "pair",
        ("Caroline", "My cat Luna is allergic to fish, so no tuna treats for her."),
        ("Caroline", "I have a peanut allergy, so I always check labels."),
        ("Melanie", "I have a peanut allergy too! I live in Boston."),
        ("Melanie", "I like hiking."),
        ("Caroline", "I like hiking."),
    )
    wait_idle(api, "pair")
    # A later batch of the same conversation with only Caroline's lines.
    _ingest(api, "pair", ("Caroline", "I moved to Porto."))
    wait_idle(api, "pair")
    with db.connection() as conn:
        found = _memories(conn)
    assert {k: m["value"] for k, m in found.items()} == {
        "person/caroline/pet/luna": "Caroline's cat is Luna",
        "person/caroline/allergy/peanut": "Caroline is allergic to peanut",
        "person/melanie/allergy/peanut": "Melanie is allergic to peanut",
        "person/melanie/location": "Melanie lives in Boston",
        "person/melanie/hiking": "Melanie likes hiking",
        "person/caroline/hiking": "Caroline likes hiking",
        "person/caroline/location": "Caroline moved to Porto",
    }
    assert all(m["valid_until"] is None for m in found.values())  # nobody's fact superseded another's

    # One person with a name, and engram's own chat turns under the profile's display name: the user.
    _ingest(api, "solo", ("Dana", "I am vegan."))
    wait_idle(api, "solo")
    assert api.patch("/v1/users/alice/profile", json={"display_name": "Alice"}).status_code == 200
    turn = post_turn(api, "chat", "I work at Acme.").json()
    assert wait_turn(api, turn["turn_id"])["status"] == "done"
    wait_idle(api, "chat")
    with db.connection() as conn:
        names = conn.execute(
            "SELECT DISTINCT name FROM session_messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE s.session_key = 'chat' AND m.role = 'user'"
        ).fetchall()
        mine = {k: m["value"] for k, m in _memories(conn).items() if not k.startswith("person/")}
    assert [row["name"] for row in names] == ["Alice"]
    assert mine == {"diet": "User is vegan", "user/employer": "User works at Acme"}
