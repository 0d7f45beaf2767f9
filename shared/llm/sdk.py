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

import anthropic
import openai

# Sent when no ENGRAM_ key is configured: says what is going on to whoever receives it.
NO_KEY = "engram-no-key-configured"
OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"


def openai_client(*, api_key: str | None, base_url: str | None, timeout: float) -> openai.OpenAI:
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


def anthropic_client(*, api_key: str | None, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=api_key or NO_KEY, base_url=base_url or ANTHROPIC_BASE_URL, max_retries=0, timeout=timeout
    )
