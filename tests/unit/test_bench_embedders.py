"""ops/bench/embedders.py refuses bad input with a message and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.bench.embedders", *args], capture_output=True, text=True, check=False
    )


def test_missing_file_is_a_message(tmp_path: Path) -> None:
    done = _run("--file", str(tmp_path / "nope.json"))
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot read") and "Traceback" not in done.stderr


def test_not_locomo_is_a_message(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"not": "a list"}')
    done = _run("--file", str(path))
    assert done.returncode == 1
    assert "expected a JSON list of conversations" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--backends", "tensorflow"), "unknown backend"), (("--windows", "-1"), "--windows must be 0 or more")],
)
def test_a_bad_option_is_a_message(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text("[]")
    done = _run("--file", str(path), *args)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def test_int8_is_compared_with_fp32_onnx(tmp_path: Path) -> None:
    """The int8 backend's recall, throughput and distance to the fp32 vectors are reported side by side."""
    turns = [
        ("D1:1", "Alice", "I adopted a golden retriever called Biscuit"),
        ("D1:2", "Bob", "I work night shifts as a nurse at the city hospital"),
        ("D1:3", "Alice", "I am allergic to peanuts"),
    ]
    sample = {
        "sample_id": "tiny",
        "conversation": {"session_1": [{"dia_id": d, "speaker": s, "text": t} for d, s, t in turns]},
        "qa": [{"question": "Who has a dog?", "answer": "Alice", "evidence": ["D1:1"], "category": 1}],
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([sample]))
    done = _run("--file", str(path), "--backends", "onnx,onnx-int8", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures["backends"]) == {"onnx", "onnx-int8"}
    assert figures["backends"]["onnx-int8"]["recall_at_10"] == 1.0 and figures["backends"]["onnx-int8"]["texts"] == 3
    assert 0.95 < figures["int8_vs_onnx_min_cosine"] < 0.9999  # close to fp32, and not fp32 itself
    assert figures["int8_vs_onnx_speedup"] > 0
    # Each turn is also timed as ingest embeds it, with its neighbours as its context (test_the_context_windows…).
    for backend in ("onnx", "onnx-int8"):
        assert figures["backends"][backend]["windows"] == 3 and figures["backends"][backend]["window_ms"] > 0
    assert figures["int8_vs_onnx_window_speedup"] > 0


def test_the_context_windows_are_what_ingest_embeds() -> None:
    """A window is the turn first, then its neighbours in the same session as its context, exactly the
    text the product's indexing embeds for such an episode."""
    from ops.bench.embedders import context_windows
    from ops.bench.locomo_data import Conversation, Turn

    said = ["Alice: I adopted a dog", "Bob: What is its name?", "Alice: Biscuit", "Bob: Cute!", "Alice: New day"]
    turns = [Turn(f"D{1 + (i == 4)}:{i + 1}", 1 + (i == 4), s.split(":")[0], s, None) for i, s in enumerate(said)]
    windows = context_windows([Conversation("c", turns, [])], 10)
    assert len(windows) == 5
    # Two turns before and one after, never across a session boundary.
    assert windows[2] == (
        "D1:3: Alice: Biscuit\n\nContext:\nAlice: I adopted a dog\nBob: What is its name?\nBob: Cute!"
    )
    assert windows[3] == "D1:4: Bob: Cute!\n\nContext:\nBob: What is its name?\nAlice: Biscuit"
    assert windows[4] == "D2:5: Alice: New day"
    assert context_windows([Conversation("c", turns, [])], 2) == windows[:2]
    # A turn long enough to be several chunks is several windows, and the count still holds.
    long_turn = Turn("D1:1", 1, "Alice", "Alice: " + " ".join(f"word{i}" for i in range(3000)), None)
    assert len(context_windows([Conversation("c", [long_turn], [])], 100)) > 2
    assert len(context_windows([Conversation("c", [long_turn, *turns[1:]], [])], 2)) == 2
