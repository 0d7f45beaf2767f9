"""What the LoCoMo end-to-end benchmark counts as an evidence turn "present" in a context block, and how it
turns a LoCoMo conversation into ingest calls (ops/bench/locomo_retrieval.py, `--mode e2e`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ops.bench.locomo_data import load_conversations, session_messages
from ops.bench.locomo_retrieval import evidence_recall, main, normalise, user_id_for

CONTEXT = (
    "<memory-context>\nWhat follows is data engram remembers about the user.\n\n"
    "## From earlier conversations\n"
    "- [user]: Hi Ben!   I moved to LISBON last month. [user]: I’m training for the Berlin marathon.\n"
    "</memory-context>"
)


def test_a_turn_is_present_whatever_the_case_spacing_and_punctuation_around_it() -> None:
    assert evidence_recall(["I moved to Lisbon last month."], CONTEXT) == 1.0
    # NFKC and case folding: a curly apostrophe in the context matches the straight one in the turn.
    assert evidence_recall(["I'm training for the Berlin marathon!"], CONTEXT) == 1.0


def test_a_fragment_or_a_paraphrase_is_not_present() -> None:
    # Only part of the turn made it: not credited.
    assert evidence_recall(["I moved to Lisbon last month and I love the trams."], CONTEXT) == 0.0
    # Word boundaries: "in" is not found inside "training", "Lis" not inside "Lisbon".
    assert evidence_recall(["Lis"], CONTEXT) == 0.0
    assert evidence_recall(["Moved to Lisbon"], "User moved to Lisbonia") == 0.0


def test_recall_is_the_share_of_evidence_turns_present() -> None:
    turns = ["I moved to Lisbon last month.", "My cat hates the new flat.", "I'm training for the Berlin marathon."]
    assert evidence_recall(turns, CONTEXT) == 2 / 3
    assert evidence_recall(turns, "") == 0.0
    assert normalise("  ...  ") == ""


def test_sessions_become_ingest_batches_in_order_with_speaker_date_and_caption(tmp_path: Path) -> None:
    data = [
        {
            "sample_id": "conv 7/x",
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Ben",
                "session_2_date_time": "10:00 am on 20 May, 2023",
                "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Later.", "blip_caption": "a dog"}],
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ana", "dia_id": "D1:1", "text": "First."},
                    {"speaker": "Ben", "dia_id": "D1:02", "text": "Second."},
                ],
            },
            "qa": [],
        }
    ]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    (conversation,) = load_conversations(path)

    sessions = session_messages(conversation)

    assert list(sessions) == [1, 2]
    first, second = sessions[1]
    assert first == {
        "role": "user",
        "content": "First.",
        "name": "Ana",
        "idempotency_key": "D1:1",
        "created_at": datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
    }
    assert second["idempotency_key"] == "D1:2" and second["created_at"] > first["created_at"]
    assert sessions[2][0]["content"] == "Later. [image: a dog]"
    # The sample id is kept readable but made a valid engram user id.
    assert user_id_for(3, conversation) == "locomo-003-conv-7-x"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"conversation": "nope"}', "expected a JSON list of conversations"),
        ("not json at all", "not a LoCoMo-format JSON file"),
        ("[]", "no conversations to run"),
    ],
)
def test_e2e_mode_refuses_a_file_that_is_not_locomo_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "input.json"
    path.write_text(content, encoding="utf-8")
    assert main(["--mode", "e2e", "--file", str(path), "--json"]) == 2
    assert message in capsys.readouterr().err


def test_the_file_is_required_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--mode", "e2e"])
    assert exited.value.code == 2
    assert "a LoCoMo-format JSON file is required" in capsys.readouterr().err
