"""The engram half of ops/bench/peer.py on a tiny LoCoMo-format file, against a stub peer."""

from __future__ import annotations

import json
from pathlib import Path

from ops.bench import locomo_retrieval as locomo
from ops.bench import peer
from shared.infra.db import connect
from tests.conftest import TestServices

SAMPLE = [
    {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Pixel last week."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! I have been learning the cello."},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "My sister moved to Lisbon for work."},
            ],
        },
        "qa": [
            {
                "question": "What is the name of Ann's greyhound?",
                "answer": "Pixel",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {"question": "Which instrument is Bob learning?", "answer": "cello", "evidence": ["D1:2"], "category": 4},
        ],
    }
]


class NullPeer:
    name = "stub"

    def ingest(self, conversation: locomo.Conversation) -> None:
        pass

    def search(self, conversation: locomo.Conversation, question: str, k: int) -> list[frozenset[str]]:
        return []


def test_engram_half_ingests_and_finds_the_evidence(clean_state: TestServices, tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(SAMPLE))
    conversations = locomo.read_conversations(peer.parse_args([str(path)]))
    with connect(clean_state.database_url) as conn:
        conn.autocommit = False
        engram = peer.Engram(conn)
        tallies = peer.compare([engram, NullPeer()], conversations, limit_questions=None)
        # Results map back to the turns they hold, best first: the greyhound turn leads its question.
        ranked = engram.search(conversations[0], "What is the name of Ann's greyhound?", 10)
        assert ranked[0] == frozenset({"D1:1"})
    summary = peer.summarise(tallies, "engram", "stub")
    assert summary["engram"]["turns"] == 3
    assert summary["engram"]["searches"] == 2
    assert summary["engram"]["recall_at_10"] == 1.0  # three memories, top 10: every evidence turn is found
    assert summary["engram"]["ingest_turns_per_s"] is not None
    assert summary["ratios"]["recall_at_10"] is None  # the stub found nothing
