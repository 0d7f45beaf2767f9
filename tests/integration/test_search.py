"""Hybrid search on real Postgres + pgvector with the real local embedding model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from pgvector import Vector

from shared.embeddings import embed_texts, ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import LocalEmbedder
from shared.infra.db import Conn
from shared.memory.indexing import index_memory
from shared.memory.memory_input import MemoryInput
from shared.memory.search import SearchFilters, SearchOptions, SearchResult, search
from shared.memory.store import Scope, store_memory
from tests.integration.test_memory_store import make_scope

pytestmark = pytest.mark.integration

FACTS = {
    "pet": "Alice has a golden retriever called Biscuit",
    "job": "works as a nurse at the city hospital night shift",
    "sport": "plays volleyball every Thursday evening",
    "food": "is allergic to peanuts",
    "trip": "visited Kyoto in April and loved the temples",
}


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def add(conn: Conn, scope: Scope, embedder: LocalEmbedder | None, key: str, value: str, **kw: object) -> int:
    memory_id = int(store_memory(conn, scope, MemoryInput(key=key, value=value, **kw), "api").memory["id"])  # type: ignore[arg-type]
    if embedder is not None:
        index_memory(conn, embedder, memory_id)
    return memory_id


def qvec(conn: Conn, embedder: LocalEmbedder, text: str) -> list[float]:
    return embed_texts(conn, embedder, [text], 16)[0]


def keys(results: list[SearchResult]) -> list[str]:
    return [r.key for r in results]


def seeded(conn: Conn, embedder: LocalEmbedder | None) -> Scope:
    scope = make_scope(conn)
    for key, value in FACTS.items():
        add(conn, scope, embedder, key, value)
    return scope


def test_full_text_uses_or_semantics_over_question_words(conn: Conn) -> None:
    scope = seeded(conn, None)
    # No memory contains every word of the question; OR semantics still finds the right one first.
    results = search(conn, scope, "What does Alice do on Thursday evenings?")
    assert keys(results)[0] == "sport"
    assert results[0].legs["text"]["rank"] == 1 and "vector" not in results[0].legs


def test_ilike_fallback_when_full_text_finds_nothing(conn: Conn) -> None:
    scope = make_scope(conn)
    add(conn, scope, None, "wifi", "router password is zx81-spectrum")
    results = search(conn, scope, "spectr")  # a fragment: no lexeme matches, a substring does
    assert keys(results) == ["wifi"] and "like" in results[0].legs and "text" not in results[0].legs


def test_vector_leg_finds_paraphrases(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = seeded(conn, embedder)
    results = search(conn, scope, "which dog does she own", query_vector=qvec(conn, embedder, "which dog does she own"))
    assert keys(results)[0] == "pet"
    assert results[0].legs["vector"]["rank"] == 1 and results[0].legs["vector"]["similarity"] > 0.3


def test_vector_only_fallback_and_legs_reported(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = seeded(conn, embedder)
    # Nothing lexical matches "canine companion"; only the vector leg can answer.
    question = "canine companion"
    results = search(
        conn, scope, question, query_vector=qvec(conn, embedder, question), options=SearchOptions(relative_floor=0.0)
    )
    assert keys(results)[0] == "pet"
    assert set(results[0].legs) == {"vector"}


def test_hybrid_combines_legs_in_both_fusion_modes(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = seeded(conn, embedder)
    question = "Is Alice allergic to any food?"
    vector = qvec(conn, embedder, question)
    for mode in ("weighted", "rrf"):
        results = search(conn, scope, question, query_vector=vector, options=SearchOptions(mode=mode))
        assert keys(results)[0] == "food", mode
        assert {"text", "vector"} <= set(results[0].legs)
    weighted = search(conn, scope, question, query_vector=vector)
    assert all(r.score >= 0.3 for r in weighted)  # min score applies in weighted mode


def test_entity_leg_matches_named_things(conn: Conn) -> None:
    scope = make_scope(conn)
    add(conn, scope, None, "friend", "Caroline Smith moved next door")
    add(conn, scope, None, "other", "the neighbours are loud")
    results = search(conn, scope, "tell me about caroline smith")
    assert keys(results)[0] == "friend" and "entity" in results[0].legs


def test_filters(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = make_scope(conn)
    old = datetime(2025, 1, 1, tzinfo=UTC)
    add(
        conn,
        scope,
        embedder,
        "tea",
        "likes green tea",
        namespace="tacit/preferences",
        kind="preference",
        tags=["drinks"],
    )
    add(
        conn,
        scope,
        embedder,
        "tea-shop",
        "bought green tea in Porto",
        namespace="daily/2025-01-01",
        kind="episode",
        event_time=old,
    )
    store_memory(
        conn,
        scope,
        MemoryInput(key="tea", value="likes black tea now", namespace="tacit/preferences", kind="preference"),
        "api",
    )
    question = "green tea"

    def run(**filters: object) -> list[str]:
        return keys(
            search(
                conn,
                scope,
                question,
                filters=SearchFilters(**filters),  # type: ignore[arg-type]
                options=SearchOptions(relative_floor=0.0),
            )
        )

    assert run(namespace_prefix="tacit") == ["tea"]
    assert run(kinds=["episode"]) == ["tea-shop"]
    assert run(tags=["drinks"]) == ["tea"]
    assert run(since=old + timedelta(days=1)) == ["tea"]
    assert run(until=old + timedelta(days=1)) == ["tea-shop"]
    # The superseded "green tea" row only shows up when asked for.
    assert sorted(run(include_superseded=True)) == ["tea", "tea", "tea-shop"]


def say(
    conn: Conn, scope: Scope, session_key: str, text: str, *, name: str | None = None, at: datetime | None = None
) -> int:
    """A message stored as any door stores one; its transcript unit comes with it (migration 0015)."""
    session = conn.execute(
        """INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, %s)
           ON CONFLICT (user_id, channel, session_key) DO UPDATE SET updated_at = now() RETURNING id""",
        (scope.tenant_id, scope.user_id, session_key),
    ).fetchone()
    assert session is not None
    row = conn.execute(
        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, name, created_at)
           VALUES (%s, %s, %s, 'user', %s, %s, coalesce(%s, now())) RETURNING id""",
        (scope.tenant_id, scope.user_id, session["id"], text, name, at),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def embed_units(conn: Conn, embedder: LocalEmbedder) -> None:
    """What the embedding drain does to units without a vector (in this test's own transaction)."""
    ensure_embedding_space(conn, embedder)
    units = conn.execute(
        "SELECT id, text FROM memory_chunks WHERE message_id IS NOT NULL AND embedding IS NULL"
    ).fetchall()
    for unit in units:
        conn.execute(
            "UPDATE memory_chunks SET embedding = %s WHERE id = %s",
            (Vector(qvec(conn, embedder, unit["text"])), unit["id"]),
        )


def test_a_message_is_found_by_its_words_in_the_commit_that_stores_it(conn: Conn) -> None:
    scope = seeded(conn, None)
    message_id = say(conn, scope, "old", "my brother Tom is getting married in Lisbon next June", name="Alice")
    results = search(conn, scope, "Tom wedding Lisbon", options=SearchOptions(legs=("text",)))
    assert results[0].source == "transcript" and results[0].message_id == message_id
    assert results[0].speaker == "Alice" and results[0].session_key == "old"
    assert results[0].value == "my brother Tom is getting married in Lisbon next June"


def test_transcript_units_take_part_in_the_vector_leg(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = seeded(conn, embedder)
    message_id = say(conn, scope, "old", "my brother Tom is getting married in Lisbon next June")
    embed_units(conn, embedder)
    question = "when is the wedding"
    results = search(
        conn, scope, question, query_vector=qvec(conn, embedder, question), options=SearchOptions(legs=("vector",))
    )
    assert results[0].source == "transcript" and results[0].message_id == message_id
    session_id = results[0].session_id
    excluded = search(
        conn,
        scope,
        question,
        query_vector=qvec(conn, embedder, question),
        filters=SearchFilters(exclude_session_id=session_id),
        options=SearchOptions(relative_floor=0.0),
    )
    assert all(r.source == "memory" for r in excluded)


def test_a_reply_is_found_through_the_messages_that_led_to_it(conn: Conn) -> None:
    scope = make_scope(conn)
    say(conn, scope, "s1", "Have you ever been to the Glastonbury festival?", name="Ann")
    reply = say(conn, scope, "s1", "Yes, twice! It was muddy both times.", name="Bob")
    say(conn, scope, "s2", "What a lovely morning", name="Ann")
    results = search(conn, scope, "Glastonbury festival", options=SearchOptions(legs=("text",), relative_floor=0.0))
    assert reply in [r.message_id for r in results]
    # Never across sessions: the first message of s2 has no context from s1.
    unit = conn.execute(
        "SELECT c.text FROM memory_chunks c JOIN session_messages m ON m.id = c.message_id WHERE m.content = %s",
        ("What a lovely morning",),
    ).fetchone()
    assert unit is not None and unit["text"] == "Ann: What a lovely morning"


def test_a_message_by_the_person_a_question_names_ranks_first(conn: Conn) -> None:
    """Two messages that both name both people; the question names who said one of them."""
    scope = make_scope(conn)
    by_bob = say(conn, scope, "s1", "Ann and I went hiking in the Alps", name="Bob")
    by_ann = say(conn, scope, "s2", "Bob and I went hiking in the Alps", name="Ann")
    options = SearchOptions(legs=("text",), relative_floor=0.0)
    for name, first, second in (("Ann", by_ann, by_bob), ("Bob", by_bob, by_ann)):
        results = search(conn, scope, f"Where did {name} go hiking?", options=options)
        assert [r.message_id for r in results] == [first, second], name
        assert "speaker" in results[0].legs and "speaker" not in results[1].legs


def test_search_touch_counts_access(conn: Conn) -> None:
    scope = seeded(conn, None)
    search(conn, scope, "volleyball", touch=True)
    row = conn.execute("SELECT access_count, last_accessed_at FROM memories WHERE key = 'sport'").fetchone()
    assert row is not None and row["access_count"] == 1 and row["last_accessed_at"] is not None
    untouched = conn.execute("SELECT access_count FROM memories WHERE key = 'pet'").fetchone()
    assert untouched is not None and untouched["access_count"] == 0


def test_users_never_see_each_others_results(conn: Conn, embedder: LocalEmbedder) -> None:
    alice = seeded(conn, embedder)
    bob = make_scope(conn, "bob")
    add(conn, bob, embedder, "note", "bob's volleyball team")
    question = "volleyball"
    for scope, expected in ((alice, "sport"), (bob, "note")):
        results = search(
            conn,
            scope,
            question,
            query_vector=qvec(conn, embedder, question),
            options=SearchOptions(relative_floor=0.0),
        )
        assert keys(results)[0] == expected
        ids = {r.id for r in results}
        owners = conn.execute("SELECT DISTINCT user_id FROM memories WHERE id = ANY(%s)", (list(ids),)).fetchall()
        assert [o["user_id"] for o in owners] == [scope.user_id]


def test_vector_leg_returns_k_rows_when_the_user_owns_one_percent(conn: Conn, embedder: LocalEmbedder) -> None:
    """HNSW alone stops after ef_search candidates, most of them other users' rows; iterative
    scans keep going until k rows pass the user filter."""
    ensure_embedding_space(conn, embedder)
    register_vector_types(conn)  # the rows below are inserted as pgvector values on this connection
    tenant_scope = make_scope(conn, "user-0")
    rng = np.random.default_rng(7)
    n_users, per_user = 100, 30  # 3,000 units; our user owns 1%
    user_ids = [tenant_scope.user_id] + [make_scope(conn, f"user-{i}").user_id for i in range(1, n_users)]
    sessions = {user_id: _session_for(conn, tenant_scope.tenant_id, user_id) for user_id in user_ids}
    vectors = rng.normal(size=(n_users * per_user, embedder.dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # Messages, each with its transcript unit (migration 0015's trigger), then the unit's vector.
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
               VALUES (%s, %s, %s, 'user', %s)""",
            [
                (
                    tenant_scope.tenant_id,
                    user_ids[index % n_users],
                    sessions[user_ids[index % n_users]],
                    f"chunk {index}",
                )
                for index in range(len(vectors))
            ],
        )
        cur.executemany(
            """UPDATE memory_chunks c SET embedding = %s FROM session_messages m
               WHERE m.id = c.message_id AND m.session_id = %s AND m.content = %s""",
            [
                (Vector(vector), sessions[user_ids[index % n_users]], f"chunk {index}")
                for index, vector in enumerate(vectors)
            ],
        )
    conn.execute("ANALYZE memory_chunks")
    query = rng.normal(size=embedder.dimension).astype(np.float32)
    mine = np.array([i for i in range(len(vectors)) if user_ids[i % n_users] == tenant_scope.user_id])
    exact = {f"chunk {i}" for i in mine[np.argsort(-(vectors[mine] @ query))[:10]]}
    # Inside a rolled-back savepoint: without the per-user btree index and with sequential scans
    # off, the planner must walk the HNSW graph, as it would on a table too big to scan.
    with conn.transaction(force_rollback=True):
        conn.execute("DROP INDEX memory_chunks_user_idx")
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT id FROM memory_chunks WHERE user_id = %s ORDER BY embedding <=> %s LIMIT 10",
            (tenant_scope.user_id, Vector(query.tolist())),
        ).fetchall()
        assert "hnsw" in " ".join(row["QUERY PLAN"] for row in plan)
        results = search(
            conn,
            tenant_scope,
            "zzzz",
            query_vector=query.tolist(),
            options=SearchOptions(limit=10, relative_floor=0.0, overfetch=1),
        )
        assert len(results) == 10
        assert all(r.source == "transcript" for r in results)
        assert len({r.value for r in results} & exact) >= 8  # approximate, but nearly the exact top 10
        owners = conn.execute(
            "SELECT DISTINCT user_id FROM memory_chunks WHERE id = ANY(%s)", ([r.chunk_id for r in results],)
        ).fetchall()
        assert [o["user_id"] for o in owners] == [tenant_scope.user_id]
        # Without iterative scans the same walk returns (almost) nothing: the test measures what it claims.
        conn.execute("SET LOCAL hnsw.iterative_scan = off")
        plain = conn.execute(
            """SELECT count(*) AS n FROM (SELECT id FROM memory_chunks WHERE user_id = %s
               ORDER BY embedding <=> %s LIMIT 10) t""",
            (tenant_scope.user_id, Vector(query.tolist())),
        ).fetchone()
        assert plain is not None and plain["n"] < 10


def _session_for(conn: Conn, tenant_id: int, user_id: int) -> int:
    row = conn.execute(
        """INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, 'bulk')
           ON CONFLICT (user_id, channel, session_key) DO UPDATE SET updated_at = now() RETURNING id""",
        (tenant_id, user_id),
    ).fetchone()
    assert row is not None
    return int(row["id"])


# ------------------------------------------------------------------------------------- context


def test_a_memory_is_found_through_its_context_but_ranks_below_its_own_words(
    conn: Conn, embedder: LocalEmbedder
) -> None:
    scope = make_scope(conn)
    # A reply means little alone; the question it answers (its context) is what a search names.
    reply = add(
        conn,
        scope,
        embedder,
        "reply",
        "Yes, twice, and the second time was even better",
        kind="episode",
        metadata={"context": "Bob: Have you ever been to Iceland?"},
    )
    direct = add(conn, scope, embedder, "iceland", "Iceland is on the list for next year", kind="episode")
    results = search(conn, scope, "Iceland", options=SearchOptions(legs=("text",), relative_floor=0.0))
    assert [r.id for r in results] == [direct, reply]  # context words weigh less than value words
    chunk = conn.execute("SELECT text FROM memory_chunks WHERE memory_id = %s", (reply,)).fetchone()
    # The chunk's text is what was embedded (reindex re-embeds it): the memory first, then its context.
    assert chunk is not None and chunk["text"] == (
        "reply: Yes, twice, and the second time was even better\n\nContext:\nBob: Have you ever been to Iceland?"
    )


def test_rare_words_outrank_common_ones(conn: Conn) -> None:
    scope = make_scope(conn)
    for day in range(8):
        add(conn, scope, None, f"walk-{day}", f"went for a long walk with Alice on day {day}")
    add(conn, scope, None, "kayak", "tried kayaking once")
    # ts_rank alone scores one matched word the same whichever word it is; the idf weighting
    # makes "kayaking" (1 memory) count for more than "walk" (8 of 9).
    results = search(conn, scope, "did she walk or go kayaking", options=SearchOptions(legs=("text",)))
    assert results[0].key == "kayak"


def test_legs_option_runs_only_the_named_legs(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = seeded(conn, embedder)
    question = "Does Alice play volleyball?"
    vector = qvec(conn, embedder, question)
    only_vector = search(
        conn, scope, question, query_vector=vector, options=SearchOptions(legs=("vector",), relative_floor=0.0)
    )
    assert only_vector and all(set(r.legs) == {"vector"} for r in only_vector)
    only_text = search(conn, scope, question, query_vector=vector, options=SearchOptions(legs=("text",)))
    assert only_text and all(set(r.legs) == {"text"} for r in only_text)


def test_weighted_fusion_scores_every_candidate_on_the_vector_leg(conn: Conn, embedder: LocalEmbedder) -> None:
    scope = seeded(conn, embedder)
    question = "volleyball"
    # Each leg fetches only 2 (limit 2, overfetch 1): the vector leg, asked about Kyoto, does not
    # return the volleyball memory the text leg finds, which still gets its real similarity
    # (rank None: not among the vector leg's results) instead of 0.
    vector = qvec(conn, embedder, "kyoto temples")
    results = search(
        conn, scope, question, query_vector=vector, options=SearchOptions(limit=2, overfetch=1, relative_floor=0.0)
    )
    sport = next(r for r in results if r.key == "sport")
    assert sport.legs["vector"]["rank"] is None and sport.chunk_id == sport.legs["vector"]["chunk_id"]
    exact = conn.execute(
        "SELECT 1 - (embedding <=> %s) AS similarity FROM memory_chunks WHERE id = %s",
        (Vector(vector), sport.chunk_id),
    ).fetchone()
    assert exact is not None and sport.legs["vector"]["similarity"] == pytest.approx(exact["similarity"])


def test_an_entity_named_in_most_memories_barely_counts(conn: Conn) -> None:
    scope = make_scope(conn)
    for day in range(6):
        add(conn, scope, None, f"day-{day}", f"Spent the afternoon with Maria at the market, day {day}")
    add(conn, scope, None, "visit", "Oliver Stone visited on Sunday")
    results = search(conn, scope, "Maria and Oliver Stone", options=SearchOptions(relative_floor=0.0))
    entity = {r.key: r.legs["entity"]["specificity"] for r in results if "entity" in r.legs}
    assert entity["visit"] > 0.5 > 0.25 > entity["day-0"]
