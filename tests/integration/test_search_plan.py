"""The hybrid statement's plan on a user whose memories all share a common word (a conversation
partner's name): what each leg costs must not multiply with the number of memories that word matches."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from shared.embeddings import embed_texts, ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import LocalEmbedder
from shared.infra import db
from shared.infra.db import Conn
from shared.memory.indexing import embedding_inputs, index_memory
from shared.memory.memory_input import MemoryInput
from shared.memory.search import LARGE_USER_EF_SEARCH, SearchOptions, _fuse, fetch_size, search, search_statement
from shared.memory.search_reads import read_before_search, speakers_query
from shared.memory.store import Scope, store_memory
from tests.integration.test_memory_store import make_scope, make_session

pytestmark = pytest.mark.integration

TOPICS = ["pottery class", "camping trip", "adoption agency", "painting a sunset", "running a charity race"]
MEMORIES = 120


def seed(conn: Conn, *, analyze: bool = True) -> tuple[Scope, LocalEmbedder]:
    """MEMORIES memories that all name Melanie, each about one of TOPICS, embedded and indexed; with
    `analyze=False` the planner has no statistics on them yet, as right after a bulk import."""
    embedder = LocalEmbedder()
    scope = make_scope(conn)
    ids = []
    for number in range(MEMORIES):
        value = f"Melanie talked about her {TOPICS[number % len(TOPICS)]} (note {number})"
        item = MemoryInput(key=f"turn-{number}", value=value, kind="episode")
        ids.append(int(store_memory(conn, scope, item, "api").memory["id"]))
    ensure_embedding_space(conn, embedder)
    rows = conn.execute("SELECT id, namespace, key, value, kind, metadata FROM memories WHERE id = ANY(%s)", (ids,))
    embed_texts(conn, embedder, [text for row in rows.fetchall() for _, text in embedding_inputs(row)], 256)
    for memory_id in ids:
        index_memory(conn, embedder, memory_id)
    if analyze:
        conn.execute("ANALYZE memories")
        conn.execute("ANALYZE memory_chunks")
    return scope, embedder


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def explain(conn: Conn, scope: Scope, query: str, vector: list[float]) -> list[dict[str, Any]]:
    sql, params = search_statement(scope, query, query_vector=vector, options=SearchOptions())
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    return list(nodes(next(iter(row.values()))[0]["Plan"]))


def test_the_text_leg_tests_each_memory_and_term_once_not_every_matched_memory_twice(conn: Conn) -> None:
    scope, embedder = seed(conn)
    query = "What did Melanie say about the pottery class?"
    plan = explain(conn, scope, query, embedder.embed([query])[0])

    # Before: the OR query matched all MEMORIES memories, which were then tested against every query term
    # twice (once for the idf, once for the rank) in nested-loop join filters. Now each (memory, term) pair
    # is tested once at most: a term looked up in the GIN index, or one join of the user's memories with
    # the terms (what the planner picks for a user with few memories). Transcript units are the other kind
    # of document and get the same one pass (this user has none).
    terms = conn.execute("SELECT length(to_tsvector('english', %s)) AS n", (query,)).fetchone()
    assert terms is not None
    joins = [n for n in plan if "@@" in n.get("Join Filter", "")]
    tested = sum((n["Actual Rows"] + n.get("Rows Removed by Join Filter", 0)) * n["Actual Loops"] for n in joins)
    # One join per document table: aliases are m_<n> for memories and c_<n> for units, whatever n.
    per_table = [re.sub(r"_\d+$", "", n["Join Filter"].lstrip("(").split(".")[0]) for n in joins]
    assert len(set(per_table)) == len(per_table) <= 2, [(n["Join Filter"], n["Actual Loops"]) for n in joins]
    assert tested <= MEMORIES * terms["n"]
    assert joins or any(n.get("Index Name") == "memories_tsv_idx" for n in plan)
    # And it still ranks: the rare words (pottery, class) beat the name every memory carries.
    results = search(conn, scope, query, query_vector=embedder.embed([query])[0])
    assert len(results) >= 5 and all("pottery class" in r.value for r in results[:5])
    # (the pottery memories tie on text; each ranks above every memory naming only Melanie)
    pottery = MEMORIES // len(TOPICS)
    assert all(r.legs["text"]["rank"] <= pottery for r in results[:5])


def test_the_query_terms_are_parsed_once_per_search_not_once_per_memory(conn: Conn) -> None:
    # Without statistics the planner walks the user's memories and tests each one against every term.
    scope, embedder = seed(conn, analyze=False)
    query = "What did Melanie say about the pottery class?"
    plan = explain(conn, scope, query, embedder.embed([query])[0])

    # The terms (and their tsqueries) are made once: inlined, they were made again for every memory
    # (loops == MEMORIES), about a microsecond per memory and term: on LoCoMo conversations (~660
    # memories a user) about half of the text leg's time.
    term_scans = [n for n in plan if n.get("Function Name") == "unnest" and n.get("Alias") == "lexeme"]
    assert term_scans and all(n["Actual Loops"] == 1 for n in term_scans), [n["Actual Loops"] for n in term_scans]
    results = search(conn, scope, query, query_vector=embedder.embed([query])[0])
    assert len(results) >= 5 and all("pottery class" in r.value for r in results[:5])


def test_vector_results_join_the_candidates_once_not_once_per_candidate(conn: Conn) -> None:
    scope, embedder = seed(conn)
    query = "Melanie's camping trip"
    plan = explain(conn, scope, query, embedder.embed([query])[0])

    # The vector leg's rows are attached to the candidates by one key (a hash join): an OR of two
    # join conditions forced a nested loop that rescanned the vector rows for every candidate.
    vec_scans = [n for n in plan if n.get("Node Type") == "CTE Scan" and n.get("CTE Name") == "vec"]
    assert vec_scans and all(n["Actual Loops"] == 1 for n in vec_scans), [
        (n.get("Alias"), n["Actual Loops"]) for n in vec_scans
    ]
    results = search(conn, scope, query, query_vector=embedder.embed([query])[0])
    assert results[0].legs["vector"]["rank"] == 1 and "camping trip" in results[0].value


@pytest.mark.parametrize("mode", ["weighted", "rrf"])
def test_the_statement_returns_only_the_best_rows_the_same_as_fusing_every_candidate(conn: Conn, mode: str) -> None:
    scope, embedder = seed(conn)
    query = "What did Melanie say about the camping trip and the charity race?"
    vector = embedder.embed([query])[0]
    for limit in (1, 5, 10):
        options = SearchOptions(limit=limit, mode=mode)  # type: ignore[arg-type]
        sql, params = search_statement(scope, query, query_vector=vector, options=options)
        returned = conn.execute(sql, params).fetchall()
        every = conn.execute(sql, {**params, "keep": 10_000}).fetchall()
        # The cut matters here: many more candidates than rows sent back, each without its memory's text.
        assert len(returned) == params["keep"] < len(every)
        # The SQL score is _fuse's, row by row (the cut ranks by it; _fuse has the last word).
        for row in every:
            assert row["score"] == pytest.approx(_fuse(row, options, True)[0], abs=1e-9), row["doc"]
        # So search() answers what fusing every candidate in Python answers.
        fused = [(_fuse(row, options, True)[0], row["doc"]) for row in every]
        if mode == "weighted":
            best = max(score for score, _ in fused)
            fused = [(score, doc) for score, doc in fused if score >= options.relative_floor * best - 1e-9]
        expected = sorted(fused, key=lambda pair: (-pair[0], pair[1]))[:limit]
        results = search(conn, scope, query, query_vector=vector, options=options)
        assert [(r.id, pytest.approx(r.score, abs=1e-12)) for r in results] == [(m, s) for s, m in expected]


def test_who_speaks_is_read_in_one_index_step_per_person_not_a_step_per_line(conn: Conn) -> None:
    scope = make_scope(conn)
    session_id = make_session(conn, scope, "long")
    conn.execute(
        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, name)
           SELECT %s, %s, %s, 'user', 'line ' || n, CASE WHEN n %% 2 = 0 THEN 'Ann' ELSE 'Bob' END
           FROM generate_series(1, 2000) AS n""",
        (scope.tenant_id, scope.user_id, session_id),
    )
    conn.execute("ANALYZE memory_chunks")
    sql, params = speakers_query(scope)
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    plan = list(nodes(next(iter(row.values()))[0]["Plan"]))
    scans = [node for node in plan if node.get("Relation Name") == "memory_chunks"]
    assert scans and all(node["Node Type"] in ("Index Scan", "Index Only Scan") for node in scans), scans
    # Two people, 2,000 lines: each scan stops at its first row, once per person (and once to find no more).
    assert sum(node["Actual Rows"] * node["Actual Loops"] for node in scans) <= 3, scans
    assert [r["speaker"] for r in conn.execute(sql, params).fetchall()] == ["Ann", "Bob"]


def search_plans(conn: Conn) -> tuple[int, int]:
    """Generic and custom plans Postgres made for the (hybrid) search statement this connection prepared."""
    rows = conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%%vec_raw AS%%'"
    ).fetchall()
    assert len(rows) <= 1, rows  # one statement: every search here has the same options
    return (int(rows[0]["generic_plans"]), int(rows[0]["custom_plans"])) if rows else (0, 0)


def test_a_large_users_searches_are_planned_for_that_user_and_a_small_users_reuse_the_generic_plan(
    conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shared.memory.search_reads as search_reads

    large, embedder = seed(conn)
    small = make_scope(conn, "bob")
    store_memory(conn, small, MemoryInput(key="trip", value="Caroline went camping in June"), "api")
    conn.commit()
    monkeypatch.setattr(search_reads, "LARGE_USER_CHUNKS", MEMORIES)  # `large` has MEMORIES chunks, `small` one
    # Read before the search, with its other reads: how large each user is.
    assert (read_before_search(conn, large).large_user, read_before_search(conn, small).large_user) == (True, False)
    vector = embedder.embed(["Melanie's camping trip"])[0]

    with db.connect() as fresh:  # a connection no other test prepared statements on
        register_vector_types(fresh)
        # Prepared after five runs (psycopg), planned for its first five prepared runs, then Postgres reuses its
        # generic plan for a small user...
        for _ in range(15):
            assert len(search(fresh, small, "camping trip", query_vector=vector)) == 1
        generic, custom = search_plans(fresh)
        assert generic > 0, (generic, custom)
        # ...but plans each search of a large user for that user: the generic plan is made for an average user.
        for _ in range(10):
            found = search(fresh, large, "Melanie's camping trip", query_vector=vector, large_user=True)
            assert "camping trip" in found[0].value
        assert search_plans(fresh) == (generic, custom + 10)
        # Their HNSW search is wider too, for the rest of that transaction only.
        assert ef_search(fresh) == LARGE_USER_EF_SEARCH
        # And the choice ends with the transaction: the next request's small user is back on the generic plan.
        fresh.commit()
        search(fresh, small, "camping trip", query_vector=vector)
        assert search_plans(fresh) == (generic + 1, custom + 10)
        assert ef_search(fresh) == fetch_size(SearchOptions()) < LARGE_USER_EF_SEARCH


def ef_search(conn: Conn) -> int:
    return int(conn.execute("SELECT current_setting('hnsw.ef_search') AS ef").fetchone()["ef"])


def scanned(plan: list[dict[str, Any]], cte: str) -> int:
    """Rows the scans under a CTE of the plan returned."""
    top = next(node for node in plan if node.get("Subplan Name") == f"CTE {cte}")
    return sum(n["Actual Rows"] * n["Actual Loops"] for n in nodes(top) if n.get("Relation Name") == "memories")


def test_a_large_users_search_reads_a_bounded_part_of_their_history(
    conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shared.memory.search_sql as search_sql

    scope, embedder = seed(conn)
    monkeypatch.setattr(search_sql, "CORPUS_COUNT_CAP", 30)  # a quarter of the user's MEMORIES memories
    monkeypatch.setattr(search_sql, "LIKE_SCAN_CAP", 30)

    # Full text counts the user's documents up to the cap, and still ranks the rare words above the name.
    query = "What did Melanie say about the pottery class?"
    assert scanned(explain(conn, scope, query, embedder.embed([query])[0]), "corpus") <= 30
    results = search(conn, scope, query)
    assert len(results) >= 5 and all("pottery class" in r.value for r in results[:5])

    # A word part full text cannot match: the substring leg reads the newest 30 memories, not all 120, and
    # finds what they hold.
    assert scanned(explain(conn, scope, "ttery", embedder.embed(["ttery"])[0]), "like_ranked") <= 30
    notes = sorted(int(re.findall(r"note (\d+)", r.value)[0]) for r in search(conn, scope, "ttery"))
    newest = range(MEMORIES - 30, MEMORIES)
    assert notes == [n for n in newest if TOPICS[n % len(TOPICS)] == "pottery class"]
