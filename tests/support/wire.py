"""What a client sends Postgres, counted from libpq's own trace: round trips and statements."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from psycopg import pq

from shared.db import Conn


@contextmanager
def wire_messages(conn: Conn) -> Iterator[Counter[str]]:
    """Count the protocol messages the client sends while the block runs (libpq's own trace): each `Sync`
    (or simple `Query`) is one wait for the server, each `Execute` (or `Query`) one statement, each `Prepare`
    a named statement psycopg prepared (which adds a `Sync`)."""
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "trace"
        with path.open("w") as trace:
            conn.pgconn.trace(trace.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                yield counts
            finally:
                conn.pgconn.untrace()
        for line in path.read_text().splitlines():
            direction, _, message, arguments = [*line.split("\t"), "", "", ""][:4]
            if direction == "F":
                counts[message.split(" ")[0]] += 1
                if message == "Parse" and arguments.strip().startswith('"_pg'):
                    # psycopg preparing a statement (its fifth execution on the connection): a wait of its own
                    counts["Prepare"] += 1
