"""End-to-end mode of the LoCoMo benchmark: conversations go in through the messages API, questions are
answered from `POST /v1/users/{id}/context`, and what is measured is whether the evidence turns reach the
context block an outside agent would put in its prompt.

    python -m ops.bench.locomo_retrieval --mode e2e --file path/to/locomo.json [--limit-conversations N]
                                         [--budgets 500,1000,2000] [--compaction-tokens N] [--json]

It starts a private stack (ops/bench/stack.py: embedded Postgres and valkey, the gateway, the two workers
`engram up` runs, with one process each) with the offline model (ENGRAM_LLM_PROVIDER=offline: extraction by
rules, no language model) and the product's memory settings unless flags say otherwise. Then:

1. Ingest. One engram user per conversation, one engram session per LoCoMo session (`session-<n>`), its
   turns in order through `EngramClient.ingest` (engramhq_client, clients/python): role `user` for both
   speakers (LoCoMo is two people talking; neither is an assistant, and extraction mines user messages), the speaker as
   `name`, the dialogue text (plus " [image: <caption>]" when the turn shared an image) as content,
   `created_at` the session's date plus the turn's index in seconds (distinct, ordered times), the dia_id as
   the message's idempotency key. Every conversation is ingested before waiting, so the workers overlap.
2. Wait. `EngramClient.wait_until_idle` on every session (GET …/memory-status until every message is mined,
   every memory from it embedded and every message's transcript unit has its vector), within --wait-timeout
   overall; the time from the end of the ingest to then is reported as `settle_s`. With --compaction-tokens
   the benchmark also waits, in Postgres, until no session over the threshold is left uncompacted.
3. Ask. For each question with evidence (category 5, adversarial, has none), `EngramClient.context` with
   the question as `query` (no session: the question is about the whole history) at every budget.
   Latency is the client's wall time for that call (HTTP included); one call before the timed ones loads
   the gateway's embedding model. Of a question's calls, the first embeds the question and the others
   find the vector in the embedding cache; which budget goes first rotates from question to question.

Evidence recall of a question = the share of its evidence turns whose text is present in the returned
`context`; the figure is the mean over questions (as recall@k in the retrieval mode). "Present" is
normalised containment (`normalise`): Unicode NFKC, case-folded, every run of characters that are not
letters or digits made one space, then the turn's text must occur in the context's text on word
boundaries. That survives what the context compiler does to an item (whitespace collapsed, fence
markers removed, "[user]:" labels and "- " bullets around it) without crediting a turn for a fragment:
the whole of what was said must be there. A fact extracted from a turn in other words does not count
(it may still answer the question, but this measures whether what was said reaches the prompt). Very
short turns ("Yes!") could be matched by accident; the dev file has 2 evidence turns under five words.
The image caption is not part of the text looked for (what was said is enough).

Tokens: the `tokens` the API reports for each block, checked against max_tokens, and recounted here with
the same tokenizer (named in the response) when it is a BPE encoding this process can load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from engramhq_client import EngramAPIError, EngramClient

from ops.bench.harness import BenchError, BenchRun, add_keep_flag, emit, percentile, rounded, shown
from ops.bench.locomo_data import CATEGORIES, Conversation, Question, session_messages
from ops.bench.locomo_turns import Script, play
from ops.bench.stack import LocalStack, up_workers
from ops.fake_llm import FakeLLM
from shared.context.tokens import O200K, TokenCounter, counter_for

DEFAULT_BUDGETS = (500, 1000, 2000)
BATCH = 200  # messages per ingest call: under the gateway's default ENGRAM_INGEST_MAX_MESSAGES (500)
MAX_QUERY_CHARS = 2000  # the context endpoint's limit on `query`
SECTION_NAMES = ("profile", "active_task", "summary", "relevant_memories", "transcript", "what_you_know", "reflection")
_NOT_WORD = re.compile(r"[\W_]+")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:@-]+")


# ---------------------------------------------------------------------------------------------------
# Presence of a turn in a context block


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


# ---------------------------------------------------------------------------------------------------
# Ingest


def user_id_for(index: int, conversation: Conversation) -> str:
    """An engram user id (ID pattern: letters, digits, ._:@-) that keeps the sample id readable."""
    safe = _UNSAFE_ID.sub("-", conversation.sample_id).strip("-.:@")[:60] or "conversation"
    return f"locomo-{index:03d}-{safe}"


@dataclass
class IngestReport:
    sessions: list[tuple[str, str]] = field(default_factory=list)  # (user, session key)
    messages: int = 0
    seconds: float = 0.0


def ingest_all(client: EngramClient, users: Sequence[tuple[str, Conversation]]) -> IngestReport:
    report = IngestReport()
    started = time.perf_counter()
    for user, conversation in users:
        for number, messages in sorted(session_messages(conversation).items()):
            key = f"session-{number}"
            for start in range(0, len(messages), BATCH):
                client.ingest(user, key, messages[start : start + BATCH])
            report.sessions.append((user, key))
            report.messages += len(messages)
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------------------------------------------
# Waiting until the memory pipeline is done


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


def wait_compacted(database_url: str, users: Sequence[str], threshold: int, timeout: float) -> None:
    """Compaction done for these users: no session at or over the threshold left uncompacted."""
    from shared.infra.db import connect

    deadline = time.monotonic() + timeout
    with connect(database_url) as conn:
        conn.autocommit = True
        while True:
            row = conn.execute(
                """SELECT
                     (SELECT count(*) FROM sessions s JOIN users u ON u.id = s.user_id
                       WHERE u.external_id = ANY(%(users)s) AND s.compaction_count = 0
                         AND s.token_count >= %(threshold)s
                         -- the newest message is never compacted: a one-message session has nothing to compact
                         AND (SELECT count(*) FROM session_messages m WHERE m.session_id = s.id) > 1)
                       AS uncompacted""",
                {"users": list(users), "threshold": threshold},
            ).fetchone()
            assert row is not None
            if row["uncompacted"] == 0:
                return
            if time.monotonic() >= deadline:
                raise BenchError(f"compaction not done within {timeout:.0f} s: {row['uncompacted']} sessions left")
            time.sleep(0.25)


@dataclass
class UnitFigures:
    units: int
    embedded: int
    searchable_lag_s: list[float]  # per unit: stored (the ingest's commit) -> its vector stored

    def lag_percentile(self, q: float) -> float | None:
        return rounded(percentile(self.searchable_lag_s, q), 2)  # None without any


def transcript_units(database_url: str, users: Sequence[str]) -> UnitFigures:
    """The transcript units of these users' messages, how many have their vector, and how long each waited."""
    from shared.infra.db import connect

    with connect(database_url) as conn:
        rows = conn.execute(
            """SELECT c.embedding IS NOT NULL AS embedded, extract(epoch FROM c.embedded_at - c.created_at) AS lag
               FROM memory_chunks c JOIN users u ON u.id = c.user_id
               WHERE u.external_id = ANY(%s) AND c.message_id IS NOT NULL""",
            (list(users),),
        ).fetchall()
    lags = [float(row["lag"]) for row in rows if row["lag"] is not None]
    return UnitFigures(len(rows), sum(1 for row in rows if row["embedded"]), lags)


# ---------------------------------------------------------------------------------------------------
# Asking


@dataclass
class BudgetStats:
    recall: dict[str, list[float]] = field(default_factory=dict)  # "all" or a category → per question
    complete: list[float] = field(default_factory=list)  # 1.0 when every evidence turn was present
    tokens: list[int] = field(default_factory=list)
    over_budget: int = 0  # reported tokens > max_tokens
    recount_mismatch: int = 0  # our count of the returned text differs from the reported one
    recounted: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    section_items: dict[str, int] = field(default_factory=dict)  # items per section, summed

    def add_recall(self, category: int, value: float) -> None:
        for group in ("all", str(category)):
            self.recall.setdefault(group, []).append(value)
        self.complete.append(1.0 if value == 1.0 else 0.0)


def recounter(tokenizer: str) -> TokenCounter | None:
    # The server counts with the OpenAI encoding of its model, o200k_base for a model it does not know.
    if tokenizer == O200K:
        counter = counter_for("openai", "gpt-4o")
        return counter if counter.name == O200K else None
    return None


def ask(
    client: EngramClient,
    user: str,
    conversation: Conversation,
    budgets: Sequence[int],
    stats: dict[int, BudgetStats],
    dump: TextIO | None = None,
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
            record(stats[budget], question, evidence, budget, packed.context, packed.tokens, packed.tokenizer)
            if dump is not None:
                row = {
                    "sample_id": conversation.sample_id,
                    "question": question.text,
                    "category": question.category,
                    "evidence": dict(zip(question.evidence, evidence, strict=True)),
                    "max_tokens": budget,
                    "recall": stats[budget].recall["all"][-1],
                    "tokens": packed.tokens,
                    "context": packed.context,
                }
                dump.write(json.dumps(row, ensure_ascii=False) + "\n")
            stats[budget].latencies_ms.append(elapsed)
            for section in packed.sections:
                stats[budget].section_items[section.name] = stats[budget].section_items.get(section.name, 0) + len(
                    section.items
                )


def record(
    stats: BudgetStats, question: Question, evidence: Sequence[str], budget: int, context: str, tokens: int, tok: str
) -> None:
    stats.add_recall(question.category, evidence_recall(evidence, context))
    stats.tokens.append(tokens)
    if tokens > budget:
        stats.over_budget += 1
    counter = recounter(tok)
    if counter is not None:
        stats.recounted += 1
        if counter.count(context) != tokens:
            stats.recount_mismatch += 1


# ---------------------------------------------------------------------------------------------------
# Reporting


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(stats: dict[int, BudgetStats], questions: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for budget, s in stats.items():
        out[str(budget)] = {
            "evidence_recall": rounded(_mean(s.recall.get("all", [])), 4),
            "by_category": {
                name: rounded(_mean(s.recall.get(str(c), [])), 4)
                for c, name in CATEGORIES.items()
                if s.recall.get(str(c))
            },
            "all_evidence_present": rounded(_mean(s.complete), 4),
            "tokens_mean": rounded(_mean(s.tokens), 1),
            "tokens_max": max(s.tokens, default=0),
            "over_budget": s.over_budget,
            "recounted": s.recounted,
            "recount_mismatch": s.recount_mismatch,
            "latency_ms_p50": rounded(percentile(s.latencies_ms, 50), 1),
            "latency_ms_p95": rounded(percentile(s.latencies_ms, 95), 1),
            "section_items_mean": {
                name: round(s.section_items[name] / questions, 2) for name in SECTION_NAMES if name in s.section_items
            }
            if questions
            else {},
        }
    return out


def render(result: dict[str, Any]) -> str:
    lines = [
        f"LoCoMo end to end: {result['conversations']} conversations, {result['sessions']} sessions, "
        f"{result['messages']} messages, {result['questions']} questions ({result['evidence_turns']} evidence turns)",
        f"ingest {result['ingest_s']:.1f} s; memory pipeline idle {result['settle_s']:.1f} s later; "
        f"{result['memories_created']} memories extracted; {result['transcript_units']} transcript units, "
        f"{result['transcript_units_embedded']} with vectors; ingest to vector-searchable p50 "
        f"{result['vector_searchable_s_p50']} s, p95 {result['vector_searchable_s_p95']} s (full text: at once)",
        "",
        f"{'budget':>7} {'recall':>7} {'all-ev':>7} {'tokens':>7} {'max':>6} {'over':>5} {'p50 ms':>7} {'p95 ms':>7}"
        "   items per question by section",
    ]
    for budget, b in result["budgets"].items():
        items = ", ".join(f"{name} {count}" for name, count in b["section_items_mean"].items()) or "-"
        recall, complete = shown(b["evidence_recall"], ".3f"), shown(b["all_evidence_present"], ".3f")
        tokens, p50, p95 = (shown(b[name], ".0f") for name in ("tokens_mean", "latency_ms_p50", "latency_ms_p95"))
        lines.append(
            f"{budget:>7} {recall:>7} {complete:>7} {tokens:>7} {b['tokens_max']:>6} {b['over_budget']:>5} "
            f"{p50:>7} {p95:>7}   {items}"
        )
    lines.append("")
    lines.append("recall by category:")
    for budget, b in result["budgets"].items():
        cells = ", ".join(f"{name} {value:.3f}" for name, value in b["by_category"].items())
        lines.append(f"  {budget:>5}: {cells or '-'}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# Main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("e2e mode")
    group.add_argument(
        "--budgets", default=",".join(map(str, DEFAULT_BUDGETS)), help="max_tokens values, comma separated"
    )
    group.add_argument(
        "--compaction-tokens",
        type=int,
        default=None,
        metavar="N",
        help="ENGRAM_COMPACTION_THRESHOLD_TOKENS (min 200; default: the product's, 60%% of the model's window)",
    )
    group.add_argument(
        "--debounce-s", type=float, default=None, help="ENGRAM_EXTRACTION_DEBOUNCE_SECONDS (default: the product's)"
    )
    group.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra ENGRAM_ setting for the stack (repeatable), e.g. ENGRAM_SEARCH_RELATIVE_FLOOR=0.2",
    )
    group.add_argument("--wait-timeout", type=float, default=600.0, help="seconds for the memory pipeline to finish")
    group.add_argument(
        "--shape",
        choices=("ingest", "turns"),
        default="ingest",
        help="how the conversations go in: the messages API (offline model), or played as engram's own chat "
        "turns against a scripted fake model (ops/bench/locomo_turns.py)",
    )
    add_keep_flag(group, "keep the stack's temporary directory (logs, data)")
    group.add_argument(
        "--dump", default=None, metavar="PATH", help="write every question's context and recall to PATH (JSON lines)"
    )


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
    if args.compaction_tokens is not None:
        env["ENGRAM_COMPACTION_THRESHOLD_TOKENS"] = str(args.compaction_tokens)
    if args.debounce_s is not None:
        env["ENGRAM_EXTRACTION_DEBOUNCE_SECONDS"] = str(args.debounce_s)
    return env


def run(args: argparse.Namespace, conversations: list[Conversation]) -> int:
    budgets = parse_budgets(args.budgets)
    if args.compaction_tokens is not None and args.compaction_tokens < 200:
        raise BenchError("--compaction-tokens must be at least 200 (the setting's minimum)")
    env = stack_env(args)
    try:  # set by --compaction-tokens or --env: then compaction is waited on too
        compaction_tokens = int(env["ENGRAM_COMPACTION_THRESHOLD_TOKENS"])
    except KeyError:
        compaction_tokens = None
    except ValueError as exc:
        raise BenchError("ENGRAM_COMPACTION_THRESHOLD_TOKENS must be a whole number") from exc
    run_id = uuid.uuid4().hex[:6]
    with BenchRun(keep=args.keep) as cleanup:
        workdir = cleanup.workdir("engram-bench-locomo-")
        llm_url, script = None, None
        if args.shape == "turns":
            script = Script()
            fake = FakeLLM()
            fake.default = script
            fake.start()
            cleanup.callback(fake.stop)
            env["ENGRAM_LLM_PROVIDER"] = "anthropic"
            llm_url = fake.anthropic_base_url
        stack = LocalStack(workdir, 1, llm_url=llm_url, workers=up_workers(1, 1), env=env)
        cleanup.callback(stack.stop)
        print(f"starting a private stack in {workdir} ...", file=sys.stderr, flush=True)
        try:
            return ask_all(args, stack, stack.start(), conversations, budgets, compaction_tokens, env, run_id, script)
        except EngramAPIError as exc:
            raise BenchError(str(exc)) from exc  # BenchRun keeps the workdir: the logs say why


def ask_all(
    args: argparse.Namespace,
    stack: LocalStack,
    api_key: str,
    conversations: list[Conversation],
    budgets: list[int],
    compaction_tokens: int | None,
    env: dict[str, str],
    run_id: str,
    script: Script | None = None,
) -> int:
    users = [(f"{user_id_for(i, c)}-{run_id}", c) for i, c in enumerate(conversations)]
    with EngramClient(stack.url, api_key, timeout=120.0) as client:
        if script is None:
            print(f"ingesting {len(users)} conversations ...", file=sys.stderr, flush=True)
            ingested = ingest_all(client, users)
        else:
            print(f"playing {len(users)} conversations as chat turns ...", file=sys.stderr, flush=True)
            played = play(stack.url, api_key, users, script)
            ingested = IngestReport(played.sessions, played.messages, played.seconds)
        settle_started = time.perf_counter()
        print(f"waiting for the memory pipeline on {len(ingested.sessions)} sessions ...", file=sys.stderr)
        memories = wait_idle(client, ingested.sessions, args.wait_timeout)
        if compaction_tokens is not None:
            wait_compacted(stack.database_url, [u for u, _ in users], compaction_tokens, args.wait_timeout)
        settle_s = time.perf_counter() - settle_started
        units = transcript_units(stack.database_url, [u for u, _ in users])
        stack.check_alive()
        # The first context call loads the gateway's embedding model: not a latency a user sees twice.
        client.context(users[0][0], query="warm-up", max_tokens=budgets[0])
        stats = {budget: BudgetStats() for budget in budgets}
        questions = sum(len(c.questions) for _, c in users)
        print(f"asking {questions} questions at budgets {budgets} ...", file=sys.stderr, flush=True)
        with contextlib.ExitStack() as files:
            dump = files.enter_context(Path(args.dump).open("w", encoding="utf-8")) if args.dump else None
            for user, conversation in users:
                ask(client, user, conversation, budgets, stats, dump)
                print(f"  {conversation.sample_id}: {len(conversation.questions)} questions", file=sys.stderr)
    result = {
        "mode": "e2e",
        "shape": args.shape,
        "file": str(args.file),
        "conversations": len(users),
        "sessions": len(ingested.sessions),
        "messages": ingested.messages,
        "questions": questions,
        "evidence_turns": sum(len(q.evidence) for _, c in users for q in c.questions),
        "ingest_s": round(ingested.seconds, 2),
        "settle_s": round(settle_s, 2),
        "memories_created": memories,
        "transcript_units": units.units,
        "transcript_units_embedded": units.embedded,
        "vector_searchable_s_p50": units.lag_percentile(50),
        "vector_searchable_s_p95": units.lag_percentile(95),
        "budgets": summarise(stats, questions),
        "config": {
            "llm": "offline" if script is None else "fake anthropic (scripted replies, nothing extracted)",
            "compaction_tokens": compaction_tokens,
            "debounce_s": args.debounce_s,
            "env": {
                key: value for key, value in env.items() if key not in ("ENGRAM_LLM_PROVIDER", "ENGRAM_AUTO_MEMORY")
            },
            "workers": "worker-turns x1, worker-background x1",
            "cpus": os.cpu_count(),
        },
    }
    emit(render(result), result, args.json)
    return 0
