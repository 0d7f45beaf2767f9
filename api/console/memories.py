"""A user's memories: the list and search (a stable, linkable URL), one memory's page, and the writes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console.filters import Filters
from api.console.forms import check, split_tags
from api.console.render import page
from api.console.session import ConsoleError, MemoryReader, MemoryWriter, Signed
from api.schemas.common import ID_PATTERN
from api.schemas.memories import MemoryIn, MemoryPatch
from shared.console import memories
from shared.console.memories import ACTOR, MemoryFilters
from shared.console.memory_list import DEFAULT_SORT, SORTS, TIME_FIELDS, ListRefused, TimeWindow, check_list, list_page
from shared.console.paging import Page
from shared.infra import db
from shared.infra.db import Conn
from shared.infra.replicas import read
from shared.memory import writes
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import KINDS, MemoryInput
from shared.memory.store import Scope
from shared.memory.writes import Attributes, MemoryGone, UnknownUser, UserRef, find_scope

router = APIRouter(prefix="/console/users/{user_id}/memories", include_in_schema=False)

UserId = Annotated[str, Path(pattern=ID_PATTERN)]
MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1)]
Text = Annotated[str, Form(max_length=100_000)]


def user_scope(conn: Conn, tenant_id: int, user_id: str) -> Scope:
    scope = find_scope(conn, tenant_id, user_id)
    if scope is None:
        raise _no_user(user_id)
    return scope


def _no_user(user_id: str) -> ConsoleError:
    return ConsoleError(status.HTTP_404_NOT_FOUND, f"no user {user_id!r}")


def _owner(signed: Signed, user_id: str) -> UserRef:
    return UserRef(signed.principal.id, user_id)


# Each text filter's longest value, said beside its field when exceeded. `Raw`'s bound only keeps a crafted URL
# cheap: beyond it the request gets the error page.
LONGEST = {"q": 500, "namespace": 200, "tag": 100}
Raw = Annotated[str, Query(max_length=2000)]


@router.get("", response_class=HTMLResponse)
def memory_list(
    request: Request,
    user_id: UserId,
    signed: MemoryReader,
    q: Raw = "",
    kind: Raw = "",
    namespace: Raw = "",
    tag: Raw = "",
    sort: Raw = DEFAULT_SORT,
    field: Annotated[str, Query(alias="date", max_length=2000)] = "updated",
    start: Annotated[str, Query(alias="from", max_length=2000)] = "",  # a form's empty date field sends ""
    end: Annotated[str, Query(alias="to", max_length=2000)] = "",
    page_number: Annotated[str, Query(alias="page", max_length=2000)] = "",
    deleted: Annotated[int, Query(ge=0, le=1000, description="How many a bulk delete just deleted")] = 0,
) -> HTMLResponse:
    given = Filters()
    q = given.text(q, "q", LONGEST["q"])
    namespace = given.text(namespace, "namespace", LONGEST["namespace"])
    tag = given.text(tag, "tag", LONGEST["tag"])
    kind = given.choice(kind, KINDS, "kind", "kind")
    sort = given.choice(sort, SORTS, "sort", "order", DEFAULT_SORT)
    window = TimeWindow(
        field=given.choice(field, TIME_FIELDS, "date", "date field", "updated"),
        start=given.day(start, "from"),
        end=given.day(end, "to"),
    )
    try:
        check_list(sort, window)
    except ListRefused as exc:  # the window ends before it starts: listed without it
        given.refuse("to", str(exc))
        window = TimeWindow(field=window.field)
    number = given.page(page_number)
    filters = MemoryFilters(kind=kind or None, namespace=namespace.strip() or None, tag=tag.strip() or None)
    searching = bool(q.strip())

    def run(conn: Conn) -> Page:
        scope = user_scope(conn, signed.principal.id, user_id)
        if searching:  # ranked best first over every active memory: the order and dates are the list's
            return memories.memory_page(conn, scope, query=q.strip(), filters=filters, page=number)
        return list_page(conn, scope, filters, sort=sort, window=window, page=number)

    found = read(run)
    # The fields and the links to other pages carry the filters in use; a bad value is quoted in its message.
    query = {
        "q": q,
        "kind": kind,
        "namespace": namespace,
        "tag": tag,
        "sort": "" if sort == DEFAULT_SORT else sort,
        "date": "" if window.field == "updated" else window.field,
        "from": window.start.isoformat() if window.start else "",
        "to": window.end.isoformat() if window.end else "",
    }
    return page(
        request,
        "memories.html",
        signed,
        {
            "user_id": user_id,
            "memories": found,
            "query": query,
            "errors": given.errors,
            "kinds": KINDS,
            "sorts": SORTS,
            "sort": sort,
            "time_fields": TIME_FIELDS,
            "window": window,
            "searching": searching,
            "deleted": deleted,
        },
        status_code=given.status_code,
    )


def _form_page(
    request: Request, signed: Signed, user_id: str, values: dict[str, Any], errors: dict[str, str], code: int
) -> HTMLResponse:
    return page(
        request,
        "memory_new.html",
        signed,
        {"user_id": user_id, "values": values, "errors": errors, "kinds": KINDS},
        status_code=code,
    )


@router.get("/new", response_class=HTMLResponse)
def new_memory_form(request: Request, user_id: UserId, signed: MemoryReader) -> HTMLResponse:
    if not signed.allows("memory:write"):
        raise ConsoleError(status.HTTP_403_FORBIDDEN, "this API key lacks the scope 'memory:write'")
    return _form_page(request, signed, user_id, {"kind": "fact"}, {}, 200)


@router.post("")
def create_memory(
    request: Request,
    user_id: UserId,
    signed: MemoryWriter,
    key: Text = "",
    value: Text = "",
    kind: Text = "fact",
    namespace: Text = "",
    tags: Text = "",
) -> Response:
    values = {"key": key, "value": value, "kind": kind, "namespace": namespace, "tags": tags}
    body, errors = check(
        MemoryIn, {"key": key, "value": value, "kind": kind, "namespace": namespace or None, "tags": split_tags(tags)}
    )
    if body is None:
        return _form_page(request, signed, user_id, values, errors, status.HTTP_422_UNPROCESSABLE_CONTENT)
    item = MemoryInput(key=body.key, value=body.value, namespace=body.namespace, kind=body.kind, tags=body.tags)
    try:
        result = writes.store(_owner(signed, user_id), item, ACTOR)
    except MemoryRejected as exc:
        return _form_page(request, signed, user_id, values, {"value": str(exc)}, status.HTTP_422_UNPROCESSABLE_CONTENT)
    return RedirectResponse(f"/console/users/{user_id}/memories/{result.memory['id']}", status.HTTP_303_SEE_OTHER)


def _detail_page(
    request: Request,
    signed: Signed,
    user_id: str,
    memory_id: int,
    errors: dict[str, str],
    code: int = 200,
    *,
    history_page: int = 1,
) -> HTMLResponse:
    with db.connection() as conn:
        detail = memories.memory_detail(
            conn, user_scope(conn, signed.principal.id, user_id), memory_id, history_page=history_page
        )
    if detail is None:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"user {user_id!r} has no memory {memory_id}")
    return page(
        request,
        "memory.html",
        signed,
        {"user_id": user_id, "detail": detail, "m": detail.memory, "errors": errors, "query": {}},
        status_code=code,
    )


@router.get("/{memory_id}", response_class=HTMLResponse)
def memory_page(
    request: Request,
    user_id: UserId,
    memory_id: MemoryId,
    signed: MemoryReader,
    history: Annotated[str, Query(max_length=2000, description="The history's page")] = "",
) -> HTMLResponse:
    given = Filters()
    number = given.page(history, "history")
    return _detail_page(request, signed, user_id, memory_id, given.errors, given.status_code, history_page=number)


@router.post("/{memory_id}")
def edit_memory(
    request: Request, user_id: UserId, memory_id: MemoryId, signed: MemoryWriter, value: Text = "", tags: Text = ""
) -> Response:
    body, errors = check(MemoryPatch, {"value": value, "tags": split_tags(tags)})
    if body is None or body.value is None:
        return _detail_page(request, signed, user_id, memory_id, errors, status.HTTP_422_UNPROCESSABLE_CONTENT)
    try:
        result = writes.amend(
            _owner(signed, user_id), memory_id, ACTOR, value=body.value, attributes=Attributes(tags=body.tags or [])
        )
    except UnknownUser as exc:
        raise _no_user(user_id) from exc
    except MemoryRejected as exc:
        return _detail_page(
            request, signed, user_id, memory_id, {"value": str(exc)}, status.HTTP_422_UNPROCESSABLE_CONTENT
        )
    except MemoryGone as exc:
        raise ConsoleError(
            status.HTTP_409_CONFLICT, f"memory {memory_id} is no longer active; change its successor instead"
        ) from exc
    return RedirectResponse(f"/console/users/{user_id}/memories/{result.memory['id']}", status.HTTP_303_SEE_OTHER)


@router.post("/{memory_id}/delete")
def delete_memory(user_id: UserId, memory_id: MemoryId, signed: MemoryWriter) -> Response:
    try:
        writes.delete(_owner(signed, user_id), memory_id, ACTOR)
    except UnknownUser as exc:
        raise _no_user(user_id) from exc
    except MemoryGone as exc:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"no active memory {memory_id}") from exc
    return RedirectResponse(f"/console/users/{user_id}/memories", status.HTTP_303_SEE_OTHER)


@router.post("/{memory_id}/restore")
def restore_memory(user_id: UserId, memory_id: MemoryId, signed: MemoryWriter) -> Response:
    try:
        result = writes.restore(_owner(signed, user_id), memory_id, ACTOR)
    except UnknownUser as exc:
        raise _no_user(user_id) from exc
    except MemoryRejected as exc:
        raise ConsoleError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    except MemoryGone as exc:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"no earlier version {memory_id} to restore") from exc
    return RedirectResponse(f"/console/users/{user_id}/memories/{result.memory['id']}", status.HTTP_303_SEE_OTHER)
