"""What engram derived about a user: their entities (with the memories that name them) and their weekly
reflections."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from api.console.memories import UserId, user_scope
from api.console.render import page
from api.console.session import MemoryReader
from shared import db
from shared.console.knowledge import MEMORIES_PER_ENTITY, entity_page, reflection_page

router = APIRouter(prefix="/console/users/{user_id}", include_in_schema=False)
PageNumber = Annotated[int, Query(alias="page", ge=1, le=400)]


@router.get("/entities", response_class=HTMLResponse)
def entities(request: Request, user_id: UserId, signed: MemoryReader, page_number: PageNumber = 1) -> HTMLResponse:
    with db.connection() as conn:
        found = entity_page(conn, user_scope(conn, signed.principal.id, user_id), page=page_number)
    context = {"user_id": user_id, "entities": found, "query": {}, "per_entity": MEMORIES_PER_ENTITY}
    return page(request, "entities.html", signed, context)


@router.get("/reflections", response_class=HTMLResponse)
def reflections(request: Request, user_id: UserId, signed: MemoryReader, page_number: PageNumber = 1) -> HTMLResponse:
    with db.connection() as conn:
        found = reflection_page(conn, user_scope(conn, signed.principal.id, user_id), page=page_number)
    return page(request, "reflections.html", signed, {"user_id": user_id, "reflections": found, "query": {}})
