"""Whose facts extraction writes: the user's in a conversation of one person, each named person's own in a
conversation of several (shared/pipeline/offline_extraction.py's module docstring has the rule; whether a
session has several speakers is shared/pipeline/speakers.py, tested with Postgres in
tests/integration/test_extraction_speakers.py)."""

from __future__ import annotations

from datetime import date

import pytest

from shared.memory.keys import MAX_KEY_CHARS
from shared.pipeline.compaction import build_compaction_prompt
from shared.pipeline.extraction import TranscriptMessage, build_extraction_prompt, to_memory_inputs, user_speakers
from shared.pipeline.extraction_parsing import CATEGORIES
from shared.pipeline.memory_prompt import MEMORY_SYSTEM, SEVERAL_SPEAKERS
from shared.pipeline.offline_extraction import SPEAKER_KEY_CHARS, offline_extract
from tests.unit.test_pipeline_logic import OFFLINE_FIRES

TODAY = date(2023, 5, 8)


def said(*lines: tuple[str | None, str]) -> list[TranscriptMessage]:
    return [TranscriptMessage(n + 1, "user", text, name) for n, (name, text) in enumerate(lines)]


def facts(messages: list[TranscriptMessage], *, several: bool) -> dict[str, dict[str, str]]:
    found = offline_extract(messages, name_speakers=several)
    return {name: dict(found.category(name)) for name in CATEGORIES}


def test_two_people_each_get_their_own_facts_under_their_own_keys() -> None:
    messages = said(
        ("Caroline", "My cat Luna is allergic to fish, so no tuna treats for her."),
        ("Caroline", "I have a peanut allergy, so I always check labels."),
        ("Melanie", "I have a peanut allergy too! And I live in Boston."),
        ("Melanie", "I like hiking."),
        ("Caroline", "I like hiking."),
    )
    found = facts(messages, several=True)
    assert found["entities"] == {
        "person/caroline/pet/luna": "Caroline's cat is Luna",
        "person/caroline/allergy/peanut": "Caroline is allergic to peanut",
        "person/melanie/allergy/peanut": "Melanie is allergic to peanut",
        "person/melanie/location": "Melanie lives in Boston",
    }
    # The same words from two people are two facts (a shared key would let the later one supersede the other).
    assert found["preferences"] == {
        "person/melanie/hiking": "Melanie likes hiking",
        "person/caroline/hiking": "Caroline likes hiking",
    }
    # Read as one person's, the same lines collapse onto the user's keys: what the rule is there to prevent.
    assert facts(messages, several=False)["entities"]["user/allergy/peanut"] == "User is allergic to peanut"


@pytest.mark.parametrize(("text", "category", "key", "value"), OFFLINE_FIRES)
def test_every_rule_names_a_named_speaker_in_a_conversation_of_several(
    text: str, category: str, key: str, value: str
) -> None:
    found = facts(said(("Ana Lopez", text)), several=True)
    if category == "styles":  # between people, a request is said to the other person, not to the assistant
        assert found["styles"] == {}
        return
    scoped = f"person/ana-lopez/{key.removeprefix('user/')}"
    assert scoped in found[category], found
    named = found[category][scoped]
    assert "Ana Lopez" in named and "user" not in named.lower()
    # The rest of the fact is the user's fact, word for word (the subject aside).
    rest = value.removeprefix("User's ").removeprefix("User ").replace("the user", "Ana Lopez")
    assert named.lower().endswith(rest.lower()), (named, value)
    assert all(k.startswith("person/ana-lopez/") for items in found.values() for k in items)


def test_one_person_and_unnamed_lines_stay_the_users() -> None:
    one = said(("Caroline", "I have a peanut allergy."), ("Caroline", "I live in Boston."))
    expected = {"user/allergy/peanut": "User is allergic to peanut", "user/location": "User lives in Boston"}
    assert facts(one, several=False)["entities"] == expected
    assert (
        facts(said((None, "I have a peanut allergy."), (None, "I live in Boston.")), several=False)["entities"]
        == expected
    )
    # In a conversation of several, a line without a name is still the user's.
    mixed = facts(said(("Caroline", "I live in Boston."), (None, "I live in Oslo.")), several=True)["entities"]
    assert mixed == {"person/caroline/location": "Caroline lives in Boston", "user/location": "User lives in Oslo"}


def test_a_long_or_odd_name_still_makes_a_valid_key() -> None:
    long_name = "Maria Fernanda de los Angeles Gutierrez Villanueva Santos"
    found = facts(said((long_name, "My favourite food is sushi with extra wasabi and pickled ginger.")), several=True)
    ((key, value),) = found["preferences"].items()
    segment = key.split("/")[1]
    assert key.startswith("person/") and len(segment) <= SPEAKER_KEY_CHARS and len(key) <= MAX_KEY_CHARS
    assert value.startswith(f"{long_name}'s favourite food is")
    # A name with no letters or digits names nobody: the fact stays the user's.
    assert facts(said(("???", "I live in Oslo.")), several=True)["entities"] == {"user/location": "User lives in Oslo"}


def test_user_speakers_are_the_named_user_lines_as_shown_case_ignored() -> None:
    messages = [
        *said(("Caroline", "hi"), ("caroline ", "hi"), (None, "hi"), ("Mel]:", "hi")),
        TranscriptMessage(9, "assistant", "hello", "Engram"),
    ]
    assert user_speakers(messages) == {"caroline", "mel"}
    assert user_speakers(said((None, "hi"))) == frozenset()


def test_named_facts_keep_their_sources_and_never_share_a_memory() -> None:
    messages = said(("Caroline", "I have a peanut allergy."), ("Melanie", "I have a peanut allergy."))
    items = to_memory_inputs(
        offline_extract(messages, name_speakers=True), today=TODAY, source_session_id=1, messages=messages
    )
    assert {(i.key, i.value) for i in items} == {
        ("person/caroline/allergy/peanut", "Caroline is allergic to peanut"),
        ("person/melanie/allergy/peanut", "Melanie is allergic to peanut"),
    }
    by_key = {i.key: i.source_message_ids for i in items}
    assert 1 in by_key["person/caroline/allergy/peanut"] and 2 in by_key["person/melanie/allergy/peanut"]


def test_the_model_is_told_when_several_people_speak_and_the_fixed_prompt_never_changes() -> None:
    messages = said(("Caroline", "I have a peanut allergy."))
    system_one, user_one = build_extraction_prompt(messages, today=TODAY)
    system_several, user_several = build_extraction_prompt(messages, today=TODAY, several_speakers=True)
    assert system_one is MEMORY_SYSTEM and system_several is MEMORY_SYSTEM
    assert SEVERAL_SPEAKERS not in user_one and SEVERAL_SPEAKERS in user_several
    # The line is the only difference, and it carries no client text (names stay inside <transcript>).
    assert user_several.replace(f"{SEVERAL_SPEAKERS}\n\n", "") == user_one
    assert "Caroline" not in SEVERAL_SPEAKERS
    # The fixed instructions say what to do with it.
    assert 'instead of "User"' in MEMORY_SYSTEM and "person/<name>/" in MEMORY_SYSTEM
    compaction = {
        flag: build_compaction_prompt(
            messages,
            summarise_until=1,
            read_before=frozenset(),
            previous_summary=None,
            today=TODAY,
            several_speakers=flag,
        )
        for flag in (False, True)
    }
    assert compaction[False][0] is compaction[True][0] is MEMORY_SYSTEM
    assert SEVERAL_SPEAKERS in compaction[True][1] and SEVERAL_SPEAKERS not in compaction[False][1]
