"""Request and response bodies of the HTTP API, one module per area (they also make the OpenAPI
schema): common (the request base, ids, timestamps), turns, sessions, ingest, context, memories, profiles,
admin, channels, jobs, health, and openai (the OpenAI-compatible endpoint).

Routes import from the area's module; the names are re-exported here for callers that want one import.
"""

from __future__ import annotations

from api.schemas.admin import IssuedKeyOut, KeyIn, KeyOut, TenantOut, TenantPatch
from api.schemas.common import ID_PATTERN, RequestBody, Timestamp
from api.schemas.context import ContextIn, ContextItemOut, ContextOut, ContextSectionOut
from api.schemas.health import Readiness
from api.schemas.ingest import IngestAccepted, IngestIn, IngestMessageIn, MemoryStatusOut
from api.schemas.memories import (
    Kind,
    MemoryDetailOut,
    MemoryEventOut,
    MemoryIn,
    MemoryOut,
    MemoryPatch,
    MemoryWriteOut,
    MessageSourceOut,
    SearchFiltersIn,
    SearchIn,
    SearchOut,
    SearchResultOut,
)
from api.schemas.profiles import AgentProfileOut, AgentProfilePatch, UserProfileOut, UserProfilePatch
from api.schemas.sessions import MessageOut, MessagesOut, SessionOut
from api.schemas.turns import TurnAccepted, TurnIn, TurnOut, TurnStatus

__all__ = [
    "ID_PATTERN",
    "AgentProfileOut",
    "AgentProfilePatch",
    "ContextIn",
    "ContextItemOut",
    "ContextOut",
    "ContextSectionOut",
    "IngestAccepted",
    "IngestIn",
    "IngestMessageIn",
    "IssuedKeyOut",
    "KeyIn",
    "KeyOut",
    "Kind",
    "MemoryDetailOut",
    "MemoryEventOut",
    "MemoryIn",
    "MemoryOut",
    "MemoryPatch",
    "MemoryStatusOut",
    "MemoryWriteOut",
    "MessageOut",
    "MessageSourceOut",
    "MessagesOut",
    "Readiness",
    "RequestBody",
    "SearchFiltersIn",
    "SearchIn",
    "SearchOut",
    "SearchResultOut",
    "SessionOut",
    "TenantOut",
    "TenantPatch",
    "Timestamp",
    "TurnAccepted",
    "TurnIn",
    "TurnOut",
    "TurnStatus",
    "UserProfileOut",
    "UserProfilePatch",
]
