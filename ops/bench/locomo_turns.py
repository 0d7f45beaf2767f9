"""The second shape of the LoCoMo end-to-end benchmark (`--shape turns`): each conversation played through
engram's own chat turns instead of the ingest API, so what is measured is whether engram's own conversations
come back through `/context` as well as ingested ones do.

A LoCoMo conversation is two people talking. Its first speaker is the engram user; the other speaker's lines
are what the model answers. The model is the fake Anthropic server of ops/fake_llm.py, in the benchmark's
process, answering each chat call with the next scripted reply (`Script`); its extraction and flush calls
find nothing (the transcript is what is measured) and its summaries are fixed text. Within a session, each
run of consecutive lines by the user is one turn's text and the run of the other speaker's lines after it is
the reply (lines joined by newlines); a session that opens with the other speaker starts with the turn
`OPENING`, and one that ends on the user gets the reply `ACK`. Turns are played one at a time (the script
is one queue of replies), each waited on until done.

Names, as a user of engram's chat would give them: each turn names its speaker (the turn API's `name`), and
the agent profile is named after the other speaker before their conversation is played, so the replies are
stored under that name. What differs from the ingest shape: the messages are stored when the turns run
(today), not at the session's LoCoMo date.
"""

from __future__ import annotations

import collections
import itertools
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ops.bench.harness import BenchError
from ops.bench.locomo_data import Conversation, said_text
from ops.bench.pipeline import DIRECTIVE, SUMMARY, kind_of
from ops.client import EngramAPIError, EngramClient
from ops.fake_llm import FakeReply, Json

OPENING = "Hi!"
ACK = "OK."
NOTHING_EXTRACTED = json.dumps({"preferences": [], "entities": [], "decisions": [], "styles": [], "artifacts": []})
# A compaction is made in an extraction's call: nothing extracted, the fixed summary.
COMPACTED = json.dumps({**json.loads(NOTHING_EXTRACTED), "summary": SUMMARY})
TURN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Exchange:
    text: str  # the user's turn: the conversation's first speaker
    reply: str  # what the model answers: the other speaker's lines that follow


def speakers(conversation: Conversation) -> tuple[str, str]:
    """The conversation's user (its first speaker) and the other speaker, whom the agent plays."""
    user = conversation.turns[0].speaker if conversation.turns else ""
    other = next((turn.speaker for turn in conversation.turns if turn.speaker != user), "")
    return user, other


def exchanges(conversation: Conversation) -> dict[int, list[Exchange]]:
    """Each LoCoMo session of the conversation as the turns that replay it, in order."""
    user, _ = speakers(conversation)
    sessions: dict[int, list[Exchange]] = {}
    for number, lines in itertools.groupby(conversation.turns, key=lambda turn: turn.session):
        played: list[Exchange] = []
        waiting: str | None = None  # the user's text whose reply has not come yet
        for speaker, run in itertools.groupby(lines, key=lambda turn: turn.speaker):
            text = "\n".join(said_text(turn) for turn in run)
            if speaker == user:
                waiting = text
            else:
                played.append(Exchange(waiting if waiting is not None else OPENING, text))
                waiting = None
        if waiting is not None:
            played.append(Exchange(waiting, ACK))
        sessions[number] = played
    return sessions


class Script:
    """The fake model's replies: chat calls get the queued replies in order; memory jobs get nothing to keep."""

    def __init__(self) -> None:
        self._replies: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()
        self.unscripted = 0  # chat calls with no reply queued (a retried call would show here)

    def expect(self, reply: str) -> None:
        with self._lock:
            self._replies.append(reply)

    def __call__(self, body: Json) -> FakeReply:
        kind = kind_of(body)
        if kind == "extraction":  # flush calls use the same prompt
            return FakeReply(text=NOTHING_EXTRACTED)
        if kind == "compaction":
            return FakeReply(text=COMPACTED)
        if kind == "summary":
            return FakeReply(text=SUMMARY)
        if kind == "synthesis":
            return FakeReply(text=DIRECTIVE)
        with self._lock:
            if self._replies:
                return FakeReply(text=self._replies.popleft())
            self.unscripted += 1
            return FakeReply(text=ACK)


@dataclass
class PlayReport:
    sessions: list[tuple[str, str]]  # (user, session key)
    messages: int  # LoCoMo lines played
    turns: int
    seconds: float


def play(url: str, api_key: str, users: Sequence[tuple[str, Conversation]], script: Script) -> PlayReport:
    """Every conversation's sessions as chat turns, one turn at a time, each waited on until done."""
    report = PlayReport([], 0, 0, 0.0)
    started = time.perf_counter()
    client = EngramClient(url, api_key, timeout=60)
    try:
        for user, conversation in users:
            speaker, agent = speakers(conversation)
            if agent:
                client.update_agent_profile(name=agent)
            for number, played in sorted(exchanges(conversation).items()):
                key = f"session-{number}"
                for index, exchange in enumerate(played):
                    script.expect(exchange.reply)
                    _run_turn(client, key, user, exchange.text, f"{user}-{key}-{index}", speaker or None)
                    report.turns += 1
                report.sessions.append((user, key))
            report.messages += len(conversation.turns)
            print(f"  {conversation.sample_id}: {report.turns} turns so far", file=sys.stderr, flush=True)
    except EngramAPIError as exc:
        raise BenchError(f"a turn was refused: {exc}") from exc
    finally:
        client.close()
    report.seconds = time.perf_counter() - started
    return report


def _run_turn(client: EngramClient, session_key: str, user: str, text: str, key: str, name: str | None) -> None:
    accepted = client.submit_turn(session_key, user, text, idempotency_key=key, name=name)
    deadline = time.monotonic() + TURN_TIMEOUT_S
    turn = accepted
    while turn["status"] not in ("done", "failed"):
        if time.monotonic() > deadline:
            raise BenchError(f"turn {accepted['turn_id']} not done after {TURN_TIMEOUT_S:.0f} s")
        turn = client.get_turn(accepted["turn_id"], wait=30)
    if turn["status"] != "done":
        raise BenchError(f"turn {accepted['turn_id']} failed: {turn.get('error')}")
