"""SDK clients configured from engram's settings alone, never from the SDKs' own environment variables.

Both official SDKs fill in any argument left as None from the environment: `OPENAI_API_KEY`,
`OPENAI_ADMIN_KEY`, `OPENAI_BASE_URL`, `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`, `ANTHROPIC_API_KEY`,
`ANTHROPIC_AUTH_TOKEN`, `ANTHROPIC_BASE_URL`, and (Anthropic) profiles and workload-identity files found on
disk. With no ENGRAM_ key set, that would send a user's real OpenAI key to whatever
`ENGRAM_OPENAI_BASE_URL` / `ENGRAM_EMBEDDING_BASE_URL` points at (a local model server, say). So every
one of those arguments is passed explicitly: the ENGRAM_ value, else a placeholder key (local compatible
servers accept any key; the SDKs refuse to start without one) and the vendor's public base URL.
(Checked against openai 3.54 and anthropic 2.12: an explicit `api_key` stops every credential lookup,
an explicit `base_url` stops the base URL one.)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anthropic
import openai

# Sent when no ENGRAM_ key is configured: says what is going on to whoever receives it.
NO_KEY = "engram-no-key-configured"
OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"

C = TypeVar("C")

# One SDK client per configuration and process, reused by every call: building one costs a TLS context
# (certificate store load, several ms) and a fresh connection pool, so a client per call paid that and a
# new TCP (+TLS) connection on every model call. Keyed by pid as well: a prefork worker's child must not
# reuse connections it inherited from its parent. Entries of a parent are left alone (not closed) in a
# child, where closing them could disturb the parent's connections.
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared(key: tuple[Any, ...], make: Callable[[], C]) -> C:
    full_key = (os.getpid(), *key)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(full_key)
        if client is None:
            client = _CLIENTS[full_key] = make()
    return client


def openai_client(*, api_key: str | None, base_url: str | None, timeout: float) -> openai.OpenAI:
    """The process's client for this key, base URL and timeout (shared: never mutate it)."""
    return _shared(("openai", api_key, base_url, timeout), lambda: _new_openai(api_key, base_url, timeout))


def anthropic_client(*, api_key: str | None, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    """The process's client for this key, base URL and timeout (shared: never mutate it)."""
    return _shared(("anthropic", api_key, base_url, timeout), lambda: _new_anthropic(api_key, base_url, timeout))


def _new_openai(api_key: str | None, base_url: str | None, timeout: float) -> openai.OpenAI:
    client = openai.OpenAI(
        api_key=api_key or NO_KEY,
        # Only used when api_key is empty, which it never is; explicit so the environment is not read.
        admin_api_key="",
        base_url=base_url or OPENAI_BASE_URL,
        max_retries=0,
        timeout=timeout,
    )
    # OPENAI_ORG_ID / OPENAI_PROJECT_ID become request headers; they describe someone else's account.
    client.organization = None
    client.project = None
    return client


def _new_anthropic(api_key: str | None, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=api_key or NO_KEY, base_url=base_url or ANTHROPIC_BASE_URL, max_retries=0, timeout=timeout
    )
