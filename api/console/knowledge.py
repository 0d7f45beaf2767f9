"""What engram derived about a user: their entities (with the memories that name them) and their weekly
reflections."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from api.console.filters import Filters
from api.console.memories import UserId, user_scope
from api.console.render import page
from api.console.session import MemoryReader
from shared.console.knowledge import MEMORIES_PER_ENTITY, entity_page, reflection_page
from shared.infra import db

router = APIRouter(prefix="/console/users/{user_id}", include_in_schema=False)
PageNumber = Annotated[str, Query(alias="page", max_length=2000)]


@router.get("/entities", response_class=HTMLResponse)
def entities(request: Request, user_id: UserId, signed: MemoryReader, page_number: PageNumber = "") -> HTMLResponse:
    given = Filters()
    number = given.page(page_number)
    with db.connection() as conn:
        found = entity_page(conn, user_scope(conn, signed.principal.id, user_id), page=number)
    context = {
        "user_id": user_id,
        "entities": found,
        "query": {},
        "per_entity": MEMORIES_PER_ENTITY,
        "errors": given.errors,
    }
    return page(request, "entities.html", signed, context, status_code=given.status_code)


@router.get("/reflections", response_class=HTMLResponse)
def reflections(request: Request, user_id: UserId, signed: MemoryReader, page_number: PageNumber = "") -> HTMLResponse:
    given = Filters()
    number = given.page(page_number)
    with db.connection() as conn:
        found = reflection_page(conn, user_scope(conn, signed.principal.id, user_id), page=number)
    context = {"user_id": user_id, "reflections": found, "query": {}, "errors": given.errors}
    return page(request, "reflections.html", signed, context, status_code=given.status_code)
