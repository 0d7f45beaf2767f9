"""What a turn reads before its model call goes to Postgres in a few round trips, not one per read (issue 13
§2: the worker's time beyond the model). Each wait for the server is a trip through the scheduler for the
worker and a Postgres backend; a turn's context used to be fifteen of them."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from shared.access.quotas import set_budget
from shared.agent import TurnDeps
from shared.agent.turn_runner import read_turn_context
from shared.context.profiles import patch_user_profile, put_agent_profile
from shared.embeddings import embed_texts, ensure_embedding_space
from shared.embeddings.providers import LocalEmbedder
from shared.infra import db
from shared.infra.db import Conn
from shared.infra.redis_client import get_redis
from shared.memory.indexing import index_memory
from shared.memory.memory_input import MemoryInput
from shared.memory.search import search
from shared.memory.service import process_embedder
from shared.memory.store import Scope, store_memory
from shared.tools import default_registry
from shared.turns.accept import submit_turn
from tests.integration.test_context import session_row
from tests.integration.test_memory_store import make_scope
from tests.integration.test_prompt_cache import prepare
from tests.integration.test_search import FACTS, add, seeded
from tests.support.wire import wire_messages

pytestmark = pytest.mark.integration


def waits(sent: Counter[str]) -> int:
    """Round trips: each Sync (or simple Query) waits for the server; a statement psycopg prepares on its fifth
    execution adds one of its own, which is not the code's doing."""
    return sent["Sync"] + sent["Query"] - sent["Prepare"]


def _remember(conn: Conn, scope: Scope, key: str, value: str, actor: str = "api", **kw: Any) -> None:
    store_memory(conn, scope, MemoryInput(key=key, value=value, **kw), actor)


def test_the_prompts_reads_are_one_round_trip_and_find_everything(conn: Conn) -> None:
    scope = make_scope(conn)
    # Something for every read: the agent profile and its preset's prompt, the user's profile, the learned
    # directive, "What You Know", a reflection, the budget, the session's messages and its epoch.
    put_agent_profile(conn, scope.tenant_id, {"name": "Juno", "personality_preset": "professional"})
    profile = {"display_name": "Alice Liddell", "timezone": "Europe/Paris"}
    patch_user_profile(conn, scope.tenant_id, scope.user_id, profile)
    directive = {"kind": "directive", "namespace": "tacit/personality"}
    _remember(conn, scope, "directive", "Answer in short sentences.", "synthesis", **directive)
    _remember(conn, scope, "coffee", "Takes her coffee black", namespace="tacit/preferences")
    _remember(conn, scope, "week-10", "Alice travels a lot lately", kind="reflection")
    set_budget(conn, scope.tenant_id, 1_000_000)
    submitted = submit_turn(
        conn, tenant_id=scope.tenant_id, session_key="s1", user_external_id="alice", text="Hello, Juno."
    )
    session = session_row(conn, scope)
    first = prepare(conn, session, turn_id=submitted.turn["turn_id"])
    assert first.knowledge is not None and first.knowledge.rebuilt == "first_turn"
    # A memory written after the epoch was stored: it shows in the tail, not in the frozen prefix.
    _remember(conn, scope, "tea", "Drinks green tea in the afternoon", namespace="tacit/preferences")

    with wire_messages(conn) as sent:
        context = prepare(conn, session, turn_id=submitted.turn["turn_id"])

    assert waits(sent) == 1, sent
    static = context.static.text
    assert context.static.source == "database" and context.agent_name == "Juno"
    assert "precise and dependable" in static  # the preset's prompt, read in the same row as the profile
    assert "Answer in short sentences." in static and "Alice Liddell" in static
    assert context.dynamic.timezone == "Europe/Paris"  # the user's profile, not the session's default
    assert "Takes her coffee black" in static and "green tea" not in static
    assert context.knowledge is not None and context.knowledge.rebuilt is None  # the stored epoch was kept
    assert [m["key"] for m in context.knowledge.since] == ["tea"]
    assert context.dynamic.reflection == "Alice travels a lot lately"
    assert context.steering.budget_used_ratio == 0.0
    assert context.steering.recent_user_messages == ("Hello, Juno.",)
    assert static == first.static.text  # the same prompt as the reads one by one built at the first turn


class _Provider:
    """Only the name is read before the model is called."""

    name = "anthropic"


def test_a_turns_context_is_three_round_trips(conn: Conn) -> None:
    # The embedding space as a running system has it: committed. The suite has every search check it again
    # (ENGRAM_EMBEDDING_SPACE_CHECK_SECONDS=0): that check uses the row read with the others.
    with db.connection() as setup:
        ensure_embedding_space(setup, process_embedder())
    ensure_embedding_space(conn, process_embedder())
    scope = make_scope(conn)
    # A fact from another session, embedded by the process's embedder: the relevant-memory search finds it.
    other = submit_turn(conn, tenant_id=scope.tenant_id, session_key="s0", user_external_id="alice", text="Hi")
    memory = store_memory(
        conn,
        scope,
        MemoryInput(key="pet", value=FACTS["pet"], source_session_id=other.turn["session_id"]),
        "api",
    ).memory
    index_memory(conn, process_embedder(), int(memory["id"]))
    deps = TurnDeps(provider=_Provider(), model="claude-sonnet-4-6", tools=default_registry(), redis=get_redis())  # type: ignore[arg-type]
    first = _claimed(conn, scope, "Hello, I am Alice.")
    read_turn_context(conn, first, deps)  # the session's first turn also stores its "What You Know" epoch
    second = _claimed(conn, scope, "Which dog does she own?")

    with wire_messages(conn) as sent:
        history, context = read_turn_context(conn, second, deps)

    # The reads together (the embedding space among them); the search with its settings; the follow-up of its best
    # hit (shared/memory/follow_up.py), which needs that hit's words first.
    assert waits(sent) == 3, sent
    assert [m.content for m in history] == ["Hello, I am Alice.", "Which dog does she own?"]
    assert [m["value"] for m in context.dynamic.relevant] == [FACTS["pet"]]
    assert context.knowledge is not None and context.knowledge.rebuilt is None
    assert context.steering.recent_user_messages == ("Hello, I am Alice.", "Which dog does she own?")


def _claimed(conn: Conn, scope: Scope, text: str) -> dict[str, Any]:
    """A turn as the worker has it after claiming it (its row, the user's time zone)."""
    submitted = submit_turn(conn, tenant_id=scope.tenant_id, session_key="s1", user_external_id="alice", text=text)
    row = conn.execute(
        "SELECT t.*, u.timezone FROM turns t JOIN users u ON u.id = t.user_id WHERE t.id = %s",
        (submitted.turn["turn_id"],),
    ).fetchone()
    assert row is not None
    return row


def test_a_vector_search_sends_its_settings_with_the_statement(conn: Conn) -> None:
    embedder = LocalEmbedder()
    scope = seeded(conn, embedder)
    add(conn, scope, embedder, "hobby", "collects vintage fountain pens")
    question = "which dog does she own"
    vector = embed_texts(conn, embedder, [question], 16)[0]
    with wire_messages(conn) as sent:
        results = search(conn, scope, question, query_vector=vector)
    assert waits(sent) == 1, sent
    assert results[0].value == FACTS["pet"]
    # The settings applied to that statement: they are the transaction's now (set_config's local scope).
    row = conn.execute("SELECT current_setting('hnsw.iterative_scan') AS scan").fetchone()
    assert row == {"scan": "relaxed_order"}


def test_a_turn_recalls_what_was_said_in_another_conversation(conn: Conn) -> None:
    """engram's own turns get the transcript too: a message of an earlier conversation, by its own words, with
    its day, conversation and speaker, in the dynamic tail of a new conversation's turn (within the budget)."""
    scope = make_scope(conn)
    earlier = submit_turn(
        conn,
        tenant_id=scope.tenant_id,
        session_key="s0",
        user_external_id="alice",
        text="My sister Ines is getting married in Porto next June",
    )
    deps = TurnDeps(provider=_Provider(), model="claude-sonnet-4-6", tools=default_registry(), redis=get_redis())  # type: ignore[arg-type]
    turn = _claimed(conn, scope, "Where is Ines getting married?")
    _history, context = read_turn_context(conn, turn, deps)
    said = [m for m in context.dynamic.relevant if m["value"] == "My sister Ines is getting married in Porto next June"]
    assert said and said[0]["key"] == "user" and said[0]["namespace"].endswith(", conversation s0")
    assert earlier.turn["session_id"] != turn["session_id"]
    # Nothing from the turn's own conversation: its history is in the prompt already.
    assert all("Where is Ines" not in m["value"] for m in context.dynamic.relevant)
