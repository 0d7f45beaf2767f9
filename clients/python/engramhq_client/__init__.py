"""engramhq's Python client: `EngramClient` (sync) and `AsyncEngramClient` (asyncio), same methods."""

from engramhq_client.client import AsyncEngramClient, EngramClient
from engramhq_client.core import EngramAPIError, Ingested

__all__ = ["AsyncEngramClient", "EngramAPIError", "EngramClient", "Ingested"]
