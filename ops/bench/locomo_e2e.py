"""End-to-end mode of the LoCoMo benchmark (`python -m ops.bench.locomo_retrieval --mode e2e --file F`): ingest
through a private stack's messages API, then evidence recall in `POST /v1/users/{id}/context` at each budget (an
evidence turn counts when its whole `normalise`d text occurs in the context). docs/benchmarks.md has the protocol.
"""

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
from typing import Any

from engramhq_client import EngramAPIError, EngramClient

from ops.bench.harness import BenchError, BenchRun, emit, mean, outline, percentile, rounded
from ops.bench.locomo_data import CATEGORIES, Conversation, session_messages
from ops.bench.stack import LocalStack, up_workers
from shared.context.tokens import O200K, TokenCounter, counter_for

DEFAULT_BUDGETS = (500, 1000, 2000)
BATCH = 200  # messages per ingest call: under the gateway's default ENGRAM_INGEST_MAX_MESSAGES (500)
MAX_QUERY_CHARS = 2000  # the context endpoint's limit on `query`
_NOT_WORD = re.compile(r"[\W_]+")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:@-]+")


def normalise(text: str) -> str:
    """Compatibility-normalised, case-folded, letters and digits only, single spaces, padded with a space at
    each end so that containment of one normalised text in another holds on word boundaries."""
    words = _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return f" {words} " if words else ""


def evidence_recall(evidence_texts: Sequence[str], context: str) -> float:
    """The share of the evidence turns (their normalised text) present in the normalised context."""
    haystack = normalise(context)
    wanted = [normalise(text) for text in evidence_texts]
    wanted = [text for text in wanted if text]
    if not wanted:
        return 0.0
    return sum(1 for text in wanted if text in haystack) / len(wanted)


def user_id_for(index: int, conversation: Conversation) -> str:
    """An engram user id (ID pattern: letters, digits, ._:@-) that keeps the sample id readable."""
    safe = _UNSAFE_ID.sub("-", conversation.sample_id).strip("-.:@")[:60] or "conversation"
    return f"locomo-{index:03d}-{safe}"


def ingest_all(client: EngramClient, users: Sequence[tuple[str, Conversation]]) -> list[tuple[str, str]]:
    """Every conversation through the messages API; returns the (user, session key) pairs."""
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
class BudgetStats:
    recall: dict[str, list[float]] = field(default_factory=dict)  # "all" or a category → per question
    tokens: list[int] = field(default_factory=list)
    over_budget: int = 0  # reported tokens > max_tokens
    recount_mismatch: int = 0  # our count of the returned text differs from the reported one
    recounted: int = 0
    latencies_ms: list[float] = field(default_factory=list)


def recounter(tokenizer: str) -> TokenCounter | None:
    # The server counts with the OpenAI encoding of its model, o200k_base for a model it does not know.
    counter = counter_for("openai", "gpt-4o") if tokenizer == O200K else None
    return counter if counter is not None and counter.name == O200K else None


def ask(
    client: EngramClient,
    user: str,
    conversation: Conversation,
    budgets: Sequence[int],
    stats: dict[int, BudgetStats],
) -> None:
    texts = {turn.dia_id: turn.said for turn in conversation.turns}
    for index, question in enumerate(conversation.questions):
        evidence = [texts[dia_id] for dia_id in question.evidence]
        # The first call of a question embeds the query; the others find its vector in the embedding cache.
        # Rotating which budget goes first gives every budget the same share of cold calls.
        shift = index % len(budgets)
        for budget in [*budgets[shift:], *budgets[:shift]]:
            started = time.perf_counter()
            packed = client.context(user, query=question.text[:MAX_QUERY_CHARS], max_tokens=budget)
            elapsed = (time.perf_counter() - started) * 1000
            s = stats[budget]
            for group in ("all", str(question.category)):
                s.recall.setdefault(group, []).append(evidence_recall(evidence, packed.context))
            s.tokens.append(packed.tokens)
            s.over_budget += packed.tokens > budget
            counter = recounter(packed.tokenizer)
            if counter is not None:
                s.recounted += 1
                s.recount_mismatch += counter.count(packed.context) != packed.tokens
            s.latencies_ms.append(elapsed)


def summarise(stats: dict[int, BudgetStats]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for budget, s in stats.items():
        out[str(budget)] = {
            "evidence_recall": rounded(mean(s.recall.get("all", [])), 4),
            "by_category": {
                name: rounded(mean(s.recall.get(str(c), [])), 4)
                for c, name in CATEGORIES.items()
                if s.recall.get(str(c))
            },
            "tokens_mean": rounded(mean(s.tokens), 1),
            "tokens_max": max(s.tokens, default=0),
            "over_budget": s.over_budget,
            "recounted": s.recounted,
            "recount_mismatch": s.recount_mismatch,
            "latency_ms_p50": rounded(percentile(s.latencies_ms, 50), 1),
            "latency_ms_p95": rounded(percentile(s.latencies_ms, 95), 1),
        }
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("e2e mode")
    group.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)), help="max_tokens values, a,b,c")
    group.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an ENGRAM_ setting (repeat)")
    group.add_argument("--wait-timeout", type=float, default=600.0, help="seconds for the memory pipeline to finish")
    group.add_argument("--keep", action="store_true", help="keep the stack's temporary directory (logs, data)")


def parse_budgets(raw: str) -> list[int]:
    try:
        budgets = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise BenchError(f"--budgets takes whole numbers separated by commas, not {raw!r}") from exc
    if not budgets or any(not 1 <= b <= 100_000 for b in budgets):
        raise BenchError("--budgets must list numbers from 1 to 100000")
    return list(dict.fromkeys(budgets))


def stack_env(args: argparse.Namespace) -> dict[str, str]:
    env = {"ENGRAM_LLM_PROVIDER": "offline", "ENGRAM_AUTO_MEMORY": "true"}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("ENGRAM_"):
            raise BenchError(f"--env takes ENGRAM_KEY=VALUE, not {item!r}")
        env[key] = value
    return env


def run(args: argparse.Namespace, conversations: list[Conversation]) -> int:
    budgets = parse_budgets(args.budgets)
    env = stack_env(args)
    with BenchRun(keep=args.keep) as cleanup:
        workdir = cleanup.workdir("engram-bench-locomo-")
        stack = LocalStack(workdir, 1, workers=up_workers(1, 1), env=env)
        cleanup.callback(stack.stop)
        print(f"starting a private stack in {workdir} ...", file=sys.stderr, flush=True)
        try:
            result = ask_all(args, stack, stack.start(), conversations, budgets)
        except EngramAPIError as exc:
            raise BenchError(str(exc)) from exc  # BenchRun keeps the workdir: the logs say why
    result["env"] = {key: value for key, value in env.items() if key != "ENGRAM_AUTO_MEMORY"}
    emit(outline("LoCoMo end to end (evidence recall in the context block, per max_tokens)", result), result, args.json)
    return 0


def ask_all(
    args: argparse.Namespace,
    stack: LocalStack,
    api_key: str,
    conversations: list[Conversation],
    budgets: list[int],
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    users = [(f"{user_id_for(i, c)}-{run_id}", c) for i, c in enumerate(conversations)]
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
        stats = {budget: BudgetStats() for budget in budgets}
        questions = sum(len(c.questions) for _, c in users)
        print(f"asking {questions} questions at budgets {budgets} ...", file=sys.stderr, flush=True)
        for user, conversation in users:
            ask(client, user, conversation, budgets, stats)
            print(f"  {conversation.sample_id}: {len(conversation.questions)} questions", file=sys.stderr)
    return {
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
    }
