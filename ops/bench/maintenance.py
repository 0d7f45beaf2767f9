"""Maintenance jobs at scale over synthetic users, each run once in-process through beat's entry point against a
fake LLM: per job its duration, memories touched and LLM calls."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ops.bench.harness import BenchRun, MemorySampler, bench_parser, emit, megabytes, outline, ratio, run_main

JOB_ORDER = ("enrichment", "consolidation", "decay", "reflection", "cache-eviction")


def fake_answer(body: dict[str, Any]) -> Any:
    """The fake model's reply to each maintenance prompt, in the format that prompt asks for."""
    from ops.fake_llm import FakeReply, last_user_text

    text = json.dumps(body)
    prompt = last_user_text(body)
    if "durable memories" in text:  # extraction (consolidation)
        facts = {
            "preferences": [{"key": "bench-tea", "value": "Prefers green tea over coffee"}],
            "entities": [{"key": "user/location", "value": "User lives in Lisbon"}],
            "decisions": [],
            "styles": [],
            "artifacts": [],
        }
        return FakeReply(text=json.dumps(facts))
    if "contradicted" in text:
        return FakeReply(text='{"contradicted": []}')
    if "named entities" in text:
        count = prompt.count("\n") + 1
        return FakeReply(
            text=json.dumps({str(i): [{"name": "Ana Lopez", "aliases": ["Ana"]}] for i in range(1, count)})
        )
    return FakeReply(text="This week the user shared a few new facts about their routines.")


def seed(conn: Any, users: int, memories: int, now: datetime) -> int:
    tenant = conn.execute("INSERT INTO tenants (name) VALUES ('bench') RETURNING id").fetchone()["id"]
    conn.execute(
        "INSERT INTO users (tenant_id, external_id) SELECT %s, 'user-' || g FROM generate_series(1, %s) g",
        (tenant, users),
    )
    span = timedelta(days=730).total_seconds()
    # content_key as store_memory writes it (keys.content_key): these lowercase ASCII values are their own
    # fingerprint, so sha256 of the value is exact, and decay measures decay rather than a one-off backfill.
    conn.execute(
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, decay_rate, created_at,
                                 last_accessed_at, content_key)
           SELECT u.tenant_id, u.id, CASE WHEN g %% 2 = 0 THEN 'tacit/facts' ELSE 'tacit/preferences' END,
                  'item-' || g, 'note ' || g || ' about topic ' || (g %% 17),
                  CASE WHEN g %% 2 = 0 THEN 'fact' ELSE 'preference' END,
                  CASE WHEN g %% 2 = 0 THEN 0.01 ELSE 0.005 END,
                  CASE WHEN g <= 3 THEN %(now)s - interval '2 days'
                       ELSE %(now)s - make_interval(secs => %(span)s * g / %(m)s) END,
                  CASE WHEN g %% 3 = 0 THEN %(now)s - make_interval(secs => %(span)s * g / %(m)s / 3) END,
                  sha256(convert_to('note ' || g || ' about topic ' || (g %% 17), 'UTF8'))
           FROM users u CROSS JOIN generate_series(1, %(m)s) g""",
        {"now": now, "span": span, "m": memories},
    )
    conn.execute(
        """INSERT INTO sessions (tenant_id, user_id, session_key, created_at)
           SELECT tenant_id, id, 'old', %s FROM users""",
        (now - timedelta(hours=3),),
    )
    for line in ("I live in Lisbon.", "I prefer green tea over coffee.", "I work at Acme Corp."):
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, created_at)
               SELECT s.tenant_id, s.user_id, s.id, r.role, CASE r.role WHEN 'user' THEN %s ELSE 'Noted!' END, %s
               FROM sessions s CROSS JOIN (VALUES ('user'), ('assistant')) r(role)""",
            (line, now - timedelta(hours=3)),
        )
    conn.execute(
        """INSERT INTO embedding_cache (model, dimension, content_hash, embedding, last_used_at)
           SELECT 'bench', 3, md5(g::text), '[1,0,0]',
                  %s - make_interval(days => CASE WHEN g %% 2 = 0 THEN 40 ELSE 1 END)
           FROM generate_series(1, %s) g""",
        (now, users * 10),
    )
    return users * memories


def run(args: argparse.Namespace) -> int:
    from ops.fake_llm import FakeLLM
    from shared.infra import db
    from shared.infra.config import get_settings
    from shared.infra.migrate import apply_migrations
    from shared.maintenance import jobs

    with BenchRun() as cleanup:
        fake = cleanup.enter_context(FakeLLM(latency_s=args.llm_latency_ms / 1000))
        fake.default = fake_answer
        env = {"ENGRAM_MAINTENANCE_DAILY_TOKEN_BUDGET": "0", "ENGRAM_LLM_PROVIDER": "anthropic"}
        env |= {"ENGRAM_ANTHROPIC_API_KEY": "bench", "ENGRAM_ANTHROPIC_BASE_URL": fake.anthropic_base_url}
        cleanup.services("engram-bench-maint-", env)
        cleanup.callback(db.close_pool)
        settings = get_settings()
        with db.connect() as conn:
            apply_migrations(conn)
        now = datetime.now(UTC)
        began = time.monotonic()
        with db.connection() as conn:
            total = seed(conn, args.users, args.memories, now)
        seeded_s = time.monotonic() - began
        results: dict[str, Any] = {}
        for name in args.jobs:
            calls_before = len(fake.requests)
            with MemorySampler({"bench": os.getpid()}, interval=0.05, tree=False, pss=False) as rss:
                started = time.monotonic()
                result = jobs.run(name, settings, as_of=now)
                seconds = time.monotonic() - started
            calls = len(fake.requests) - calls_before
            touched = sum(
                result.counts.get(k, 0)
                for k in ("examined", "memories_enriched", "messages_read", "reflections_written", "evicted")
            )
            results[name] = {
                "seconds": round(seconds, 2),
                "touched_per_second": ratio(touched, seconds, 1),
                "peak_rss_mb": megabytes(rss.peaks["bench"].rss),
                "llm_calls": calls,
                "llm_calls_per_1000_memories": round(calls * 1000 / total, 2),
                "changed": result.changed,
                "counts": result.counts,
            }
            print(f"{name}: {seconds:.2f} s", file=sys.stderr, flush=True)
    summary = {"memories": total, "seed_seconds": round(seeded_s, 1), "jobs": results}
    emit(outline("maintenance jobs", summary), summary, args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.maintenance", __doc__)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=100, help="memories per user")
    parser.add_argument("--llm-latency-ms", type=float, default=50.0, help="fake model latency per call")
    parser.add_argument("--jobs", type=lambda s: s.split(","), default=list(JOB_ORDER), help="comma-separated")
    args = parser.parse_args(argv)
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
