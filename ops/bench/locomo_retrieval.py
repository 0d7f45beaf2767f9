"""LoCoMo benchmark: recall@5/10 of memory search per leg and question category, or (`--mode e2e`) evidence recall
in a private stack's context endpoint at each budget. docs/benchmarks.md has the protocol and the figures."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engramhq_client import EngramAPIError, EngramClient
from pgvector import Vector

from ops.bench.harness import BenchRun, bench_parser, distribution, emit, env_setting, mean, outline, rounded, run_main
from ops.bench.locomo_data import CATEGORIES, Conversation, Turn, load_conversations, session_messages
from ops.bench.stack import BenchError, up_workers
from shared.access.auth import ensure_tenant
from shared.context.tokens import O200K, TokenCounter, counter_for
from shared.embeddings import Embedder, embed_texts, ensure_embedding_space
from shared.infra.config import get_settings
from shared.infra.db import Conn, connect
from shared.infra.logging import configure_logging
from shared.infra.migrate import apply_migrations
from shared.memory import service
from shared.memory.indexing import embedding_inputs, index_memory
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import CONTEXT_KEY, MAX_CONTEXT_CHARS, MemoryInput
from shared.memory.search import Leg, SearchOptions, SearchResult, search
from shared.memory.service import options_from_settings
from shared.memory.store import Scope, store_memory
from shared.turns.accept import ensure_user
from shared.turns.ingest import IngestMessage, ingest_messages

K_VALUES = (5, 10)
METRICS = tuple(f"recall@{k}" for k in K_VALUES)
LIMIT = 10  # results asked of search: the deepest cut-off measured
CONTEXT_BEFORE, CONTEXT_AFTER = 2, 1  # neighbouring turns stored as each episode's context
MODES: dict[str, tuple[Leg, ...] | None] = {"text": ("text",), "vector": ("vector",), "hybrid": None}
BATCH = 200  # messages per ingest call: under the gateway's default ENGRAM_INGEST_MAX_MESSAGES (500)
MAX_QUERY_CHARS = 2000  # the context endpoint's limit on `query`
_NOT_WORD = re.compile(r"[\W_]+")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:@-]+")


def recall_at(ranked: Sequence[frozenset[str]], evidence: set[str], k: int) -> float:
    found = set().union(*ranked[:k]) if ranked[:k] else set()
    return len(found & evidence) / len(evidence)


@dataclass
class ModeStats:
    scores: dict[str, list[float]] = field(default_factory=dict)  # "recall@5|all" → per-question values
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, category: int, metric: str, value: float) -> None:
        for group in ("all", str(category)):
            self.scores.setdefault(f"{metric}|{group}", []).append(value)

    def count(self, group: str, metric: str = "recall@10") -> int:
        return len(self.scores.get(f"{metric}|{group}", []))

    def mean(self, metric: str, group: str = "all") -> float | None:
        return mean(self.scores.get(f"{metric}|{group}", []))


@dataclass
class Ingested:
    scope: Scope
    dia_ids: dict[int, set[str]]  # memory id (episodes) or message id (units) → the turns whose text it holds

    def found(self, result: SearchResult) -> frozenset[str]:
        key = result.id if result.source == "memory" else result.message_id
        return frozenset(self.dia_ids.get(key, ())) if key is not None else frozenset()


def neighbours(turns: Sequence[Turn], index: int) -> list[str]:
    window = range(index - CONTEXT_BEFORE, index + CONTEXT_AFTER + 1)
    session = turns[index].session
    return [turns[i].text for i in window if i != index and 0 <= i < len(turns) and turns[i].session == session]


def neighbour_context(turns: Sequence[Turn], index: int) -> str:
    """What an episode writer keeps as `metadata.context`."""
    # The store refuses an oversize context rather than cutting it; cutting is the writer's call.
    return "\n".join(neighbours(turns, index))[:MAX_CONTEXT_CHARS]


def ingest(conn: Conn, embedder: Embedder, tenant_id: int, conversation: Conversation, units: bool = False) -> Ingested:
    """The conversation stored (as messages, each a transcript unit, or as episodes), then embedded and indexed."""
    ingested = Ingested(Scope(tenant_id, ensure_user(conn, tenant_id, conversation.sample_id)), {})
    (_store_units if units else _store_episodes)(conn, conversation, ingested)
    conn.commit()
    ensure_embedding_space(conn, embedder)
    conn.commit()  # the first use alters memory_chunks; keep that lock short
    (_index_units if units else _index_episodes)(conn, embedder, ingested)
    conn.commit()
    return ingested


def _store_units(conn: Conn, conversation: Conversation, ingested: Ingested) -> None:
    for number, messages in sorted(session_messages(conversation).items()):
        result = ingest_messages(
            conn,
            tenant_id=ingested.scope.tenant_id,
            user_external_id=conversation.sample_id,
            session_key=f"session-{number}",
            messages=[
                IngestMessage(m["role"], m["content"], m.get("created_at"), m.get("name"), m["idempotency_key"])
                for m in messages
            ],
        )
        for message, message_id in zip(messages, result.message_ids, strict=True):
            ingested.dia_ids.setdefault(message_id, set()).add(message["idempotency_key"])


def _index_units(conn: Conn, embedder: Embedder, ingested: Ingested) -> None:
    units = conn.execute(
        "SELECT id, text FROM memory_chunks WHERE user_id = %s AND message_id IS NOT NULL AND embedding IS NULL",
        (ingested.scope.user_id,),
    ).fetchall()
    vectors = embed_texts(conn, embedder, [unit["text"] for unit in units], batch_size=256)
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE memory_chunks SET embedding = %s, embedded_at = now() WHERE id = %s",
            [(Vector(vector), unit["id"]) for unit, vector in zip(units, vectors, strict=True)],
        )


def _store_episodes(conn: Conn, conversation: Conversation, ingested: Ingested) -> None:
    for index, turn in enumerate(conversation.turns):
        item = MemoryInput(
            key=turn.dia_id,
            value=turn.text,
            kind="episode",
            event_time=turn.event_time,
            metadata={
                "dia_id": turn.dia_id,
                "session": turn.session,
                "speaker": turn.speaker,
                CONTEXT_KEY: neighbour_context(conversation.turns, index),
            },
        )
        try:
            result = store_memory(conn, ingested.scope, item, "locomo-bench")
        except MemoryRejected:
            continue
        ingested.dia_ids.setdefault(int(result.memory["id"]), set()).add(turn.dia_id)


def _index_episodes(conn: Conn, embedder: Embedder, ingested: Ingested) -> None:
    ids = sorted(ingested.dia_ids)
    rows = conn.execute(
        "SELECT id, namespace, key, value, kind, metadata FROM memories WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    # One batched call fills the embedding cache; index_memory then finds every vector there.
    embed_texts(conn, embedder, [text for row in rows for _, text in embedding_inputs(row)], batch_size=256)
    for memory_id in ids:
        index_memory(conn, embedder, memory_id)


def options_for(mode: str) -> SearchOptions:
    options = options_from_settings(get_settings(), LIMIT)
    if (legs := MODES[mode]) is not None:
        options.legs = legs
        # A lone leg is measured by its ranking alone: the relative floor is a hybrid relevance cut.
        options.relative_floor = 0.0
    return options


def evaluate(
    conn: Conn,
    embedder: Embedder,
    conversation: Conversation,
    ingested: Ingested,
    stats: dict[str, ModeStats],
    embed_ms: list[float],
) -> None:
    for question in conversation.questions:
        started = time.perf_counter()
        vector = embed_texts(conn, embedder, [question.text], batch_size=1)[0]
        embed_ms.append((time.perf_counter() - started) * 1000)
        # The product's path embeds the question itself (cached): done here, outside its timing.
        service.query_vector(conn, question.text)
        evidence = set(question.evidence)
        for mode in MODES:
            options = options_for(mode)
            started = time.perf_counter()
            if mode == "hybrid":
                results = service.search_memories(conn, ingested.scope, question.text, limit=LIMIT)
            else:
                query_vector = None if mode == "text" else vector
                results = search(conn, ingested.scope, question.text, query_vector=query_vector, options=options)
            stats[mode].latencies_ms.append((time.perf_counter() - started) * 1000)
            conn.commit()  # search sets transaction-local HNSW options; start each query afresh
            ranked = [ingested.found(r) for r in results]
            for k in K_VALUES:
                stats[mode].add(question.category, f"recall@{k}", recall_at(ranked, evidence, k))


def summary(stats: dict[str, ModeStats], embed_ms: list[float]) -> dict[str, Any]:
    """Per mode the means over every question (the keys the docs name), then per category and latency."""
    out: dict[str, Any] = {}
    for mode, s in stats.items():
        out[mode] = {metric: round(s.mean(metric) or 0.0, 4) for metric in METRICS}
        out[mode]["by_category"] = {
            name: {metric: rounded(s.mean(metric, str(c)), 4) for metric in METRICS}
            for c, name in CATEGORIES.items()
            if s.count(str(c))
        }
        out[mode]["search_ms"] = distribution(s.latencies_ms, (50, 95))
    asked = stats["hybrid"]
    out["questions"] = {"all": asked.count("all"), **{n: asked.count(str(c)) for c, n in CATEGORIES.items()}}
    out["query_embedding_ms"] = distribution(embed_ms, (50, 95))
    return out


def read_conversations(args: argparse.Namespace) -> list[Conversation]:
    """The file's conversations (every LoCoMo benchmark parses it the same way), cut to --limit-conversations."""
    try:
        conversations = load_conversations(Path(args.file))[: args.limit_conversations]
    except (TypeError, AttributeError, ValueError) as exc:
        raise BenchError(f"{args.file}: not a LoCoMo-format JSON file ({exc})") from exc
    if not conversations:
        raise BenchError("no conversations to run")
    if not any(conversation.turns for conversation in conversations):
        raise BenchError(f"{args.file}: no turns to ingest")
    return conversations


def run(args: argparse.Namespace, conversations: list[Conversation]) -> int:
    url = args.database_url or get_settings().database_url
    embedder = service.process_embedder()  # the one the product's search embeds questions with
    stats = {mode: ModeStats() for mode in MODES}
    embed_ms: list[float] = []
    with BenchRun() as cleanup, connect(cleanup.database(url, "engram-locomo-")) as conn:
        apply_migrations(conn)
        conn.autocommit = False
        tenant_id = ensure_tenant(conn, f"locomo-bench-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
        conn.commit()
        embedder.embed(["warm-up"])  # load the model outside the timed sections
        for conversation in conversations:
            ingested = ingest(conn, embedder, tenant_id, conversation, units=args.store == "units")
            print(f"{conversation.sample_id}: {len(conversation.turns)} turns", file=sys.stderr)
            evaluate(conn, embedder, conversation, ingested, stats, embed_ms)
    result = summary(stats, embed_ms)
    emit(outline("LoCoMo retrieval (search latency without the query embedding)", result), result, args.json)
    return 0


def normalise(text: str) -> str:
    """Compatibility-normalised, case-folded, letters and digits only, single spaces, padded with a space at
    each end so that containment of one normalised text in another holds on word boundaries."""
    words = _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return f" {words} " if words else ""


def evidence_recall(evidence_texts: Sequence[str], context: str) -> float:
    """The share of the evidence turns (their normalised text) present in the normalised context."""
    haystack = normalise(context)
    wanted = [text for text in map(normalise, evidence_texts) if text]
    return sum(text in haystack for text in wanted) / len(wanted) if wanted else 0.0


def user_id_for(index: int, conversation: Conversation) -> str:
    """An engram user id (ID pattern: letters, digits, ._:@-) that keeps the sample id readable."""
    safe = _UNSAFE_ID.sub("-", conversation.sample_id).strip("-.:@")[:60] or "conversation"
    return f"locomo-{index:03d}-{safe}"


def ingest_all(client: EngramClient, users: Sequence[tuple[str, Conversation]]) -> list[tuple[str, str]]:
    sessions = []
    for user, conversation in users:
        for number, messages in sorted(session_messages(conversation).items()):
            for start in range(0, len(messages), BATCH):
                client.ingest(user, f"session-{number}", messages[start : start + BATCH])
            sessions.append((user, f"session-{number}"))
    return sessions


def wait_idle(client: EngramClient, sessions: Sequence[tuple[str, str]], timeout: float) -> int:
    """Every session idle by memory-status (within `timeout` overall); returns the memories created."""
    deadline = time.monotonic() + timeout
    created = 0
    for user, key in sessions:
        remaining = max(0.0, deadline - time.monotonic())
        try:
            status = client.wait_until_idle(user, key, timeout=remaining, interval=0.25)
        except TimeoutError as exc:
            raise BenchError(f"the memory pipeline did not finish within {timeout:.0f} s: {exc}") from exc
        created += status.memories_created
    return created


@dataclass
class BudgetStats(ModeStats):  # its metric: "evidence_recall"
    tokens: list[int] = field(default_factory=list)
    over_budget: int = 0  # reported tokens > max_tokens
    recount_mismatch: int = 0  # our count of the returned text differs from the reported one
    recounted: int = 0


def recounter(tokenizer: str) -> TokenCounter | None:
    # The server counts with the OpenAI encoding of its model, o200k_base for a model it does not know.
    counter = counter_for("openai", "gpt-4o") if tokenizer == O200K else None
    return counter if counter is not None and counter.name == O200K else None


def ask(
    client: EngramClient, user: str, conversation: Conversation, budgets: Sequence[int], stats: dict[int, BudgetStats]
) -> None:
    texts = {turn.dia_id: turn.said for turn in conversation.turns}
    for index, question in enumerate(conversation.questions):
        evidence = [texts[dia_id] for dia_id in question.evidence]
        # The first call of a question embeds the query; the others find its vector in the embedding cache.
        # Rotating which budget goes first gives every budget the same share of cold calls.
        shift = index % len(budgets)
        for budget in [*budgets[shift:], *budgets[:shift]]:
            s = stats[budget]
            started = time.perf_counter()
            packed = client.context(user, query=question.text[:MAX_QUERY_CHARS], max_tokens=budget)
            s.latencies_ms.append((time.perf_counter() - started) * 1000)
            s.add(question.category, "evidence_recall", evidence_recall(evidence, packed.context))
            s.tokens.append(packed.tokens)
            s.over_budget += packed.tokens > budget
            if (counter := recounter(packed.tokenizer)) is not None:
                s.recounted += 1
                s.recount_mismatch += counter.count(packed.context) != packed.tokens


def summarise(stats: dict[int, BudgetStats]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for budget, s in stats.items():
        latency = distribution(s.latencies_ms, (50, 95))
        out[str(budget)] = {
            "evidence_recall": rounded(s.mean("evidence_recall"), 4),
            "by_category": {
                name: rounded(s.mean("evidence_recall", str(c)), 4)
                for c, name in CATEGORIES.items()
                if s.count(str(c), "evidence_recall")
            },
            "tokens_mean": rounded(mean(s.tokens), 1),
            "tokens_max": max(s.tokens, default=0),
            "over_budget": s.over_budget,
            "recounted": s.recounted,
            "recount_mismatch": s.recount_mismatch,
            "latency_ms_p50": latency["p50"],
            "latency_ms_p95": latency["p95"],
        }
    return out


def budget_list(raw: str) -> list[int]:
    budgets = [int(part) for part in raw.split(",") if part.strip()]  # argparse reports a ValueError
    if not budgets or any(not 1 <= b <= 100_000 for b in budgets):
        raise argparse.ArgumentTypeError("--budgets must list numbers from 1 to 100000")
    return list(dict.fromkeys(budgets))


def run_e2e(args: argparse.Namespace, conversations: list[Conversation]) -> int:
    budgets = args.budgets
    env = {"ENGRAM_LLM_PROVIDER": "offline", "ENGRAM_AUTO_MEMORY": "true", **dict(args.env)}
    run_id = uuid.uuid4().hex[:6]
    users = [(f"{user_id_for(i, c)}-{run_id}", c) for i, c in enumerate(conversations)]
    stats = {budget: BudgetStats() for budget in budgets}
    questions = sum(len(c.questions) for _, c in users)
    with BenchRun(keep=args.keep) as cleanup:
        try:
            stack, api_key = cleanup.stack("engram-bench-locomo-", up_workers(1, 1), env=env)
            with EngramClient(stack.url, api_key, timeout=120.0) as client:
                print(f"ingesting {len(users)} conversations ...", file=sys.stderr, flush=True)
                started = time.perf_counter()
                sessions = ingest_all(client, users)
                ingest_s = time.perf_counter() - started
                print(f"waiting for the memory pipeline on {len(sessions)} sessions ...", file=sys.stderr)
                memories = wait_idle(client, sessions, args.wait_timeout)
                settle_s = time.perf_counter() - started - ingest_s
                stack.check_alive()
                # The first context call loads the gateway's embedding model: not a latency a user sees twice.
                client.context(users[0][0], query="warm-up", max_tokens=budgets[0])
                print(f"asking {questions} questions at budgets {budgets} ...", file=sys.stderr, flush=True)
                for user, conversation in users:
                    ask(client, user, conversation, budgets, stats)
                    print(f"  {conversation.sample_id}: {len(conversation.questions)} questions", file=sys.stderr)
        except EngramAPIError as exc:
            raise BenchError(str(exc)) from exc  # BenchRun keeps the workdir: the logs say why
    result = {
        "mode": "e2e",
        "file": str(args.file),
        "conversations": len(users),
        "sessions": len(sessions),
        "messages": sum(len(c.turns) for _, c in users),
        "questions": questions,
        "evidence_turns": sum(len(q.evidence) for _, c in users for q in c.questions),
        "ingest_s": round(ingest_s, 2),
        "settle_s": round(settle_s, 2),
        "memories_created": memories,
        "budgets": summarise(stats),
        "cpus": os.cpu_count(),
        "env": {key: value for key, value in env.items() if key != "ENGRAM_AUTO_MEMORY"},
    }
    emit(outline("LoCoMo end to end (evidence recall in the context block, per max_tokens)", result), result, args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.locomo_retrieval", __doc__, keep=True)
    parser.add_argument("path", nargs="?", help="LoCoMo-format JSON file (or --file)")
    parser.add_argument("--file", default=None, help="LoCoMo-format JSON file")
    parser.add_argument("--mode", choices=("retrieval", "e2e"), default="retrieval")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument(
        "--store", choices=("units", "episodes"), default="units", help="retrieval mode: turns as units or episodes"
    )
    parser.add_argument("--database-url", default=None, help="retrieval mode (default: ENGRAM_DATABASE_URL)")
    group = parser.add_argument_group("e2e mode")
    group.add_argument("--budgets", type=budget_list, default="500,1000,2000", help="max_tokens values, a,b,c")
    group.add_argument("--env", type=env_setting, action="append", default=[], help="ENGRAM_KEY=VALUE (repeat)")
    group.add_argument("--wait-timeout", type=float, default=600.0, help="seconds for the memory pipeline to finish")
    args = parser.parse_args(argv)
    args.file = args.file or args.path
    if not args.file:
        parser.error("a LoCoMo-format JSON file is required (argument or --file)")
    if args.limit_conversations is not None and args.limit_conversations < 1:
        parser.error("--limit-conversations must be at least 1")

    def bench() -> int:
        conversations = read_conversations(args)  # a bad file: before starting anything
        configure_logging("WARNING")  # on stderr: stdout is the report
        return (run_e2e if args.mode == "e2e" else run)(args, conversations)

    return run_main(bench, error_code=2)


if __name__ == "__main__":
    sys.exit(main())
