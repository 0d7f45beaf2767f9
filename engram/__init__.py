"""engram's Python client: `from engram.client import EngramClient, AsyncEngramClient`."""

from __future__ import annotations

from engram.client import AsyncEngramClient, EngramAPIError, EngramClient, Ingested

__all__ = ["AsyncEngramClient", "EngramAPIError", "EngramClient", "Ingested"]
