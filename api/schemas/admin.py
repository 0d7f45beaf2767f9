"""Schemas of the admin API (`/v1/admin/…`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from api.schemas.common import ID_PATTERN, RequestBody
from shared.access.auth import SCOPES
from shared.access.keys import MAX_KEY_NAME_CHARS

Scope = Annotated[str, Field(json_schema_extra={"enum": list(SCOPES)})]


class KeyIn(RequestBody):
    name: str = Field("", max_length=MAX_KEY_NAME_CHARS, description="A label to tell keys apart")
    scopes: list[Scope] | None = Field(
        None,
        min_length=1,
        max_length=len(SCOPES),
        description=f"What the key may do: {', '.join(SCOPES)}. `admin` implies all. Default: all but `metrics`.",
    )
    user_id: str | None = Field(
        None, pattern=ID_PATTERN, description="Bind the key to this one user (e.g. a key handed to an MCP client)"
    )


class KeyOut(BaseModel):
    id: int
    name: str
    key_prefix: str = Field(description="The key's first characters, to tell keys apart")
    scopes: list[str]
    user_id: str | None = Field(None, description="The user the key is bound to, if any")
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    rotated_from: int | None = Field(None, description="The key this one replaced")


class IssuedKeyOut(KeyOut):
    key: str = Field(description="The secret. Shown once: only its hash is stored")


class TenantOut(BaseModel):
    id: int
    name: str
    monthly_token_budget: int | None = Field(description="LLM tokens per calendar month (UTC); null = unlimited")
    tokens_used_this_month: int = Field(description="Input, output and cache tokens of every LLM call this month")


class TenantPatch(RequestBody):
    monthly_token_budget: int | None = Field(
        ge=1, le=2**62, description="New budget; null removes it. Past 80 % the agent is told; past 100 % turns are 429"
    )
