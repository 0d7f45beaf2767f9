"""Which Postgres a read goes to, as the HTTP API exposes it: the write-position header a memory write
answers with and the header a read names it in (read-your-writes with streaming replicas; see
shared/infra/replicas.py and docs/operations/read-replicas.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Response

from shared.infra.replicas import LSN_PATTERN, parse_lsn, write_lsn

WRITE_LSN_HEADER = "X-Engram-Write-Lsn"
MIN_LSN_HEADER = "X-Engram-Min-Lsn"


def _min_lsn(
    value: Annotated[
        str | None,
        Header(
            alias=MIN_LSN_HEADER,
            pattern=LSN_PATTERN,
            description=f"Read-your-writes with read replicas: the `{WRITE_LSN_HEADER}` of your last write. The "
            "read is served by a replica only once it has replayed that write, else by the primary. Without it a "
            "read may lag writes by up to ENGRAM_DATABASE_REPLICA_MAX_LAG_SECONDS (no replicas: never)",
        ),
    ] = None,
) -> int | None:
    return parse_lsn(value) if value is not None else None


# The LSN a read must see, from its `X-Engram-Min-Lsn` header (None: any fresh replica will do).
MinLsn = Annotated[int | None, Depends(_min_lsn)]


def mark_write(response: Response) -> None:
    """Answer a committed write with the primary's WAL position (only when replicas are configured)."""
    lsn = write_lsn()
    if lsn is not None:
        response.headers[WRITE_LSN_HEADER] = lsn
