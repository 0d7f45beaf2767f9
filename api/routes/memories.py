"""A user's memory over REST: CRUD, search, history, entities, stats, export and erasure."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response, status

from api.deps import MemoryReadKey, MemoryWriteKey
from api.errors import ApiError
from api.read_routing import MinLsn, mark_write
from api.schemas.common import ID_PATTERN
from api.schemas.memories import (
    Kind,
    MemoryDetailOut,
    MemoryEventOut,
    MemoryIn,
    MemoryOut,
    MemoryPatch,
    MemoryWriteOut,
    Namespace,
    SearchIn,
    SearchOut,
    SearchResultOut,
    Tag,
)
from shared.access.auth import Tenant
from shared.infra import db
from shared.infra.db import Conn
from shared.infra.redis_client import get_redis
from shared.infra.replicas import read
from shared.memory import writes
from shared.memory.entities import entity_info, list_entities
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import KINDS, MAX_TAGS, MemoryInput
from shared.memory.reads import get_memory, list_memories, memory_history
from shared.memory.rows import MemoryRow
from shared.memory.search import SearchFilters
from shared.memory.service import search_memories
from shared.memory.stats import memory_stats
from shared.memory.store import Scope, WriteResult
from shared.memory.userdata import drop_live_state, erase_user, export_user
from shared.memory.writes import Attributes, MemoryGone, NoSuchMemory, UnknownUser, UserRef, find_scope
from shared.text import SAFE_TEXT
from shared.transcript.sources import message_sources
from shared.turns.accept import find_session

router = APIRouter(prefix="/v1/users/{user_id}", tags=["memories"])

UserId = Annotated[str, Path(pattern=ID_PATTERN, description="Your id for the user")]
MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1, description="A memory id")]
# OFFSET is a bigint in Postgres; paging this deep is never useful anyway.
MAX_OFFSET = 1_000_000
ACTOR = "api"
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such user or memory (for this tenant)"}}


def _scope(conn: Conn, tenant: Tenant, user_id: str) -> Scope:
    scope = find_scope(conn, tenant.id, user_id)
    if scope is None:
        raise _no_user(user_id)
    return scope


def _no_user(user_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no user {user_id!r}")


@contextmanager
def _write_errors(user_id: str) -> Iterator[None]:
    """The write service's refusals as REST answers them: an unknown user 404, a rejected memory 422."""
    try:
        yield
    except UnknownUser as exc:
        raise _no_user(user_id) from exc
    except MemoryRejected as exc:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc), code="memory_rejected") from exc


def _write_out(result: WriteResult, response: Response) -> MemoryWriteOut:
    response.status_code = status.HTTP_201_CREATED if result.changed else status.HTTP_200_OK
    return MemoryWriteOut(action=result.action, memory=MemoryOut(**result.memory), replaced_id=result.previous_id)


@router.post(
    "/memories",
    response_model=MemoryWriteOut,
    status_code=201,
    responses={
        200: {"description": "Nothing new: same value, duplicate content or a reinforcement"},
        422: {"description": "Rejected: injection pattern, limits, bad kind"},
    },
)
def create_memory(user_id: UserId, body: MemoryIn, tenant: MemoryWriteKey, response: Response) -> MemoryWriteOut:
    """Store a memory. With read replicas configured, the answer's `X-Engram-Write-Lsn` header is the write's
    position: pass it as `X-Engram-Min-Lsn` on a read that must see this write."""
    item = MemoryInput(
        key=body.key,
        value=body.value,
        namespace=body.namespace,
        kind=body.kind,
        tags=body.tags,
        confidence=body.confidence,
        event_time=body.event_time,
    )
    with _write_errors(user_id):
        result = writes.store(UserRef(tenant.id, user_id), item, ACTOR)
    mark_write(response)
    return _write_out(result, response)


@router.get("/memories", response_model=list[MemoryOut], responses=NOT_FOUND)
def get_memories(
    user_id: UserId,
    tenant: MemoryReadKey,
    namespace: Annotated[Namespace | None, Query(description="Namespace prefix")] = None,
    kind: Annotated[list[Kind], Query(max_length=len(KINDS), description="Any of these kinds")] = [],  # noqa: B006
    tag: Annotated[list[Tag], Query(max_length=MAX_TAGS, description="Carrying all of these tags")] = [],  # noqa: B006
    include_superseded: bool = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    min_lsn: MinLsn = None,
) -> list[MemoryOut]:
    def run(conn: Conn) -> list[MemoryRow]:
        return list_memories(
            conn,
            _scope(conn, tenant, user_id),
            namespace_prefix=namespace,
            kinds=kind,
            tags=tag,
            include_superseded=include_superseded,
            limit=limit,
            offset=offset,
        )

    return [MemoryOut(**row) for row in read(run, min_lsn=min_lsn)]


def _load(conn: Conn, scope: Scope, memory_id: int) -> MemoryRow:
    memory = get_memory(conn, scope, memory_id)
    if memory is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no memory {memory_id}")
    return memory


def _no_longer_active(memory_id: int) -> HTTPException:
    return HTTPException(
        status.HTTP_409_CONFLICT, f"memory {memory_id} is no longer active; change its successor instead"
    )


@router.get("/memories/{memory_id}", response_model=MemoryDetailOut, responses=NOT_FOUND)
def read_memory(
    user_id: UserId,
    memory_id: MemoryId,
    tenant: MemoryReadKey,
    excerpts: Annotated[bool, Query(description="Include each source message's text")] = False,
    min_lsn: MinLsn = None,
) -> MemoryDetailOut:
    """The memory, with the messages it was learned from: conversation, time and speaker of each (and their
    text with `excerpts=true`)."""

    def run(conn: Conn) -> MemoryDetailOut:
        scope = _scope(conn, tenant, user_id)
        memory = _load(conn, scope, memory_id)
        sources = message_sources(conn, scope, memory["source_message_ids"], excerpts=excerpts)
        return MemoryDetailOut(**memory, sources=[s.as_dict() for s in sources])

    return read(run, min_lsn=min_lsn)


@router.patch(
    "/memories/{memory_id}",
    response_model=MemoryWriteOut,
    responses={
        **NOT_FOUND,
        201: {"description": "A new value: a new memory supersedes this one", "model": MemoryWriteOut},
        409: {"description": "The memory is superseded or deleted"},
    },
)
def patch_memory(
    user_id: UserId, memory_id: MemoryId, body: MemoryPatch, tenant: MemoryWriteKey, response: Response
) -> MemoryWriteOut:
    """Change a memory (answered with `X-Engram-Write-Lsn` when read replicas are configured)."""
    attributes = Attributes(
        tags=body.tags, confidence=body.confidence, decay_rate=body.decay_rate, event_time=body.event_time
    )
    with _write_errors(user_id):
        try:
            result = writes.amend(
                UserRef(tenant.id, user_id), memory_id, ACTOR, value=body.value, attributes=attributes
            )
        except NoSuchMemory as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no memory {memory_id}") from exc
        except MemoryGone as exc:
            raise _no_longer_active(memory_id) from exc
    mark_write(response)
    return _write_out(result, response)


@router.delete("/memories/{memory_id}", status_code=204, responses=NOT_FOUND)
def remove_memory(user_id: UserId, memory_id: MemoryId, tenant: MemoryWriteKey) -> Response:
    """Delete a memory (answered with `X-Engram-Write-Lsn` when read replicas are configured)."""
    with _write_errors(user_id):
        try:
            writes.delete(UserRef(tenant.id, user_id), memory_id, ACTOR)
        except MemoryGone as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no active memory {memory_id}") from exc
    response = Response(status_code=204)
    mark_write(response)
    return response


@router.get("/memories/{memory_id}/history", response_model=list[MemoryEventOut], responses=NOT_FOUND)
def read_history(
    user_id: UserId, memory_id: MemoryId, tenant: MemoryReadKey, min_lsn: MinLsn = None
) -> list[MemoryEventOut]:
    events = read(lambda conn: memory_history(conn, _scope(conn, tenant, user_id), memory_id), min_lsn=min_lsn)
    if events is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no memory {memory_id}")
    return [MemoryEventOut(**event) for event in events]


@router.post("/memories/search", response_model=SearchOut, responses=NOT_FOUND)
def search(user_id: UserId, body: SearchIn, tenant: MemoryReadKey, min_lsn: MinLsn = None) -> SearchOut:
    def run(conn: Conn) -> SearchOut:
        scope = _scope(conn, tenant, user_id)
        exclude = None
        if body.filters.exclude_session:
            session = find_session(conn, tenant.id, user_id, body.filters.exclude_session)
            exclude = session["id"] if session else None
        filters = SearchFilters(
            namespace_prefix=body.filters.namespace,
            kinds=body.filters.kinds,
            tags=body.filters.tags,
            since=body.filters.since,
            until=body.filters.until,
            exclude_session_id=exclude,
            include_superseded=body.filters.include_superseded,
            include_transcripts=body.filters.include_transcripts,
        )
        results = search_memories(conn, scope, body.query, limit=body.limit, filters=filters, mode=body.mode)
        return SearchOut(results=[SearchResultOut(**r.as_dict()) for r in results])

    return read(run, min_lsn=min_lsn)


@router.get("/entities", responses=NOT_FOUND)
def entities(
    user_id: UserId,
    tenant: MemoryReadKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    min_lsn: MinLsn = None,
) -> list[dict[str, Any]]:
    def run(conn: Conn) -> list[dict[str, Any]]:
        scope = _scope(conn, tenant, user_id)
        return list_entities(conn, scope.tenant_id, scope.user_id, limit)

    return read(run, min_lsn=min_lsn)


@router.get("/entities/{name}", responses=NOT_FOUND)
def entity(
    user_id: UserId, name: Annotated[str, Path(max_length=200), SAFE_TEXT], tenant: MemoryReadKey
) -> dict[str, Any]:
    with db.connection() as conn:
        scope = _scope(conn, tenant, user_id)
        info = entity_info(conn, scope.tenant_id, scope.user_id, name)
    if info is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no entity {name!r}")
    return info


@router.get("/stats", responses=NOT_FOUND)
def stats(user_id: UserId, tenant: MemoryReadKey, min_lsn: MinLsn = None) -> dict[str, Any]:
    return read(lambda conn: memory_stats(conn, _scope(conn, tenant, user_id)), min_lsn=min_lsn)


@router.get("/export", responses=NOT_FOUND)
def export(user_id: UserId, tenant: MemoryReadKey, min_lsn: MinLsn = None) -> dict[str, Any]:
    return read(lambda conn: export_user(conn, _scope(conn, tenant, user_id)), min_lsn=min_lsn)


@router.delete("", responses=NOT_FOUND)
def erase(user_id: UserId, tenant: MemoryWriteKey) -> dict[str, Any]:
    """Erase the user and everything of theirs in one transaction; returns rows deleted per table."""
    with db.connection() as conn:
        erasure = erase_user(conn, _scope(conn, tenant, user_id))
    drop_live_state(get_redis(), erasure)
    return {"erased": erasure.counts}
