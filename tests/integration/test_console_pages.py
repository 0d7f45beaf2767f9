"""The console's pages over plain HTTP with the session cookie (no browser is needed for these):

- no page costs a query per row: each page is requested for a tenant holding one row of everything and for one
  holding fifty, and the statements the gateway sends Postgres (counted from libpq's trace of every pooled
  connection) are the same;
- every list pages on, with links that keep the page's other parameters;
- a bad filter or page number is said beside its field, and the list is shown as without it;
- the lag chart reads one tenant's transcript units by their index, the runs list the job runs by theirs."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from psycopg import ClientCursor
from psycopg.types.json import Jsonb

from api.console.session import KEY_COOKIE, NONCE_COOKIE
from shared.access.auth import ensure_tenant
from shared.access.keys import create_api_key
from shared.channels.connections import upsert_connection
from shared.console.charts import LAG_SQL
from shared.console.operations import RUNS_PAGE, RUNS_SQL
from shared.infra import db
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, add_sources, store_memory
from shared.turns.accept import ensure_session, ensure_user
from tests.conftest import Gateway, make_key
from tests.support.services import TestServices
from tests.support.wire import pool_statements, statements

pytestmark = pytest.mark.integration

FEW, MANY = 1, 50


@dataclass(frozen=True)
class Tenant:
    key: str  # an admin key of the tenant
    rows: int
    history_memory: int  # a memory of u0 with `rows` versions and `rows` source messages


def _seed(name: str, rows: int) -> Tenant:
    """`rows` users (each with a memory and a session), and for the first user (u0): `rows` memories, `rows`
    sessions, a session (s0) of `rows` turns, a memory of `rows` versions and sources; `rows` keys, job runs and
    channel deliveries."""
    key = make_key(name)
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, name)
        users = [ensure_user(conn, tenant_id, f"u{i}") for i in range(rows)]
        for i, user_id in enumerate(users):
            store_memory(conn, Scope(tenant_id, user_id), MemoryInput(key="city", value=f"Lives in town {i}"), "api")
            session_id = ensure_session(conn, tenant_id, user_id, "s0")
            conn.execute(
                "INSERT INTO session_messages (tenant_id, user_id, session_id, role, content) VALUES (%s, %s, %s, "
                "'user', 'hello')",
                (tenant_id, user_id, session_id),
            )
        scope = Scope(tenant_id, users[0])
        first_session = ensure_session(conn, tenant_id, users[0], "s0")
        said = []
        for i in range(rows):
            turn = conn.execute(
                """INSERT INTO turns (tenant_id, user_id, session_id, status, usage, created_at, started_at,
                                      finished_at)
                   VALUES (%s, %s, %s, 'done', %s, now(), now(), now()) RETURNING id""",
                (tenant_id, users[0], first_session, Jsonb({"input_tokens": 10, "output_tokens": 2})),
            ).fetchone()["id"]
            for role, text in (("user", f"question {i}"), ("assistant", f"answer {i}")):
                said.append(
                    conn.execute(
                        """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content)
                           VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
                        (tenant_id, users[0], first_session, turn, role, text),
                    ).fetchone()["id"]
                )
        for i in range(1, rows):
            store_memory(conn, scope, MemoryInput(key=f"note-{i}", value=f"Note number {i}"), "api")
            other = ensure_session(conn, tenant_id, users[0], f"s{i}")
            conn.execute(
                "INSERT INTO session_messages (tenant_id, user_id, session_id, role, content) VALUES (%s, %s, %s, "
                "'user', 'hi')",
                (tenant_id, users[0], other),
            )
        for version in range(rows):
            latest = store_memory(conn, scope, MemoryInput(key="diet", value=f"Eats dish {version}"), "api").memory
        add_sources(conn, scope, latest, said[: max(rows, 1)])
        for i in range(1, rows):
            create_api_key(conn, tenant_id, scopes=["memory:read"], name=f"reader-{i}")
        bot = {"bot_token": "123456:telegram-bot-token"}
        connection, _ = upsert_connection(conn, tenant_id, "telegram", f"{name}-bot", bot)
        for i, user_id in enumerate(users):
            conn.execute(
                """INSERT INTO job_runs (job, period, scope, status, as_of, counts, changed, finished_at)
                   VALUES ('decay', %s, %s, 'done', now(), '{"scanned": 1}', 0, now())""",
                (f"p{i}", f"user:{tenant_id}:{user_id}"),
            )
            conn.execute(
                """INSERT INTO channel_deliveries (tenant_id, connection_id, user_id, target, status, attempts)
                   VALUES (%s, %s, %s, %s, 'failed', 1)""",
                (tenant_id, connection.id, user_id, Jsonb({"chat_id": i})),
            )
    return Tenant(key=key, rows=rows, history_memory=int(latest["id"]))


@pytest.fixture(scope="module")
def tenants(services: TestServices, gateway: Gateway) -> dict[int, Tenant]:
    from tests.conftest import clear_engram_keys, truncate_all

    truncate_all()
    clear_engram_keys()
    return {rows: _seed(f"rows-{rows}", rows) for rows in (FEW, MANY)}


@pytest.fixture(scope="module")
def clients(tenants: dict[int, Tenant], gateway: Gateway) -> Iterator[dict[int, httpx.Client]]:
    made = {
        rows: httpx.Client(base_url=gateway.url, cookies={KEY_COOKIE: tenant.key, NONCE_COOKIE: "nonce"}, timeout=60)
        for rows, tenant in tenants.items()
    }
    yield made
    for client in made.values():
        client.close()


PAGES = {
    "users": "/console/users",
    "memories": "/console/users/u0/memories",
    "memory": "/console/users/u0/memories/{memory}",
    "sessions": "/console/users/u0/sessions",
    "transcript": "/console/users/u0/sessions/s0",
    "operations": "/console/operations",
    "keys": "/console/keys",
}


def _statements(client: httpx.Client, path: str) -> tuple[int, str]:
    client.get(path).raise_for_status()  # the first request of a kind may warm a cache: not counted
    with pool_statements() as sent:
        answer = client.get(path)
    answer.raise_for_status()
    return statements(sent), answer.text


@pytest.mark.parametrize("name", list(PAGES))
def test_a_page_issues_as_many_statements_for_fifty_rows_as_for_one(
    name: str, tenants: dict[int, Tenant], clients: dict[int, httpx.Client]
) -> None:
    counted, shown = {}, {}
    for rows, client in clients.items():
        counted[rows], shown[rows] = _statements(client, PAGES[name].format(memory=tenants[rows].history_memory))
    print(f"{name}: {counted[FEW]} statements with {FEW} row, {counted[MANY]} with {MANY} rows")
    assert counted[FEW] == counted[MANY], counted
    assert counted[FEW] > 0  # the trace saw the page's queries
    # The larger page did show many rows: a count that stays flat because nothing was listed proves nothing.
    if name == "transcript":
        assert shown[MANY].count('class="turn"') == MANY and shown[FEW].count('class="turn"') == FEW
    else:
        assert 'rel="next"' in shown[MANY] and 'rel="next"' not in shown[FEW]


def test_the_lag_chart_reads_one_tenants_transcript_units_by_their_index(tenants: dict[int, Tenant]) -> None:
    # A crowded tenant's 3,000 units (300 sessions of 10 messages) beside the seeded tenants' few: reading one
    # tenant's by scanning every tenant's is the plan the index replaces.
    with db.connection() as conn:
        crowd = ensure_tenant(conn, "crowd")
        talker = ensure_user(conn, crowd, "talker")
        conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, channel, session_key)
               SELECT %s, %s, 'api', 'chat-' || i FROM generate_series(1, 300) AS i""",
            (crowd, talker),
        )
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
               SELECT %s, %s, s.id, 'user', 'message ' || i
               FROM sessions s CROSS JOIN generate_series(1, 10) AS i WHERE s.user_id = %s""",
            (crowd, talker, talker),
        )
        conn.execute("ANALYZE memory_chunks")
        quiet = ensure_tenant(conn, f"rows-{FEW}")
        explained = ClientCursor(conn).execute("EXPLAIN " + LAG_SQL, {"tenant": quiet, "days": 30}).fetchall()
    plan = "\n".join(str(row["QUERY PLAN"]) for row in explained)
    print(plan)
    assert "memory_chunks_tenant_created_idx" in plan and "Seq Scan on memory_chunks" not in plan, plan


def test_the_runs_list_reads_the_job_runs_newest_first_by_their_index(tenants: dict[int, Tenant]) -> None:
    # A year of other tenants' runs beside the seeded tenants' few: each day the five jobs' all-users runs and
    # twenty user runs. Sorting every run ever recorded for a page of 30 is the plan the index replaces. Rolled
    # back afterwards: the all-users runs are listed for every tenant, and the page counts below are this
    # module's runs alone.
    with db.connection() as conn:
        conn.execute(
            """INSERT INTO job_runs (job, period, scope, status, as_of, started_at, finished_at)
               SELECT job, 'd' || day, scope, 'done', now(), now() - make_interval(days => day),
                      now() - make_interval(days => day)
               FROM generate_series(1, 365) AS day,
                    unnest(ARRAY['decay', 'consolidation', 'enrichment', 'reflection', 'cache_eviction']) AS job,
                    LATERAL (SELECT 'all' AS scope UNION ALL
                             SELECT 'user:0:' || n FROM generate_series(1, 4) AS n) AS scopes"""
        )
        conn.execute("ANALYZE job_runs")
        quiet = ensure_tenant(conn, f"rows-{FEW}")
        explained = (
            ClientCursor(conn)
            .execute("EXPLAIN " + RUNS_SQL, {"scope": f"user:{quiet}:%", "limit": RUNS_PAGE, "offset": 0})
            .fetchall()
        )
        conn.rollback()
    plan = "\n".join(str(row["QUERY PLAN"]) for row in explained)
    print(plan)
    assert "job_runs_started_idx" in plan and "Sort" not in plan, plan


def _rows(text: str, table: str, row_start: str) -> int:
    """How many rows (each opening with `row_start`) the table with this id shows."""
    return text.split(f'id="{table}"', 1)[1].split("</table>", 1)[0].count(row_start)


def test_every_list_pages_on_and_its_links_keep_the_other_lists_page(
    tenants: dict[int, Tenant], clients: dict[int, httpx.Client]
) -> None:
    client = clients[MANY]
    first = client.get("/console/operations").text
    assert _rows(first, "runs", "<tr><td>") == 30 and _rows(first, "deliveries", '<tr><th scope="row">') == 20
    assert 'href="?runs=2"' in first and 'href="?deliveries=2"' in first
    # The runs' second page keeps the deliveries' page, and the other way round.
    later = client.get("/console/operations", params={"runs": 2, "deliveries": 3}).text
    assert _rows(later, "runs", "<tr><td>") == 20 and _rows(later, "deliveries", '<tr><th scope="row">') == 10
    assert 'href="?runs=1&amp;deliveries=3"' in later and 'href="?runs=2&amp;deliveries=2"' in later

    keys = client.get("/console/keys", params={"page": 2}).text
    assert _rows(keys, "keys", '<tr id="key-') == MANY - 25 and 'rel="prev"' in keys

    history = client.get(f"/console/users/u0/memories/{tenants[MANY].history_memory}", params={"history": 2}).text
    assert _rows(history, "history", "<tr><td>") == MANY - 25 and 'href="?history=1"' in history


BAD_FILTERS = [
    ("/console/users", {"sort": "loudest"}, "sort", "unknown order 'loudest'; orders are id, active"),
    ("/console/users", {"q": "x" * 201}, "q", "at most 200 characters (it has 201)"),
    ("/console/users", {"page": "two"}, "page", "expected a page number from 1 to 400 (it was 'two')"),
    ("/console/users/u0/memories", {"kind": "factt"}, "kind", "unknown kind 'factt'; kinds are "),
    ("/console/users/u0/memories", {"sort": "random"}, "sort", "unknown order 'random'; orders are changed,"),
    ("/console/users/u0/memories", {"date": "seen"}, "date", "unknown date field 'seen'"),
    (
        "/console/users/u0/memories",
        {"from": "notadate"},
        "from",
        "expected a date such as 2026-03-01 (it was 'notadate')",
    ),
    (
        "/console/users/u0/memories",
        {"from": "2026-03-01", "to": "2026-02-01"},
        "to",
        "the window starts (2026-03-01) after it ends (2026-02-01)",
    ),
    ("/console/users/u0/memories", {"page": "401"}, "page", "expected a page number from 1 to 400 (it was '401')"),
    ("/console/users/u0/sessions", {"page": "0"}, "page", "expected a page number from 1 to 400 (it was '0')"),
    ("/console/users/u0/entities", {"page": "-1"}, "page", "expected a page number"),
    ("/console/users/u0/reflections", {"page": "1.5"}, "page", "expected a page number"),
    ("/console/users/u0/sessions/s0", {"page": "x"}, "page", "expected a page number"),
    ("/console/operations", {"runs": "0"}, "runs", "expected a page number"),
    ("/console/operations", {"deliveries": "many"}, "deliveries", "expected a page number"),
    ("/console/keys", {"page": "last"}, "page", "expected a page number"),
]


@pytest.mark.parametrize(("path", "params", "field", "message"), BAD_FILTERS)
def test_a_bad_filter_is_said_beside_its_field_and_the_page_lists_as_without_it(
    path: str, params: dict[str, str], field: str, message: str, clients: dict[int, httpx.Client]
) -> None:
    client = clients[FEW]
    answer = client.get(path, params=params)
    assert answer.status_code == 422 and "Cannot show this page" not in answer.text
    error = re.search(rf'<p id="{field}-error" class="error[^"]*" role="alert">([^<]*)</p>', answer.text)
    assert error is not None and message in html.unescape(error.group(1)), answer.text
    # The list is the one the page shows without the bad parameter.
    plain = client.get(path)
    assert plain.status_code == 200
    assert _listed(answer.text) == _listed(plain.text)


def _listed(page: str) -> list[str]:
    """The links a page lists: its rows, whatever the list."""
    main = page.split('<main id="main"', 1)[1]
    return re.findall(r'href="(/console/users/[^"?#]+)', main)
