"""Background model calls per chat turn, with real Redis, Postgres and Celery workers and the fake LLM:
a user who keeps talking is not extracted turn by turn, and a flush or compaction leaves the mining to the
session's pending extraction, with every fact still stored."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply, echo_reply, last_user_text
from shared import db
from shared.redis_client import get_redis
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_pipeline import PIPELINE_ENV, active_memories, eventually, kind_of, ledger, session
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


def one_fact_per_message(body: dict[str, Any]) -> FakeReply:
    """Extraction: one entity per user message shown ("fact<N>"); chat: an echo after CHAT_DELAY_S."""
    if kind_of(body) == "extraction":
        names = _FACT.findall(last_user_text(body))
        entities = [{"key": f"note/{name}", "value": f"User mentioned {name}"} for name in names]
        categories = {"preferences": [], "entities": entities, "decisions": [], "styles": [], "artifacts": []}
        return FakeReply(text=json.dumps(categories))
    return replace(echo_reply(body), delay_s=CHAT_DELAY_S)


def stored_facts() -> set[str]:
    return {m["key"] for m in active_memories() if m["namespace"] == "entity/default"}


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
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM session_messages WHERE session_id = %s AND extracted_at IS NULL", (sid,)
        ).fetchone()
    assert row is not None and row["n"] == 0


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


def test_a_compaction_leaves_the_mining_to_the_pending_extraction_and_no_fact_is_lost(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.default = one_fact_per_message
    # Every turn of the test falls within one debounce: the extraction is pending when the compaction runs.
    env = {**PIPELINE_ENV, "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "15", "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": "60"}
    celery_stack.ensure("anthropic", **env, ENGRAM_COMPACTION_THRESHOLD_TOKENS="600")
    filler = " We are planning a trip to Kyoto in April, temples and gardens, window seats please." * 5
    said = 0
    while session_or_none("compacts") is None or session("compacts")["token_count"] < 600:
        assert said < 8, "the session never reached the compaction threshold"
        wait_turn(api, post_turn(api, "compacts", f"fact{said} is worth remembering.{filler}").json()["turn_id"])
        said += 1
    eventually(lambda: session("compacts")["compaction_count"] >= 1, message="no compaction happened")
    sid = session("compacts")["id"]
    # The compaction made no extraction call of its own: the session's messages are still waiting for it.
    assert ledger(sid, "extraction") == 0
    # One more turn after the compaction: the pending extraction mines it together with the compacted ones.
    wait_turn(api, post_turn(api, "compacts", f"fact{said} is worth remembering.").json()["turn_id"])
    said += 1
    eventually(lambda: len(stored_facts()) == said, timeout=60, message="not every fact was stored")
    wait_for_idle_broker(get_redis())
    assert stored_facts() == {f"note/fact{i}" for i in range(said)}
    assert ledger(sid, "extraction") + ledger(sid, "flush") == 1


def session_or_none(key: str) -> dict[str, Any] | None:
    with db.connection() as conn:
        row: dict[str, Any] | None = conn.execute("SELECT * FROM sessions WHERE session_key = %s", (key,)).fetchone()
    return row
