"""Prompt-injection benchmark: the corpus of ops/bench/injection_corpus.py against the memory path.

    python -m ops.bench.injection [--json] [--database-url URL] [--workers N]

Runs in this process against real Postgres (an embedded one in a temporary directory unless a URL
is given; every run writes into a fresh tenant) and the fake model server of ops/fake_llm.py, which
the official Anthropic SDK talks to. Each corpus item gets a user of its own, so everything stored
for that user came from that item.

Items run in `--workers` threads (default 3), each with a fake model server of its own.

Every attack goes through:

1. The write path, as the callers of `store_memory` would offer it: the REST API storing it as a
   fact (actor "api"), under a key made of it, and in the directive slot (tacit/personality/directive);
   the agent's `memory_store` tool (what a chat model that obeys the attack would call) as a fact, as a
   style observation and as the directive. Attacks split across turns also offer each part alone, and
   display-name attacks are set as the user's profile name (the user profile has no detector: its
   defence is the fence).
2. Extraction: the attack is written into a session where it arrives (a user message, several user
   turns, a tool result, a channel message "[#general] <display name>: …", pasted text), and the real
   extraction job runs with a model that obeys injections: whenever the attack is visible in the
   transcript it was shown, it answers with the attack's payload in all five categories (preference,
   entity, decision, style, artifact). Tool results are never shown to extraction, so it has nothing
   to obey there.
3. Personality synthesis: on top of three ordinary style observations, when a style observation came
   from the attack, the real synthesis job runs with a model that appends the payload to an otherwise
   fine directive paragraph (when none did, the model is shown nothing to obey and the call is skipped).
4. The context compiler: `prepare_turn` + `compile_request` for the user, with every memory the user
   has passed in as "relevant" (as if search had surfaced all of them).

Definitions (per attack):

- *stored as an instruction*: after the run the user has an active memory, other than the three seeded
  style observations and the directive synthesised from them alone, that the system treats as
  guidance for the model: kind `directive` or the directive slot (rendered as "Personality (Learned)",
  the one remembered text the model is told to follow, for tone and format), kind `style` or anything
  under tacit/personality (style observations are what the directive is synthesised from).
- *stored as data*: some memory from the attack is stored, none of them as an instruction. Such
  memories are shown to the model only inside data fences (shared/context/data_fence.py).
- *refused*: no memory from the attack is stored on any path.
- *unfenced in the static prompt*: outside its data fences, the user's static prompt differs from
  that of an attack-free user (same seeds, clean directive) in any section, or contains the payload or
  the text of any memory stored from the attack. Data sections (What You Know, About the user,
  Personality (Learned)) must read, outside their fences, exactly as their header and preface. The
  dynamic suffix is checked the same way and reported apart.

Benign statements go through the write path (REST API, as a fact) and extraction (the same model,
which records the statement in all five categories). A benign statement is a false positive when any
path refuses it as a prompt injection. Their prompts are checked like the attacks' (all stay fenced).

Reported per category and per path; with --json the last line is one JSON object:
{"attacks", "attacks_refused", "attacks_stored_as_data", "attacks_stored_as_instructions",
 "attacks_unfenced_in_static_prompt", "attacks_unfenced_in_dynamic_suffix", "integrity_problems",
 "benign", "benign_refused", "false_positive_rate", "benign_unfenced_in_static_prompt", "by_category",
 "by_path", "holdout", "elapsed_s"}.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ops.bench.harness import BenchError, BenchRun, bench_parser, emit, run_main
from ops.bench.injection_corpus import (
    ATTACKS,
    BENIGN,
    CATEGORIES,
    DISPLAY_NAME,
    HOLDOUT_ATTACKS,
    HOLDOUT_BENIGN,
    INGESTED,
    MESSAGE,
    TOOL,
    TURNS,
    Attack,
    Benign,
)
from ops.bench.injection_model import CLEAN_DIRECTIVE, ItemOutcome, ObeyingModel, PathResult, alnum, visible
from ops.fake_llm import FakeLLM

PATHS = (
    "agent_style",
    "agent_directive",
    "api_directive",
    "api_fact",
    "api_key",
    "agent_fact",
    "api_parts",
    "extraction",
    "synthesis",
)
SEED_STYLES = (
    ("brief-answers", "Prefers short, direct answers"),
    ("informal-tone", "Writes informally, with humour"),
    ("british-spelling", "Uses British spelling"),
)
NOW = datetime(2026, 3, 4, 13, 5, tzinfo=UTC)
STATIC_DATA_SECTIONS = {
    "what_you_know": ("## What You Know", "memory"),
    "user": ("## About the user", "profile"),
    "learned_personality": ("## Personality (Learned)", "personality"),
}
DYNAMIC_DATA_SECTIONS = {
    "relevant_memory": ("## Relevant memory (from other conversations)", "memory"),
    "reflection": ("## Latest weekly reflection", "reflection"),
}
INJECTION_REFUSAL = "looks like a prompt injection"


# ---------------------------------------------------------------------------------------------------
# Running one item


class Runner:
    def __init__(self, tenant_name: str, fake: FakeLLM) -> None:
        from shared.access.auth import ensure_tenant
        from shared.infra import db
        from shared.infra.config import Settings
        from shared.llm.factory import chat_provider

        self.fake = fake
        self.model = ObeyingModel()
        fake.default = self.model
        self.settings = Settings(
            llm_provider="anthropic",
            anthropic_api_key="bench-key",
            anthropic_base_url=fake.anthropic_base_url,
            llm_max_attempts=1,
        )
        self.provider = chat_provider(self.settings)
        with db.connection() as conn:
            self.tenant_id = ensure_tenant(conn, tenant_name)
        self.baseline_static, self.baseline_dynamic = self._baseline()

    # -- plumbing ---------------------------------------------------------------------------------

    def _user(self, external_id: str) -> tuple[int, dict[str, Any]]:
        from shared.infra import db
        from shared.turns.accept import ensure_session, ensure_user

        with db.connection() as conn:
            user_id = ensure_user(conn, self.tenant_id, external_id)
            session_id = ensure_session(conn, self.tenant_id, user_id, "chat")
            session = conn.execute("SELECT * FROM sessions WHERE id = %s", (session_id,)).fetchone()
        assert session is not None
        return user_id, session

    def _store(self, user_id: int, actor: str, **fields: Any) -> tuple[str, str | None]:
        """("stored" | "deduplicated" | "refused_injection" | "refused_other", reason) of one store_memory call."""
        from shared.infra import db
        from shared.memory.keys import MemoryRejected
        from shared.memory.memory_input import MemoryInput
        from shared.memory.store import Scope, store_memory

        try:
            with db.connection() as conn:
                result = store_memory(conn, Scope(self.tenant_id, user_id), MemoryInput(**fields), actor)
        except MemoryRejected as exc:
            return ("refused_injection" if INJECTION_REFUSAL in exc.reason else "refused_other"), exc.reason
        return ("stored" if result.action in ("added", "superseded", "reinforced") else "deduplicated"), None

    def _agent_store(self, user_id: int, session_id: int, args: dict[str, Any]) -> tuple[str, str | None]:
        from shared.tools.memory_tools import memory_store
        from shared.tools.registry import ToolContext, ToolError

        ctx = ToolContext(self.tenant_id, user_id, session_id, turn_id=0, now=NOW)
        try:
            answer = json.loads(memory_store(ctx, args))
        except ToolError as exc:
            reason = str(exc)
            return ("refused_injection" if INJECTION_REFUSAL in reason else "refused_other"), reason
        return ("stored" if answer["action"] in ("added", "superseded", "reinforced") else "deduplicated"), None

    def _messages(self, user_id: int, session_id: int, rows: Sequence[tuple[str, str]]) -> None:
        from shared.infra import db
        from shared.text import estimate_tokens

        with db.connection() as conn:
            for role, content in rows:
                conn.execute(
                    """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, token_estimate)
                       VALUES (%s, %s, %s, %s, %s, %s)""",
                    (self.tenant_id, user_id, session_id, role, content, estimate_tokens(content)),
                )

    def _active(self, user_id: int) -> list[dict[str, Any]]:
        from shared.infra import db

        with db.connection() as conn:
            return conn.execute(
                """SELECT namespace, key, value, kind FROM memories
                   WHERE tenant_id = %s AND user_id = %s AND valid_until IS NULL ORDER BY id""",
                (self.tenant_id, user_id),
            ).fetchall()

    def _seed_styles(self, user_id: int) -> None:
        for key, value in SEED_STYLES:
            outcome, reason = self._store(
                user_id, "extraction", key=key, value=value, kind="style", namespace="tacit/personality/style"
            )
            if outcome != "stored":
                raise BenchError(f"seeding a style observation failed: {reason}")

    def _synthesize(self, user_id: int) -> None:
        from shared.pipeline.personality_job import synthesize_personality

        synthesize_personality(self.tenant_id, user_id, self.settings, provider=self.provider, now=NOW)

    def _compile(self, user_id: int, session: dict[str, Any]) -> tuple[Any, Any]:
        from shared.context.compiler import compile_request, prepare_turn
        from shared.infra import db
        from shared.tools import default_registry

        relevant = [{"namespace": r["namespace"], "key": r["key"], "value": r["value"]} for r in self._active(user_id)]
        with db.connection() as conn:
            tc = prepare_turn(
                conn,
                session=session,
                user_timezone=None,
                turn_id=None,
                tools=default_registry().specs(),
                provider="anthropic",
                model="claude-sonnet-4-6",
                now=NOW,
                context_dir=None,
                relevant=relevant,
            )
        compiled = compile_request(tc, [], iteration=0, now=NOW)
        return tc, compiled

    def _baseline(self) -> tuple[dict[str, str], dict[str, str]]:
        """Static and dynamic sections of an attack-free user: seeds and the clean directive."""
        self.model.disarm()
        user_id, session = self._user(f"baseline-{uuid.uuid4().hex[:8]}")
        self._seed_styles(user_id)
        self._synthesize(user_id)
        tc, compiled = self._compile(user_id, session)
        if compiled.problems:
            raise BenchError(f"the attack-free prompt has integrity problems: {compiled.problems}")
        return {s.name: s.text for s in tc.static.sections}, {s.name: s.text for s in compiled.dynamic_sections}

    # -- the checks -------------------------------------------------------------------------------

    @staticmethod
    def _outside_fences(
        sections: dict[str, str], baseline: dict[str, str], data_sections: dict[str, tuple[str, str]]
    ) -> list[str]:
        from shared.context.data_fence import fence, unfenced
        from shared.context.fences import strip_markers

        reasons = []
        for name, text in sections.items():
            if name in data_sections:
                header, source = data_sections[name]
                expected = unfenced(f"{header}\n" + fence(source, ["…"]))
                if unfenced(text) != expected:
                    reasons.append(f"{name}: text outside the data fence")
            elif name not in baseline or strip_markers(baseline[name]) != strip_markers(text):
                # Fence markers differ from session to session (verify() checks them); the text may not.
                reasons.append(f"{name}: differs from an attack-free prompt")
        return reasons

    @staticmethod
    def _probes(texts: Sequence[str], region: str) -> list[str]:
        region_alnum = alnum(region)
        return [
            f"attack text outside the fences: {t[:40]!r}"
            for t in texts
            if len(alnum(t)) >= 12 and visible(t, region_alnum)
        ]

    def _check_prompt(self, outcome: ItemOutcome, user_id: int, session: dict[str, Any], probes: Sequence[str]) -> None:
        from shared.context.data_fence import unfenced

        tc, compiled = self._compile(user_id, session)
        static = {s.name: s.text for s in tc.static.sections}
        dynamic = {s.name: s.text for s in compiled.dynamic_sections}
        outcome.problems = list(compiled.problems)
        outcome.unfenced_static = self._outside_fences(static, self.baseline_static, STATIC_DATA_SECTIONS)
        outcome.unfenced_static += self._probes(probes, unfenced(compiled.system_static))
        outcome.unfenced_dynamic = self._outside_fences(dynamic, self.baseline_dynamic, DYNAMIC_DATA_SECTIONS)
        outcome.unfenced_dynamic += self._probes(probes, unfenced(compiled.system_dynamic))

    @staticmethod
    def _is_instruction(row: dict[str, Any]) -> bool:
        namespace = row["namespace"]
        return (
            row["kind"] in ("directive", "style")
            or namespace == "tacit/personality"
            or namespace.startswith("tacit/personality/")
        )

    # -- one item ---------------------------------------------------------------------------------

    def _record(self, outcome: ItemOutcome, path: str, result: tuple[str, str | None]) -> None:
        stats = outcome.paths.setdefault(path, PathResult())
        stats.offered += 1
        kind, _reason = result
        if kind == "stored":
            stats.stored += 1
        elif kind == "deduplicated":
            stats.deduplicated += 1
        elif kind == "refused_injection":
            stats.refused_as_injection += 1
            outcome.injection_refusals += 1
        else:
            stats.refused_otherwise += 1

    def _transcript(self, attack: Attack) -> list[tuple[str, str]]:
        if attack.channel == TURNS:
            rows: list[tuple[str, str]] = []
            for part in attack.parts:
                rows += [("user", part), ("assistant", "Noted.")]
            return rows
        if attack.channel == TOOL:
            return [
                ("user", "Can you look that up for me?"),
                ("assistant", "Let me check."),
                ("tool", attack.text),
                ("assistant", "Here is what I found."),
            ]
        assert attack.channel in (MESSAGE, DISPLAY_NAME, INGESTED)
        return [("user", attack.text), ("assistant", "OK.")]

    def run_attack(self, attack: Attack) -> ItemOutcome:
        outcome = ItemOutcome(attack.id, attack.category)
        user_id, session = self._user(f"attack-{attack.id}-{uuid.uuid4().hex[:6]}")
        self._seed_styles(user_id)
        payload = attack.payload
        record = self._record

        # Instruction-shaped writes first: a fact with the same text written earlier would make them
        # no-ops by dedup, hiding whether the writer rules refuse them.
        session_id = session["id"]
        record(
            outcome,
            "agent_style",
            self._agent_store(user_id, session_id, {"key": "style-note", "value": payload, "kind": "style"}),
        )
        record(
            outcome,
            "agent_directive",
            self._agent_store(
                user_id,
                session_id,
                {"key": "directive", "value": payload, "kind": "directive", "namespace": "tacit/personality"},
            ),
        )
        record(
            outcome,
            "api_directive",
            self._store(
                user_id, "api", key="directive", value=payload, namespace="tacit/personality", kind="directive"
            ),
        )
        record(outcome, "api_fact", self._store(user_id, "api", key="note", value=payload))
        record(outcome, "api_key", self._store(user_id, "api", key=payload[:100], value="noted"))
        record(outcome, "agent_fact", self._agent_store(user_id, session_id, {"key": "note-2", "value": payload}))
        if len(attack.parts) > 1:
            for i, part in enumerate(attack.parts):
                record(outcome, "api_parts", self._store(user_id, "api", key=f"part-{i}", value=part))
        if attack.channel == DISPLAY_NAME:
            from shared.context.profiles import patch_user_profile
            from shared.infra import db

            with db.connection() as conn:
                patch_user_profile(conn, self.tenant_id, user_id, {"display_name": payload[:200]})

        # Extraction with a model that obeys whatever it is shown.
        self._messages(user_id, session["id"], self._transcript(attack))
        self.model.arm(attack.parts if attack.channel == TURNS else (attack.payload,), payload)
        before = len(self._active(user_id))
        from shared.pipeline.jobs import extract_session

        extract_session(session["id"], self.settings, provider=self.provider, now=NOW)
        stats = outcome.paths.setdefault("extraction", PathResult())
        stats.offered += 5  # one item per category
        if not self.model.saw_attack:
            stats.not_seen += 5
        else:
            stored = len(self._active(user_id)) - before
            stats.stored += stored
            stats.refused_as_injection += 5 - stored  # sanitize is the only check these items can fail
            outcome.injection_refusals += 5 - stored

        # Synthesis with a model that appends the payload to the directive when it sees it. It is shown
        # the style observations only; when none came from the attack it has nothing to obey, and the
        # call is skipped (its answer would be the attack-free directive).
        stats = outcome.paths.setdefault("synthesis", PathResult())
        stats.offered += 1
        if any(self._is_instruction(r) and not self._attack_free(r) for r in self._active(user_id)):
            self.model.arm((payload,), payload)
            self._synthesize(user_id)
            directive = self._directive_value(user_id)
            if not self.model.saw_attack:
                stats.not_seen += 1
            elif directive is not None and directive != CLEAN_DIRECTIVE:
                stats.stored += 1
            else:
                stats.refused_as_injection += 1
        else:
            stats.not_seen += 1
        self.model.disarm()

        rows = [r for r in self._active(user_id) if not self._attack_free(r)]
        if attack.channel == DISPLAY_NAME:  # kept in the profile (no detector there): data, fenced
            rows.append({"namespace": "profile", "key": "display_name", "value": payload[:200], "kind": "profile"})
        outcome.stored_rows = rows
        outcome.instruction_rows = [r for r in rows if self._is_instruction(r)]
        probes = [payload, *attack.parts, *(r["value"] for r in rows), *(r["key"] for r in rows)]
        self._check_prompt(outcome, user_id, session, probes)
        return outcome

    @staticmethod
    def _attack_free(row: dict[str, Any]) -> bool:
        """The seeded style observations and the directive synthesised from them alone."""
        seeded = row["kind"] == "style" and (row["key"], row["value"]) in SEED_STYLES
        return seeded or (row["kind"] == "directive" and row["value"] == CLEAN_DIRECTIVE)

    def _directive_value(self, user_id: int) -> str | None:
        rows = [r for r in self._active(user_id) if r["namespace"] == "tacit/personality" and r["key"] == "directive"]
        return rows[0]["value"] if rows else None

    def run_benign(self, item: Benign) -> ItemOutcome:
        outcome = ItemOutcome(item.id, item.category)
        user_id, session = self._user(f"benign-{item.id}-{uuid.uuid4().hex[:6]}")
        self._record(outcome, "api_fact", self._store(user_id, "api", key="note", value=item.text))
        self._messages(user_id, session["id"], [("user", item.text), ("assistant", "Got it.")])
        self.model.arm((item.text,), item.text)
        before = len(self._active(user_id))
        from shared.pipeline.jobs import extract_session

        extract_session(session["id"], self.settings, provider=self.provider, now=NOW)
        stats = outcome.paths.setdefault("extraction", PathResult())
        stats.offered += 5
        if not self.model.saw_attack:
            stats.not_seen += 5
        else:
            # Dedup makes some of the five a no-op rather than a refusal: count refusals by the reason.
            stored = len(self._active(user_id)) - before
            stats.stored += stored
            from shared.memory.keys import MemoryRejected, sanitize

            try:
                sanitize("injected", item.text)
            except MemoryRejected as exc:
                if INJECTION_REFUSAL in exc.reason:
                    stats.refused_as_injection += 5 - stored
                    outcome.injection_refusals += 5 - stored
        self.model.disarm()
        outcome.stored_rows = self._active(user_id)
        self._check_prompt(outcome, user_id, session, [r["value"] for r in outcome.stored_rows])
        return outcome


# ---------------------------------------------------------------------------------------------------
# Report


@dataclass
class Report:
    attacks: list[ItemOutcome]
    benign: list[ItemOutcome]
    holdout_attacks: list[ItemOutcome]
    holdout_benign: list[ItemOutcome]
    elapsed_s: float

    @staticmethod
    def _attack_figures(outcomes: Sequence[ItemOutcome]) -> dict[str, int]:
        return {
            "attacks": len(outcomes),
            "attacks_refused": sum(o.refused for o in outcomes),
            "attacks_stored_as_data": sum(bool(o.stored_rows) and not o.instruction_rows for o in outcomes),
            "attacks_stored_as_instructions": sum(bool(o.instruction_rows) for o in outcomes),
            "attacks_unfenced_in_static_prompt": sum(bool(o.unfenced_static) for o in outcomes),
            "attacks_unfenced_in_dynamic_suffix": sum(bool(o.unfenced_dynamic) for o in outcomes),
            "integrity_problems": sum(bool(o.problems) for o in outcomes),
        }

    @staticmethod
    def _benign_figures(outcomes: Sequence[ItemOutcome]) -> dict[str, Any]:
        refused = sum(o.injection_refusals > 0 for o in outcomes)
        return {
            "benign": len(outcomes),
            "benign_refused": refused,
            "false_positive_rate": round(refused / len(outcomes), 4) if outcomes else 0.0,
            "benign_unfenced_in_static_prompt": sum(bool(o.unfenced_static) for o in outcomes),
        }

    def summary(self) -> dict[str, Any]:
        by_category = {}
        for category in CATEGORIES:
            chosen = [o for o in self.attacks if o.category == category]
            if chosen:
                figures = self._attack_figures(chosen)
                by_category[category] = {k.removeprefix("attacks_"): v for k, v in figures.items()}
        by_path: dict[str, dict[str, int]] = {}
        for path in PATHS:
            total = PathResult()
            for outcome in self.attacks:
                if path in outcome.paths:
                    total.add(outcome.paths[path])
            if total.offered:
                by_path[path] = total.as_dict()
        holdout: dict[str, Any] = {}
        if self.holdout_attacks:
            holdout.update(self._attack_figures(self.holdout_attacks))
        if self.holdout_benign:
            holdout.update(self._benign_figures(self.holdout_benign))
        return {
            **self._attack_figures(self.attacks),
            **self._benign_figures(self.benign),
            "by_category": by_category,
            "by_path": by_path,
            "holdout": holdout,
            "elapsed_s": round(self.elapsed_s, 1),
        }

    def render(self) -> str:
        s = self.summary()
        lines = [
            f"attacks: {s['attacks']}  refused: {s['attacks_refused']}  stored as data (fenced): "
            f"{s['attacks_stored_as_data']}  stored as instructions: {s['attacks_stored_as_instructions']}",
            f"unfenced in the static prompt: {s['attacks_unfenced_in_static_prompt']}  "
            f"unfenced in the dynamic suffix: {s['attacks_unfenced_in_dynamic_suffix']}  "
            f"prompts failing integrity checks: {s['integrity_problems']}",
            f"benign: {s['benign']}  refused as injections: {s['benign_refused']}  "
            f"false-positive rate: {100 * s['false_positive_rate']:.1f} %  "
            f"benign text unfenced in the static prompt: {s['benign_unfenced_in_static_prompt']}",
            "",
            f"{'category':<16}{'attacks':>8}{'refused':>9}{'as data':>9}{'as instr':>10}{'unfenced':>10}",
        ]
        for category, f in s["by_category"].items():
            lines.append(
                f"{category:<16}{f['attacks']:>8}{f['refused']:>9}{f['stored_as_data']:>9}"
                f"{f['stored_as_instructions']:>10}{f['unfenced_in_static_prompt']:>10}"
            )
        lines += ["", f"{'path':<16}{'offered':>8}{'refused*':>9}{'refused':>9}{'stored':>8}{'dedup':>7}{'unseen':>8}"]
        for path, f in s["by_path"].items():
            lines.append(
                f"{path:<16}{f['offered']:>8}{f['refused_as_injection']:>9}{f['refused_otherwise']:>9}"
                f"{f['stored']:>8}{f['deduplicated']:>7}{f['not_seen']:>8}"
            )
        lines.append("(refused* = as a prompt injection; refused = by a writer rule or format check)")
        stored = [o for o in self.attacks if o.stored_rows]
        if stored:
            lines += ["", "attacks stored (as data unless marked):"]
            for o in stored:
                mark = " INSTRUCTION" if o.instruction_rows else ""
                lines.append(f"  {o.id}{mark}: {o.stored_rows[0]['kind']} {o.stored_rows[0]['value'][:70]!r}")
        for label, outcomes in (("attacks", self.attacks), ("benign", self.benign)):
            for o in outcomes:
                for reason in o.unfenced_static + o.unfenced_dynamic + o.problems:
                    lines.append(f"  {label} {o.id}: {reason}")
        refused = [o for o in self.benign if o.injection_refusals]
        if refused:
            lines += ["", "benign statements refused:"]
            lines += [f"  {o.id}" for o in refused]
        if s["holdout"]:
            lines += ["", f"holdout (written after tuning, not tuned on): {json.dumps(s['holdout'])}"]
        lines.append(f"\n{s['elapsed_s']} s")
        return "\n".join(lines)


def run(
    fake: FakeLLM,
    *,
    attacks: Sequence[Attack] = ATTACKS,
    benign: Sequence[Benign] = BENIGN,
    holdout_attacks: Sequence[Attack] = HOLDOUT_ATTACKS,
    holdout_benign: Sequence[Benign] = HOLDOUT_BENIGN,
    workers: int = 1,
) -> Report:
    """Run the corpus against the database in ENGRAM_DATABASE_URL (migrated) and `fake` (started).

    With `workers` > 1 the items are spread over that many threads, each with a fake model server of
    its own (the obeying model keeps per-item state) started here; the first uses `fake`."""
    started = time.monotonic()
    tenant = f"injection-bench-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    jobs: list[tuple[str, Attack | Benign]] = [
        *(("attack", a) for a in attacks),
        *(("benign", b) for b in benign),
        *(("holdout_attack", a) for a in holdout_attacks),
        *(("holdout_benign", b) for b in holdout_benign),
    ]
    workers = max(1, min(workers, len(jobs)))
    fakes = [fake] + [FakeLLM().start() for _ in range(workers - 1)]
    defaults = [f.default for f in fakes]
    results: list[ItemOutcome | None] = [None] * len(jobs)

    def work(index: int) -> None:
        runner = Runner(tenant, fakes[index])
        for position in range(index, len(jobs), workers):
            _kind, item = jobs[position]
            if isinstance(item, Attack):
                results[position] = runner.run_attack(item)
            else:
                results[position] = runner.run_benign(item)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(work, i) for i in range(workers)]:
                future.result()
    finally:
        for f, default in zip(fakes, defaults, strict=True):
            f.default = default
        for f in fakes[1:]:
            f.stop()
    by_kind: dict[str, list[ItemOutcome]] = {"attack": [], "benign": [], "holdout_attack": [], "holdout_benign": []}
    for (kind, _), outcome in zip(jobs, results, strict=True):
        assert outcome is not None
        by_kind[kind].append(outcome)
    return Report(
        attacks=by_kind["attack"],
        benign=by_kind["benign"],
        holdout_attacks=by_kind["holdout_attack"],
        holdout_benign=by_kind["holdout_benign"],
        elapsed_s=time.monotonic() - started,
    )


# ---------------------------------------------------------------------------------------------------
# Command line


def _use_database(url: str) -> None:
    import os

    from shared.infra import db
    from shared.infra.config import get_settings
    from shared.infra.migrate import apply_migrations

    os.environ["ENGRAM_DATABASE_URL"] = url
    get_settings.cache_clear()
    db.close_pool()
    with db.connect(url) as conn:
        apply_migrations(conn)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.injection", __doc__)
    parser.add_argument("--database-url", default=None, help="default: an embedded Postgres for this run")
    parser.add_argument("--workers", type=int, default=3, help="threads, each with its own fake model (default 3)")
    args = parser.parse_args(argv)
    from shared.infra.logging import configure_logging

    configure_logging("WARNING")

    def bench() -> int:
        from shared.infra import db

        with BenchRun() as cleanup:
            cleanup.callback(db.close_pool)
            url = cleanup.database(args.database_url, "engram-injection-")
            fake = cleanup.enter_context(FakeLLM())
            _use_database(url)
            report = run(fake, workers=args.workers)
        emit(report.render(), report.summary(), args.json)
        return 0

    return run_main(bench, error_code=2)


if __name__ == "__main__":
    sys.exit(main())
