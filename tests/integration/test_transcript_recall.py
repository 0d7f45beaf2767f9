"""The transcript is memory from the moment it is stored (issue: recall by default).

Units at the database level (migration 0015's trigger, in the writer's transaction), then the product end to
end: messages ingested over REST come back through `/context` in their own words, with date and speaker,
before any compaction and without a vector; real Celery workers embed them; extracted facts are dated when
they were said and traced to their messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM
from shared.embeddings import ensure_embedding_space
from shared.embeddings.providers import LocalEmbedder
from shared.infra import db
from shared.infra.db import Conn
from shared.memory.search_reads import read_before_search
from shared.memory.userdata import erase_user
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_ingest_pipeline import configured, wait_idle
from tests.integration.test_memory_store import make_scope, make_session
from tests.integration.test_pipeline import PIPELINE_ENV, eventually

pytestmark = pytest.mark.integration


def _message(conn: Conn, session_id: int, scope: Any, content: str, name: str | None = None) -> int:
    row = conn.execute(
        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, name)
           VALUES (%s, %s, %s, 'user', %s, %s) RETURNING id""",
        (scope.tenant_id, scope.user_id, session_id, content, name),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _units(conn: Conn, session_id: int) -> dict[int, dict[str, Any]]:
    rows = conn.execute(
        "SELECT message_id, text, embedding IS NOT NULL AS embedded FROM memory_chunks WHERE session_id = %s",
        (session_id,),
    ).fetchall()
    return {row["message_id"]: row for row in rows}


def test_units_follow_their_messages_in_the_writers_transaction(conn: Conn) -> None:
    scope = make_scope(conn)
    sid = make_session(conn, scope)
    a = _message(conn, sid, scope, "We adopted a puppy", "Ann")
    b = _message(conn, sid, scope, "What breed?", "Bob")
    c = _message(conn, sid, scope, "A beagle called Toast", "Ann")
    d = _message(conn, sid, scope, "Lovely name", "Bob")
    units = _units(conn, sid)
    # The text embedded: the message, then the last words said before it (the nearest message last).
    assert units[c]["text"] == "Ann: A beagle called Toast\n\nContext: Ann: We adopted a puppy Bob: What breed?"
    assert units[a]["text"] == "Ann: We adopted a puppy"
    # A vector on every unit, as the drain leaves them.
    embedder = LocalEmbedder()  # the space a running system has: the column typed vector(n)
    ensure_embedding_space(conn, embedder)
    dimension = embedder.dimension
    conn.execute(
        "UPDATE memory_chunks SET embedding = array_fill(0.1::real, ARRAY[%s])::vector WHERE session_id = %s",
        (dimension, sid),
    )

    # Editing a message rebuilds its unit and the two that carry it as context; their vectors go (the drain
    # embeds the new text), the others keep theirs.
    conn.execute("UPDATE session_messages SET content = 'What breed is it?' WHERE id = %s", (b,))
    units = _units(conn, sid)
    assert "Bob: What breed is it?" in units[c]["text"] and "Bob: What breed is it?" in units[d]["text"]
    assert [units[m]["embedded"] for m in (a, b, c, d)] == [True, False, False, False]

    # Erasing a message removes its unit and vector, and it leaves the context of the units after it.
    conn.execute("DELETE FROM session_messages WHERE id = %s", (b,))
    units = _units(conn, sid)
    assert b not in units
    assert units[c]["text"] == "Ann: A beagle called Toast\n\nContext: Ann: We adopted a puppy"
    assert all("breed" not in unit["text"] for unit in units.values())

    # A long message before a reply: the reply's vector gets its last 30 words, its full text index all of them.
    story = " ".join(f"word{n}" for n in range(40))
    _message(conn, sid, scope, story, "Ann")
    reply = _message(conn, sid, scope, "Indeed", "Bob")
    text = _units(conn, sid)[reply]["text"]
    assert text == "Bob: Indeed\n\nContext: " + " ".join(f"word{n}" for n in range(10, 40)), text
    found = conn.execute(
        "SELECT message_id FROM memory_chunks WHERE search_tsv @@ to_tsquery('english', 'word2') AND session_id = %s",
        (sid,),
    ).fetchall()
    assert {row["message_id"] for row in found} >= {reply}
    # A long message's vector is of its first 100 words; full text finds it by any of them.
    long_one = _message(conn, sid, scope, " ".join(f"part{n}" for n in range(150)), "Ann")
    text = _units(conn, sid)[long_one]["text"]
    assert text.startswith("Ann: part0 part1 ") and "part98" in text and "part99" not in text, text
    found = conn.execute(
        "SELECT message_id FROM memory_chunks WHERE search_tsv @@ to_tsquery('english', 'part140') AND session_id = %s",
        (sid,),
    ).fetchall()
    assert [row["message_id"] for row in found] == [long_one]
    # Its vector stays in its row, over the 2 kB at which Postgres moves a row's largest value out of line: a
    # vector in the TOAST table costs the search a lookup in another index for every distance it computes.
    conn.execute(
        "UPDATE memory_chunks SET embedding = array_fill(0.1::real, ARRAY[%s])::vector WHERE message_id = %s",
        (dimension, long_one),
    )
    stored = conn.execute(
        """SELECT pg_column_size(c.*) AS size, pg_column_toast_chunk_id(c.embedding) AS toasted
           FROM memory_chunks c WHERE message_id = %s""",
        (long_one,),
    ).fetchone()
    assert stored is not None and stored["size"] > 2100 and stored["toasted"] is None, stored

    # A message that is not conversation (a tool result, a steering hint, an empty text) has no unit.
    tool = conn.execute(
        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
           VALUES (%s, %s, %s, 'tool', '{"rows": 3}') RETURNING id""",
        (scope.tenant_id, scope.user_id, sid),
    ).fetchone()
    steering = _message(conn, sid, scope, "<steering>be brief</steering>")
    assert tool is not None and tool["id"] not in _units(conn, sid) and steering not in _units(conn, sid)

    # Erasing the user takes every unit with it.
    erase_user(conn, scope)
    left = conn.execute("SELECT count(*) AS n FROM memory_chunks WHERE user_id = %s", (scope.user_id,)).fetchone()
    assert left is not None and left["n"] == 0


def test_search_knows_who_speaks_in_the_users_conversations_before_it_searches(conn: Conn) -> None:
    scope, other = make_scope(conn), make_scope(conn, "bob")
    for owner, names in ((scope, ["Tim", "Ann", "Tim", None, "Ann", "assistant"]), (other, ["Zed"])):
        session_id = make_session(conn, owner, "talk")
        for n, name in enumerate(names):
            _message(conn, session_id, owner, f"line {n}", name)
    # Each name once, in order; a message without a name is said by its role; another user's speakers are theirs.
    assert read_before_search(conn, scope).speakers == ("Ann", "Tim", "assistant", "user")
    assert read_before_search(conn, other).speakers == ("Zed",)


@pytest.fixture
def recall_stack(celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM) -> Iterator[CeleryStack]:
    """Offline model (rules extraction, local embeddings), the product's memory settings: a new user's setup."""
    with configured(celery_stack, "offline", {**PIPELINE_ENV, "ENGRAM_LLM_PROVIDER": "offline"}) as stack:
        yield stack


def _ingest(api: httpx.Client, session: str, *messages: dict[str, Any]) -> dict[str, Any]:
    response = api.post(f"/v1/users/alice/sessions/{session}/messages", json={"messages": list(messages)})
    assert response.status_code == 202, response.text
    accepted: dict[str, Any] = response.json()
    return accepted


def _context(api: httpx.Client, query: str, max_tokens: int = 1000, **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/users/alice/context", json={"query": query, "max_tokens": max_tokens, **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _lines(talk: list[tuple[str, str]], day: str) -> list[dict[str, Any]]:
    """(speaker, text) lines said one minute apart from 10:00 on `day`, as ingest messages."""
    return [
        {"role": "user", "name": name, "content": text, "created_at": f"{day}T10:{n:02d}:00Z"}
        for n, (name, text) in enumerate(talk)
    ]


def _found(api: httpx.Client, query: str, limit: int) -> list[str]:
    response = api.post("/v1/users/alice/memories/search", json={"query": query, "limit": limit})
    assert response.status_code == 200, response.text
    return [r["value"] for r in response.json()["results"]]


def test_ingested_messages_come_back_through_context_in_their_own_words(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    said = "I finally signed up for the pottery class at the community centre on Tuesdays"
    _ingest(
        api,
        "chat-1",
        {"role": "user", "content": said, "name": "Melanie", "created_at": "2023-05-08T13:56:00Z"},
        {"role": "assistant", "content": "That sounds relaxing!", "created_at": "2023-05-08T13:57:00Z"},
    )
    # Before any vector and any compaction: full text finds it in the commit that stored it.
    packed = _context(api, "What class did Melanie sign up for?")
    assert said in packed["context"]
    assert "[8 May 2023, conversation chat-1]" in packed["context"] and f"- Melanie: {said}" in packed["context"]
    (item,) = [i for s in packed["sections"] if s["name"] == "transcript" for i in s["items"] if said in i["text"]]
    assert item["source"]["speaker"] == "Melanie" and item["source"]["session_key"] == "chat-1"
    assert item["source"]["said_at"].startswith("2023-05-08T13:56")
    assert packed["tokens"] <= 1000
    # Then the workers embed it: the session is idle only with every unit's vector stored.
    done = wait_idle(api, "chat-1")
    assert done["transcript_pending_messages"] == 0 and done["compaction_count"] == 0
    found = api.post("/v1/users/alice/memories/search", json={"query": "ceramics lessons"}).json()["results"]
    assert any(r["source"] == "transcript" and r["value"] == said for r in found)  # by meaning, no shared word


def test_chat_turns_come_back_under_the_names_of_who_said_them(api: httpx.Client, recall_stack: CeleryStack) -> None:
    assert api.patch("/v1/agent-profile", json={"name": "Juno"}).status_code == 200
    said = "My sister Rosa is moving to Porto next spring"
    turn = api.post("/v1/sessions/chat-9/turns", json={"user_id": "alice", "text": said, "name": "Melanie"})
    assert turn.status_code == 202, turn.text
    assert wait_turn(api, turn.json()["turn_id"])["status"] == "done"
    packed = _context(api, "Where is Melanie's sister moving?")
    (item,) = [
        i
        for s in packed["sections"]
        if s["name"] == "transcript"
        for i in s["items"]
        if i["text"] == f"- Melanie: {said}"
    ]
    assert item["source"]["speaker"] == "Melanie"
    # The reply is the agent's, under its name; a turn that names nobody takes the user's profile name.
    assert api.patch("/v1/users/alice/profile", json={"display_name": "Mel"}).status_code == 200
    plain = "I bought a red bicycle for the commute"
    turn = api.post("/v1/sessions/chat-9/turns", json={"user_id": "alice", "text": plain})
    assert wait_turn(api, turn.json()["turn_id"])["status"] == "done"
    history = api.get("/v1/sessions/chat-9/messages", params={"user_id": "alice"}).json()
    speakers = [(m["role"], m["name"]) for m in history["messages"]]
    assert speakers == [("user", "Melanie"), ("assistant", "Juno"), ("user", "Mel"), ("assistant", "Juno")], speakers
    packed = _context(api, "What did Mel buy for the commute?")
    assert f"- Mel: {plain}" in packed["context"]


def test_the_offline_models_replies_take_no_place_in_search_or_context(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    said = "My neighbour Ingrid keeps bees on her allotment"
    turn = api.post("/v1/sessions/chat-5/turns", json={"user_id": "alice", "text": said})
    assert turn.status_code == 202, turn.text
    assert wait_turn(api, turn.json()["turn_id"])["status"] == "done"
    history = api.get("/v1/sessions/chat-5/messages", params={"user_id": "alice"}).json()["messages"]
    (reply,) = [m["content"] for m in history if m["role"] == "assistant"]
    assert reply.startswith("[offline mode") and said in reply  # the rules echo what the user said
    wait_idle(api, "chat-5")
    # The echo shares every word of the user's line, yet only the line is found: by words and by meaning.
    for query in (said, "Who keeps bees?", "beekeeping hobby"):
        found = api.post("/v1/users/alice/memories/search", json={"query": query, "limit": 10}).json()["results"]
        transcript = [r["value"] for r in found if r["source"] == "transcript"]
        assert transcript == [said], (query, transcript)
    packed = _context(api, "Who keeps bees on an allotment?")
    assert said in packed["context"] and "[offline mode" not in packed["context"]


def test_a_fact_is_dated_when_it_was_said_and_traced_to_its_message(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    accepted = _ingest(
        api,
        "chat-2",
        {"role": "user", "content": "Hello there.", "created_at": "2023-05-08T09:00:00Z"},
        {"role": "user", "content": "I live in Lisbon.", "created_at": "2023-05-08T09:01:00Z"},
    )
    wait_idle(api, "chat-2")
    memories = api.get("/v1/users/alice/memories").json()
    (fact,) = [m for m in memories if "Lisbon" in m["value"]]
    assert fact["valid_from"].startswith("2023-05-08T09:01")
    assert fact["source_message_ids"] == [accepted["message_ids"][1]]
    detail = api.get(f"/v1/users/alice/memories/{fact['id']}", params={"excerpts": "true"}).json()
    (source,) = detail["sources"]
    assert source["session_key"] == "chat-2" and source["excerpt"] == "I live in Lisbon."
    assert source["said_at"].startswith("2023-05-08T09:01") and source["speaker"] == "user"


def test_a_time_the_question_names_brings_that_time_first(api: httpx.Client, recall_stack: CeleryStack) -> None:
    _ingest(
        api, "spring", {"role": "user", "content": "We went hiking near the lake", "created_at": "2023-05-20T10:00:00Z"}
    )
    _ingest(
        api,
        "summer",
        {
            "role": "user",
            "content": "I told you about the hiking trip to the lake",
            "created_at": "2023-06-20T10:00:00Z",
        },
    )
    wait_idle(api, "spring")
    wait_idle(api, "summer")
    query = "What did I say about the hiking trip to the lake last May?"
    packed = _context(api, query, as_of="2023-10-01T00:00:00Z")
    (transcript,) = [s for s in packed["sections"] if s["name"] == "transcript"]
    assert transcript["items"][0]["text"] == "- user: We went hiking near the lake"
    # Without the time, the June message (closer in words) comes first.
    plain = _context(api, "What did I say about the hiking trip to the lake?", as_of="2023-10-01T00:00:00Z")
    (transcript,) = [s for s in plain["sections"] if s["name"] == "transcript"]
    assert transcript["items"][0]["text"] == "- user: I told you about the hiking trip to the lake"


def test_a_question_about_two_people_brings_back_what_each_of_them_said(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    ann = ["I cooked pasta for the neighbours", "I cooked risotto on Sunday", "I cooked pancakes with the kids",
           "I cooked a lentil soup for lunch"]  # fmt: skip
    bob = ["I went running by the river", "I baked sourdough bread in the oven", "My dog chased a squirrel"]
    _ingest(api, "kitchen", *_lines([("Ann", text) for text in ann] + [("Bob", text) for text in bob], "2023-05-08"))
    wait_idle(api, "kitchen")

    def found(query: str) -> list[tuple[str, str]]:
        response = api.post("/v1/users/alice/memories/search", json={"query": query, "limit": 3})
        assert response.status_code == 200, response.text
        return [(r["speaker"], r["value"]) for r in response.json()["results"] if r["source"] == "transcript"]

    # Ann's four lines share the question's words; Bob's bread shares none. Asked once per person as well,
    # each person's best line is among the first three.
    both = found("What did Ann and Bob cook?")
    assert ("Bob", "I baked sourdough bread in the oven") in both, both
    assert any(name == "Ann" for name, _ in both), both
    # One person named: one question, Ann's cooking first.
    assert {name for name, _ in found("What did Ann cook?")} == {"Ann"}


def test_a_question_about_a_person_finds_what_they_did_not_lines_that_name_them(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    did = "I took the kids kayaking on the river on Saturday, we paddled for hours"
    # Caroline talks to Melanie by name; Melanie's other lines say little.
    caroline = ["Melanie, how have you been lately?", "Thanks Melanie, that means a lot to me",
                "Melanie, you always know what to say", "Good to hear from you, Melanie!",
                "Melanie, I hope your week is going well", "Talk soon, Melanie, take care"]  # fmt: skip
    melanie = ["Thanks for asking, all good here", did, "Yes, I agree with you", "See you soon!"]
    talk = [line for pair in zip(caroline, [*melanie, "Bye!", "Ok"], strict=True) for line in pair]
    names = ["Caroline", "Melanie"] * len(caroline)
    _ingest(api, "catch-up", *_lines(list(zip(names, talk, strict=True)), "2023-05-08"))
    wait_idle(api, "catch-up")

    # The vector is asked what the question is about, without her name: her kayaking is the best line. With the
    # name in it, the lines where her name is said come closest: Caroline's, and Melanie's short replies, whose
    # units carry them as context.
    response = api.post(
        "/v1/users/alice/memories/search", json={"query": "What activities does Melanie do?", "limit": 3}
    )
    assert response.status_code == 200, response.text
    results = [(r["speaker"], r["value"]) for r in response.json()["results"]]
    assert results[0] == ("Melanie", did), results


def test_what_the_best_hit_leads_to_is_found_though_it_shares_no_word_with_the_question(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    best = "My old neighbourhood was hit by a nasty flood last week, so many homes were ruined"
    led_to = "I want to help rebuild my old neighbourhood, Westbrook, over the summer"
    others = ["The flood warnings on the news scared me", "Heavy rain flooded the parking lot at work",
              "The storm hit the coast on Monday", "We went to the gym after a flood of emails",
              "That song was a big hit on the radio", "The river flooded the fields near the farm",
              "Flood insurance is so expensive now", "I hit my head on the cupboard door",
              "A flood of tourists arrived for the festival"]  # fmt: skip
    _ingest(api, "news", *_lines([("Maria", text) for text in [best, led_to, *others]], "2023-05-08"))
    wait_idle(api, "news")

    # The first seven places are the question's own search: its words are in every other line, not in this one.
    first_seven = _found(api, "What was hit by a flood?", 7)
    assert first_seven[0] == best and led_to not in first_seven, first_seven
    # The best hit's own words ("old neighbourhood") lead to it: the follow-up's first new result takes place 8.
    assert _found(api, "What was hit by a flood?", 8)[7] == led_to


def test_what_a_person_said_next_comes_with_their_best_line(api: httpx.Client, recall_stack: CeleryStack) -> None:
    hit = "I just finished reading The Hobbit, what a great book"
    said_next = "Next on my list is Mistborn by Brandon Sanderson"
    # John answers twice: a unit carries the two messages before it, so Tim's next line shares nothing with the
    # question, not even through its neighbours.
    replies = [("John", "Nice, that one was a favourite of mine when I was a kid"),
               ("John", "My grandfather gave me his old copy and we talked about dragons all summer")]  # fmt: skip
    talk = [("Tim", hit), *replies, ("Tim", said_next), ("John", "Enjoy it!")]
    others = ["I read the news every morning", "My book club meets on Fridays", "Reading glasses are expensive",
              "The library has a new reading room", "I read that article you sent", "Book fairs are fun",
              "I want to read more poetry", "She read me a story last night", "I lost my book on the train",
              "Audio books help on long drives", "I read about the election", "That book cover is lovely",
              "I read a recipe for pancakes", "The book shop on the corner closed", "I read the manual twice",
              "Reading on the beach is my favourite", "My sister wrote a book about bees", "I read your letter",
              "A book of stamps costs more now", "I read slowly in the evenings", "The phone book is useless now",
              "Reading maps is hard for me", "Her book tour starts in May",
              "I read the poem at the wedding"]  # fmt: skip
    _ingest(api, "books", *_lines(talk, "2023-05-08"))
    _ingest(api, "misc", *_lines([("Tim", text) for text in others], "2023-05-09"))
    wait_idle(api, "books")
    wait_idle(api, "misc")

    # Two dozen more of Tim's lines share the question's words; his next line shares none and is not among the first
    # twenty.
    first_ten = _found(api, "What books has Tim read?", 10)
    assert hit in first_ten[:3] and said_next not in first_ten, first_ten
    # With room for more, what Tim said next in that conversation follows the first ten.
    assert said_next in _found(api, "What books has Tim read?", 20)[10:16]


def test_a_short_budget_holds_no_fact_beside_the_excerpt_it_came_from(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    _ingest(api, "chat-3", {"role": "user", "content": "I live in Lisbon.", "created_at": "2023-05-08T09:01:00Z"})
    wait_idle(api, "chat-3")
    for budget in (60, 90, 150, 400):
        packed = _context(api, "Where do I live? Lisbon", max_tokens=budget)
        texts = [i["text"] for s in packed["sections"] for i in s["items"]]
        excerpts = [t for t in texts if t == "- user: I live in Lisbon."]
        facts = [t for t in texts if "Lisbon" in t and t not in excerpts]
        assert len(excerpts) + len(facts) <= 1, (budget, texts)
        assert packed["tokens"] <= budget
    assert excerpts or facts  # the largest budget holds one of them


def test_a_fact_in_any_section_is_not_shown_beside_the_excerpt_it_came_from_and_names_its_source(
    api: httpx.Client, recall_stack: CeleryStack
) -> None:
    _ingest(
        api,
        "chat-4",
        {"role": "user", "name": "Ann", "content": "I live in Lisbon.", "created_at": "2023-05-08T09:01:00Z"},
    )
    wait_idle(api, "chat-4")
    # Without the relevant-memories section the fact is offered as something known about the user: the excerpt
    # it was taken from is worth more for this question, so the fact is not packed beside it.
    packed = _context(api, "Where do I live?", sections=["transcript", "what_you_know"])
    lisbon = [i for s in packed["sections"] for i in s["items"] if "Lisbon" in i["text"]]
    assert [i["text"] for i in lisbon] == ["- Ann: I live in Lisbon."], packed["sections"]
    # As a relevant memory, the fact says where it came from: the conversation, when and who.
    packed = _context(api, "Where do I live?", sections=["relevant_memories"])
    (fact,) = [i for s in packed["sections"] for i in s["items"] if "Lisbon" in i["text"]]
    assert fact["source"]["session_key"] == "chat-4" and fact["source"]["speaker"] == "Ann"
    assert fact["source"]["said_at"].startswith("2023-05-08T09:01") and len(fact["source"]["message_ids"]) == 1


def test_the_units_of_a_long_session_are_found_by_the_drain_not_by_compaction(
    recall_stack: CeleryStack, api: httpx.Client
) -> None:
    messages = [{"role": "user", "content": f"Message {n} about topic {n}"} for n in range(150)]
    accepted = _ingest(api, "long", *messages)
    eventually(
        lambda: _pending(accepted["session_id"]) == 0, timeout=120, message="transcript units were not all embedded"
    )


def _pending(session_id: int) -> int:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM memory_chunks WHERE session_id = %s AND embedding IS NULL", (session_id,)
        ).fetchone()
    return int(row["n"]) if row else -1
