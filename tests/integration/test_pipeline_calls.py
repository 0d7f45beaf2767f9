"""Background model calls per chat turn, with real Redis, Postgres and Celery workers and the fake LLM:
a user who keeps talking is not extracted turn by turn, a flush leaves the mining to the session's pending
extraction, and a compaction is made by that extraction in its own model call, with every fact still
stored; the fixed instructions of those calls are read from the provider's prompt cache."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from typing import Any

import httpx
import pytest

from ops.fake_cache import estimate_tokens, min_cacheable_tokens
from ops.fake_llm import FakeLLM, FakeReply, echo_reply, last_user_text
from shared.access.auth import ensure_tenant
from shared.infra import db
from shared.infra.config import Settings
from shared.infra.redis_client import get_redis
from shared.llm.factory import cheap_model
from shared.pipeline.jobs import extract_and_compact
from shared.pipeline.memory_prompt import MEMORY_SYSTEM, READ_BEFORE
from shared.turns.ingest import IngestMessage, ingest_messages
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_pipeline import (
    PIPELINE_ENV,
    SUMMARY,
    active_memories,
    eventually,
    kind_of,
    ledger,
    session,
    with_summary,
)
from tests.integration.test_turns import post_turn
from tests.support.queues import wait_for_idle_broker

pytestmark = pytest.mark.integration

# A chat answer takes longer than the debounce, so consecutive turns finish further apart than it: with a
# fixed debounce every turn would be extracted on its own.
CHAT_DELAY_S = 1.5
CHATTY_ENV = {
    **PIPELINE_ENV,
    "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "1",
    "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": "60",
    # Wide enough that a loaded machine's uneven turn times never look like the user going quiet.
    "ENGRAM_EXTRACTION_DEBOUNCE_STRETCH": "3",
}
_FACT = re.compile(r"^\[user #\d+\]: .*?\b(fact\d+)\b", re.MULTILINE)


def facts_shown(body: dict[str, Any]) -> str:
    """The memories object with one entity per user message shown ("fact<N>"), lines read before excepted."""
    names = _FACT.findall(last_user_text(body))
    entities = [{"key": f"note/{name}", "value": f"User mentioned {name}"} for name in names]
    return json.dumps({"preferences": [], "entities": entities, "decisions": [], "styles": [], "artifacts": []})


def one_fact_per_message(body: dict[str, Any]) -> FakeReply:
    """Extraction: one entity per user message shown; a compaction: the same with the summary; a summary
    alone: the summary; chat: an echo after CHAT_DELAY_S."""
    kind = kind_of(body)
    if kind == "extraction":
        return FakeReply(text=facts_shown(body))
    if kind == "compaction":
        return FakeReply(text=with_summary(facts_shown(body)))
    if kind == "summary":
        return FakeReply(text=SUMMARY)
    return replace(echo_reply(body), delay_s=CHAT_DELAY_S)


def stored_facts() -> set[str]:
    return {m["key"] for m in active_memories() if m["namespace"] == "entity/default"}


def unmined(session_id: int) -> int:
    """The session's messages no extraction has mined yet."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM session_messages WHERE session_id = %s AND extracted_at IS NULL", (session_id,)
        ).fetchone()
    assert row is not None
    return int(row["n"])


def test_a_user_who_keeps_talking_is_extracted_in_fewer_calls_than_turns_and_every_fact_is_stored(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.default = one_fact_per_message
    celery_stack.ensure("anthropic", **CHATTY_ENV)
    turns = 5
    for i in range(turns):  # one after another, each sent when the previous one is answered
        turn = wait_turn(api, post_turn(api, "talker", f"fact{i} is worth remembering").json()["turn_id"])
        assert turn["status"] == "done"
    eventually(lambda: len(stored_facts()) == turns, timeout=90, message="not every fact was stored")
    wait_for_idle_broker(get_redis())
    assert stored_facts() == {f"note/fact{i}" for i in range(turns)}
    sid = session("talker")["id"]
    # The first turn has no gap to go by (plain debounce); the later ones stretch the wait past the next turn.
    assert ledger(sid, "extraction") <= 2
    assert ledger(sid, "flush") == 0
    assert unmined(sid) == 0


def test_flushes_crossing_at_once_leave_the_mining_to_the_pending_extraction(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.default = one_fact_per_message
    # The extraction stays pending while the flushes run: the debounce is long next to them.
    celery_stack.ensure("anthropic", **{**PIPELINE_ENV, "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "4"})
    wait_turn(api, post_turn(api, "flushy", "fact7 is worth remembering").json()["turn_id"])
    sid = session("flushy")["id"]
    from workers.dispatch import enqueue_flush

    threads = [threading.Thread(target=enqueue_flush, args=(sid,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    eventually(lambda: session("flushy")["memory_flush_compaction_count"] == 0, message="the cycle was not closed")
    eventually(lambda: stored_facts() == {"note/fact7"}, message="the fact was not stored")
    wait_for_idle_broker(get_redis())
    # One model call mined the message, whichever job made it; the flushes made none of their own.
    assert ledger(sid, "flush") + ledger(sid, "extraction") == 1
    assert session("flushy")["last_flushed_message_id"] > 0

    # A later cycle's flush, with the session quiet and every message mined, has nothing new to read.
    with db.connection() as conn:
        conn.execute("UPDATE sessions SET compaction_count = compaction_count + 1 WHERE id = %s", (sid,))
    enqueue_flush(sid)
    eventually(lambda: session("flushy")["memory_flush_compaction_count"] == 1, message="the cycle was not closed")
    wait_for_idle_broker(get_redis())
    assert ledger(sid, "flush") + ledger(sid, "extraction") == 1
    assert stored_facts() == {"note/fact7"}


def test_a_session_over_the_threshold_is_compacted_by_its_extraction_in_one_model_call(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.default = one_fact_per_message
    # The turns are sent at once and run back to back, within one debounce: one extraction is due after them.
    env = {**PIPELINE_ENV, "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "4", "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": "300"}
    celery_stack.ensure("anthropic", **env, ENGRAM_COMPACTION_THRESHOLD_TOKENS="600")
    filler = " We are planning a trip to Kyoto in April, temples and gardens, window seats please." * 5
    said = 6
    accepted = [post_turn(api, "compacts", f"fact{i} is worth remembering.{filler}").json() for i in range(said)]
    for turn in accepted:
        assert wait_turn(api, turn["turn_id"])["status"] == "done"
    sid = accepted[0]["session_id"]
    assert session("compacts")["token_count"] >= 600  # over the threshold: the turns sent no compaction task
    eventually(lambda: session("compacts")["compaction_count"] >= 1, message="no compaction happened")
    eventually(lambda: len(stored_facts()) == said, message="not every fact was stored")
    wait_for_idle_broker(get_redis())
    assert stored_facts() == {f"note/fact{i}" for i in range(said)}
    # One call summarised and mined: the compaction's summary call was the session's only background call.
    assert ledger(sid, "summary") == 1 and ledger(sid, "extraction") == 0
    assert "Travel to Kyoto" in session("compacts")["summary"]
    assert unmined(sid) == 0


def compactable_session(fake_llm: FakeLLM, said: int) -> tuple[int, list[int], Settings]:
    """A session of `said` user messages ("fact<N>", each answered), the first exchange already mined, over
    a compaction threshold it is well past; and settings that talk to the fake model."""
    filler = " We are planning a trip to Kyoto in April, temples and gardens, window seats please." * 5
    messages = []
    for i in range(said):
        messages += [
            IngestMessage("user", f"fact{i} is worth remembering.{filler}"),
            IngestMessage("assistant", "Noted."),
        ]
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        result = ingest_messages(
            conn, tenant_id=tenant_id, user_external_id="alice", session_key="both", messages=messages
        )
        conn.execute("UPDATE session_messages SET extracted_at = now() WHERE id = ANY(%s)", (result.message_ids[:2],))
    settings = Settings(
        llm_provider="anthropic",
        anthropic_api_key="test-key",  # type: ignore[arg-type]
        anthropic_base_url=fake_llm.anthropic_base_url,
        llm_max_attempts=1,
        compaction_threshold_tokens=200,
    )
    return result.session_id, result.message_ids, settings


def test_one_call_summarises_the_compacted_messages_and_mines_only_those_not_mined_before(
    clean_state: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.default = one_fact_per_message
    sid, ids, settings = compactable_session(fake_llm, 4)

    mined, compaction = extract_and_compact(sid, settings)

    (request,) = fake_llm.requests
    assert kind_of(request.body) == "compaction"
    prompt = last_user_text(request.body)
    assert f"[user #{ids[0]}, {READ_BEFORE}]: fact0" in prompt and f"[user #{ids[2]}]: fact1" in prompt
    assert compaction.compacted > 0 and "Travel to Kyoto" in (compaction.summary or "")
    assert session("both")["compaction_count"] == 1
    assert stored_facts() == {f"note/fact{i}" for i in (1, 2, 3)}  # fact0 was mined before: context only
    assert len(mined.changed_memory_ids) == 3
    assert ledger(sid, "summary") == 1 and ledger(sid, "extraction") == 0
    assert unmined(sid) == 0


def test_an_answer_without_its_summary_keeps_its_memories_and_the_summary_call_reads_the_cached_instructions(
    clean_state: Any, fake_llm: FakeLLM
) -> None:
    def no_summary_in_the_combined_answer(body: dict[str, Any]) -> FakeReply:
        return FakeReply(text=facts_shown(body) if kind_of(body) == "compaction" else SUMMARY)

    fake_llm.default = no_summary_in_the_combined_answer
    sid, _ids, settings = compactable_session(fake_llm, 3)

    _mined, compaction = extract_and_compact(sid, settings)

    assert [kind_of(r.body) for r in fake_llm.requests] == ["compaction", "summary"]
    assert stored_facts() == {"note/fact1", "note/fact2"}
    assert compaction.compacted > 0 and session("both")["compaction_count"] == 1
    # The fixed instructions open both requests, marked for the cache: the first call wrote them, the second
    # read them (the background model caches a prefix from 4,096 tokens on; the instructions are longer).
    systems = [r.body["system"] for r in fake_llm.requests]
    assert systems[0] == systems[1] and systems[0][0]["cache_control"] == {"type": "ephemeral"}
    fixed = estimate_tokens(MEMORY_SYSTEM)
    assert fixed >= min_cacheable_tokens(cheap_model(settings))
    with db.connection() as conn:
        calls = conn.execute(
            "SELECT purpose, cache_read_tokens, cache_write_tokens FROM llm_calls WHERE session_id = %s ORDER BY id",
            (sid,),
        ).fetchall()
    assert [(c["purpose"], c["cache_write_tokens"], c["cache_read_tokens"]) for c in calls] == [
        ("summary", fixed, 0),
        ("summary", 0, fixed),
    ]
