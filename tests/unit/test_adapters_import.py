"""Every adapter imports on its own, first thing in a fresh interpreter: it imports the protocol module it
implements, which runs that package's __init__, so an __init__ that imported the adapters back would fail
with a circular import (lint-imports sees modules, not what an __init__ runs)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import shared.adapters


def adapter_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(shared.adapters.__path__, "shared.adapters."))


def test_there_are_adapters_to_import() -> None:
    assert {"shared.adapters.llm.anthropic_provider", "shared.adapters.embeddings.minilm_onnx"} <= set(
        adapter_modules()
    )


def test_each_adapter_imports_first_in_a_fresh_interpreter() -> None:
    # Concurrently: each interpreter spends most of its time importing the SDKs.
    running = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"import {name}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in adapter_modules()
    }
    failed = {}
    for name, process in running.items():
        _, stderr = process.communicate(timeout=120)
        if process.returncode != 0:
            failed[name] = stderr.strip().splitlines()[-1:]
    assert failed == {}
