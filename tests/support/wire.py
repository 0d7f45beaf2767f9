"""What a client sends Postgres, counted from libpq's own trace: round trips and statements."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from psycopg import pq

from shared.infra.db import Conn


@contextmanager
def wire_messages(conn: Conn) -> Iterator[Counter[str]]:
    """Count the protocol messages the client sends while the block runs (libpq's own trace): each `Sync`
    (or simple `Query`) is one wait for the server, each `Execute` (or `Query`) one statement, each `Prepare`
    a named statement psycopg prepared with a `Sync` of its own (outside pipeline mode)."""
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
        sent = []
        for line in path.read_text().splitlines():
            direction, _, message, arguments = [*line.split("\t"), "", "", ""][:4]
            if direction == "F":
                sent.append((message.split(" ")[0], arguments.strip()))
        for index, (message, arguments) in enumerate(sent):
            counts[message] += 1
            following = sent[index + 1][0] if index + 1 < len(sent) else ""
            if message == "Parse" and arguments.startswith('"_pg') and following == "Sync":
                # psycopg preparing a statement (its fifth execution on the connection): a wait of its own,
                # except in pipeline mode, where the Parse goes along with the statements around it
                counts["Prepare"] += 1


@contextmanager
def pool_statements() -> Iterator[Counter[str]]:
    """Count what every connection of this process's pool sends while the block runs (the gateway of the tests
    runs in this process, on this pool): each connection is borrowed once to start its trace, and the pool keeps
    the traces on while the block's requests borrow them. The counter is filled when the block ends."""
    from shared.infra import db
    from shared.infra.config import get_settings

    total: Counter[str] = Counter()
    counters: list[Counter[str]] = []
    with ExitStack() as traces:
        with ExitStack() as borrowed:
            conns = [borrowed.enter_context(db.connection()) for _ in range(get_settings().db_pool_size)]
            counters = [traces.enter_context(wire_messages(conn)) for conn in conns]
        yield total
    for counts in counters:
        total.update(counts)


def statements(counts: Counter[str]) -> int:
    """The statements among counted messages: each extended-protocol `Execute`, each simple `Query`."""
    return counts["Execute"] + counts["Query"]
