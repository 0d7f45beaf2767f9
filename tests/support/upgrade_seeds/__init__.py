"""Rows written at the schema each migration was made for, to test that later migrations keep them.

One module per migration, `v<NNNN>.py` with `seed(conn, world)`: it writes what a running engram of that
release would have stored in the tables and columns the migration added, with SQL naming only those columns
and the ones before it. Today's writers are not called (they know later columns); today's pure functions may
make a value (a vector, a content key, a sealed secret). A migration that adds nothing a
row could carry still has its module, saying so: tests/integration/test_upgrade_with_data.py fails for a
migration without one, so each new migration brings its seed.

`World` carries what a later step or the final checks need: ids, the plain-text API keys and channel secrets.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.infra.db import Conn

Seed = Callable[[Conn, "World"], None]

_MODULE_RE = re.compile(r"^v(\d{4})$")


@dataclass
class World:
    embedder: Any  # shared.embeddings.Embedder: makes the vectors of seeded memories and messages
    ids: dict[str, int] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # name -> the API key as a client holds it
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)  # connection slug -> plain secrets

    def vector(self, text: str) -> str:
        """`text`'s embedding in pgvector's text form, as the embedder of the seeded release stored it."""
        (values,) = self.embedder.embed([text])
        return "[" + ",".join(f"{v:.7f}" for v in values) + "]"


def insert(conn: Conn, sql: str, params: tuple[Any, ...] = ()) -> int:
    """Run an INSERT … RETURNING id and return the id."""
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row["id"])


def seeds() -> dict[int, Seed]:
    """Every seed module's `seed`, by migration version."""
    found: dict[int, Seed] = {}
    for info in pkgutil.iter_modules(__path__):
        match = _MODULE_RE.match(info.name)
        if match:
            module = importlib.import_module(f"{__name__}.{info.name}")
            found[int(match.group(1))] = module.seed
    return found
