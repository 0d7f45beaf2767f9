"""A user's context for someone else's prompt, packed into a token budget."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import MemoryReadKey
from api.read_routing import MinLsn
from api.schemas.common import ID_PATTERN
from api.schemas.context import ContextIn, ContextOut
from shared.context.packed import PackedContext, compile_context
from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.infra.replicas import read

router = APIRouter(prefix="/v1/users/{user_id}", tags=["context"])


@router.post("/context", response_model=ContextOut)
def user_context(
    user_id: Annotated[str, Path(pattern=ID_PATTERN, description="Your id for the user")],
    body: ContextIn,
    tenant: MemoryReadKey,
    min_lsn: MinLsn = None,
) -> ContextOut:
    """What engram's own prompt would carry about the user (profile, "What You Know", the session's task
    and summary, the facts and transcript excerpts relevant to the query, each with its date and speaker,
    the latest reflection), packed greedily by value into `max_tokens` and fenced as data. An unknown user or
    session is not an error: the context holds what is known (possibly nothing)."""

    def run(conn: Conn) -> PackedContext:
        return compile_context(
            conn,
            get_settings(),
            tenant_id=tenant.id,
            user_external_id=user_id,
            max_tokens=body.max_tokens,
            query=body.query,
            session_key=body.session_key,
            sections=body.sections,
            as_of=body.as_of,
        )

    packed = read(run, min_lsn=min_lsn)
    return ContextOut.model_validate(packed.as_dict())
