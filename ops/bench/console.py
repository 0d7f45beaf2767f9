"""The web console's server time per page (issue 29: p95 <= 100 ms) for a heavy user loaded with SQL, in-process
(Starlette's TestClient). docs/benchmarks.md lists the pages and the load."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ops.bench.harness import BenchError, BenchRun, bench_parser, distribution, emit, outline, run_main
from ops.bench.stack import prepare_database

TARGET_P95_MS = 100.0
OTHER_MEMORIES = 20  # each of the other users'
OTHER_SESSIONS = 2


def _scalar(cursor: Any) -> Any:
    row = cursor.fetchone()
    if row is None:
        raise BenchError("the load query returned no row")
    return row[0]


def _load(database_url: str, users: int, memories: int, sessions: int, messages: int) -> int:
    """`users` users of the tenant; the heavy one gets the memories and sessions; returns a memory's id."""
    import psycopg

    with psycopg.connect(database_url, autocommit=False) as conn:
        tenant = _scalar(conn.execute("SELECT id FROM tenants WHERE name = 'bench'"))  # prepare_database's
        conn.execute(
            """INSERT INTO users (tenant_id, external_id, display_name)
               SELECT %s, CASE WHEN i = 1 THEN 'heavy' ELSE 'user-' || i END, 'User ' || i
               FROM generate_series(1, %s) i""",
            (tenant, users),
        )
        user = _scalar(conn.execute("SELECT id FROM users WHERE tenant_id = %s AND external_id = 'heavy'", (tenant,)))
        conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, session_key, summary, compaction_count, updated_at)
               SELECT %s, %s, 'session-' || i, 'Summary of session ' || i, i %% 3, now() - make_interval(mins => i)
               FROM generate_series(1, %s) i""",
            (tenant, user, sessions),
        )
        # A turn for every user message, finished, with usage and timings as a worker writes them.
        conn.execute(
            """INSERT INTO turns (tenant_id, user_id, session_id, status, usage, timings, created_at, started_at,
                                  finished_at)
               SELECT %s, %s, s.id, 'done',
                      '{"input_tokens": 900, "output_tokens": 60, "cache_read_tokens": 3000,
                        "cache_write_tokens": 0}'::jsonb,
                      '{"run_ms": 800}'::jsonb, now() - interval '1 hour', now() - interval '1 hour',
                      now() - interval '1 hour' + make_interval(secs => 0.5 + (t %% 7) / 10.0)
               FROM sessions s, generate_series(1, %s) t WHERE s.user_id = %s""",
            (tenant, user, max(messages // 2, 1), user),
        )
        # The transcript-unit trigger would take minutes here; the console never reads units.
        conn.execute("ALTER TABLE session_messages DISABLE TRIGGER session_messages_transcript_units")
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content)
               SELECT %(tenant)s, %(user)s, t.session_id, t.id, r.role,
                      CASE r.role WHEN 'user' THEN 'What about topic ' || t.id || '?'
                           ELSE 'Here is what I know about topic ' || t.id || '.' END
               FROM turns t, (VALUES ('user'), ('assistant')) r(role) WHERE t.user_id = %(user)s
               ORDER BY t.id, r.role DESC""",
            {"tenant": tenant, "user": user},
        )
        conn.execute("ALTER TABLE session_messages ENABLE TRIGGER session_messages_transcript_units")
        conn.execute(
            """INSERT INTO llm_calls (tenant_id, user_id, session_id, turn_id, purpose, provider, model, input_tokens,
                                      output_tokens, cache_read_tokens, duration_ms, created_at)
               SELECT tenant_id, user_id, session_id, id, 'chat', 'bench', 'bench', 900, 60, 3000, 500, finished_at
               FROM turns WHERE user_id = %s""",
            (user,),
        )
        said = conn.execute("SELECT count(*) FROM session_messages WHERE user_id = %s AND role = 'user'", (user,))
        user_messages = _scalar(said)
        words = ["tea", "coffee", "Lisbon", "Porto", "bicycle", "piano", "garden", "python", "hiking", "sailing"]
        conn.execute(
            """INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, tags, source,
                                     source_message_ids, created_at, updated_at, valid_from)
               SELECT %(tenant)s, %(user)s, CASE WHEN i %% 4 = 0 THEN 'daily/2026-01-01' ELSE 'tacit/facts' END,
                      'fact-' || i,
                      'Likes ' || (%(words)s::text[])[1 + i %% 10] || ' and ' || (%(words)s::text[])[1 + (i / 10) %% 10]
                        || ' (note ' || i || ')',
                      CASE WHEN i %% 4 = 0 THEN 'episode' ELSE 'fact' END,
                      ARRAY[(%(words)s::text[])[1 + i %% 10]], 'extraction',
                      CASE WHEN i %% 10 = 0 THEN ARRAY(SELECT id FROM session_messages
                           WHERE user_id = %(user)s AND role = 'user' ORDER BY id OFFSET i %% %(said)s LIMIT 1)
                           ELSE '{}' END,
                      now() - make_interval(mins => i), now() - make_interval(mins => i),
                      now() - make_interval(mins => i)
               FROM generate_series(1, %(n)s) i""",
            {"tenant": tenant, "user": user, "words": words, "n": memories, "said": user_messages},
        )
        # The other users hold a little each, so the planner's statistics see many users.
        conn.execute(
            """INSERT INTO memories (tenant_id, user_id, namespace, key, value, source)
               SELECT %s, u.id, 'tacit/facts', 'note-' || i, 'Note ' || i || ' of ' || u.external_id, 'api'
               FROM users u, generate_series(1, %s) i WHERE u.tenant_id = %s AND u.id <> %s""",
            (tenant, OTHER_MEMORIES, tenant, user),
        )
        conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, session_key)
               SELECT %s, u.id, 'chat-' || i FROM users u, generate_series(1, %s) i
               WHERE u.tenant_id = %s AND u.id <> %s""",
            (tenant, OTHER_SESSIONS, tenant, user),
        )
        conn.execute(
            """INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, new_value, actor)
               SELECT tenant_id, user_id, id, 'add', namespace, key, value, 'extraction' FROM memories
               WHERE user_id = %s""",
            (user,),
        )
        middle = _scalar(
            conn.execute(
                """SELECT id FROM memories WHERE user_id = %s AND source_message_ids <> '{}'
                   ORDER BY id OFFSET %s LIMIT 1""",
                (user, memories // 20),
            )
        )
        conn.commit()
    # As autovacuum would leave them after these inserts: planner statistics and a visibility map.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return middle


def _pages(memory_id: int, sessions: int) -> dict[str, str]:
    middle = f"session-{max(sessions // 2, 1)}"
    today = datetime.now(UTC).date().isoformat()  # the loaded memories were created in the last hours
    return {
        "users": "/console/users",
        "users search": "/console/users?q=user-1",
        "users by activity": "/console/users?sort=active",
        "memories": "/console/users/heavy/memories",
        "memories page 5": "/console/users/heavy/memories?page=5",
        "memories oldest": "/console/users/heavy/memories?sort=oldest",
        "memories created": "/console/users/heavy/memories?sort=created&page=2",
        "memories by key": "/console/users/heavy/memories?sort=key&page=3",
        "memories window": f"/console/users/heavy/memories?date=created&from={today}&to={today}&page=2",
        "memories search": "/console/users/heavy/memories?q=Lisbon+piano",
        "memories filtered": "/console/users/heavy/memories?kind=episode&tag=tea",
        "memory": f"/console/users/heavy/memories/{memory_id}",
        "entities": "/console/users/heavy/entities",
        "reflections": "/console/users/heavy/reflections",
        "sessions": "/console/users/heavy/sessions",
        "transcript": f"/console/users/heavy/sessions/{middle}",
        "context": f"/console/users/heavy/sessions/{middle}/context",
        "operations": "/console/operations",
        "keys": "/console/keys",
        "chart cache": "/console/api/charts/cache",
        "chart llm-calls": "/console/api/charts/llm-calls",
        "chart turns": "/console/api/charts/turns",
        "chart memories": "/console/api/charts/memories",
        "chart lag": "/console/api/charts/lag",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.console", __doc__, keep=True)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--messages", type=int, default=10, help="messages per session")
    parser.add_argument("--requests", type=int, default=60, help="timed requests per page (after 3 warm-ups)")
    args = parser.parse_args(argv)
    if min(args.users, args.memories, args.sessions, args.messages, args.requests) < 1:
        raise BenchError("every count must be at least 1")

    with BenchRun(keep=args.keep) as run:
        env = {"ENGRAM_LLM_PROVIDER": "offline", "ENGRAM_LOG_LEVEL": "warning"}  # no log line per request
        env |= {"ENGRAM_RATE_LIMIT_KEY_PER_SECOND": "0", "ENGRAM_RATE_LIMIT_TENANT_PER_SECOND": "0"}
        database_url = run.services("engram-bench-console-", env)
        key = prepare_database(database_url)  # the migrations, and a key of the tenant the load fills
        started = time.monotonic()
        memory_id = _load(database_url, args.users, args.memories, args.sessions, args.messages)
        load_s = time.monotonic() - started
        pages = _measure(key, _pages(memory_id, args.sessions), args.requests)
    max_p95 = max(page["p95"] or 0.0 for page in pages.values())
    summary = {
        "load_s": round(load_s, 1),
        "pages": pages,
        "max_p95_ms": max_p95,
        "within_target": max_p95 <= TARGET_P95_MS,
    }
    emit(outline(f"console server time per page (target p95 <= {TARGET_P95_MS:g} ms)", summary), summary, args.json)
    return 0


def _measure(key: str, pages: dict[str, str], requests: int) -> dict[str, dict[str, float | int | None]]:
    from fastapi.testclient import TestClient

    from ops.gateway import create_app
    from shared.memory.service import warm_query_embedder

    warm_query_embedder()  # the gateway loads it before it serves (api/app.py lifespan)
    client = TestClient(create_app(), base_url="http://127.0.0.1")
    form = client.get("/console/sign-in")
    token = client.cookies.get("engram_console_nonce")
    signed = client.post(
        "/console/sign-in", data={"api_key": key, "csrf_token": token, "next": ""}, follow_redirects=False
    )
    if signed.status_code != 303 or form.status_code != 200:
        raise BenchError(f"could not sign in to the console: {signed.status_code} {signed.text[:200]}")
    summary: dict[str, dict[str, float | int | None]] = {}
    for name, path in pages.items():
        times: list[float] = []
        for _ in range(requests + 3):
            begin = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - begin) * 1000)
            if response.status_code != 200:
                raise BenchError(f"{path}: {response.status_code} {response.text[:300]}")
        summary[name] = distribution(times[3:], (50, 95))  # after 3 warm-ups
        print(f"  {name}: p95 {summary[name]['p95']} ms", file=sys.stderr, flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(run_main(main))
