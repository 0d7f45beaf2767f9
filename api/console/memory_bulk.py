"""A user's memories as a whole: delete a selection of them in one POST, and download all of them (the
document of GET /v1/users/{user_id}/export). Registered before the one-memory routes, whose id would
otherwise claim these paths."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Form, status
from fastapi.responses import RedirectResponse, Response

from api.console.memories import UserId, user_scope
from api.console.session import ConsoleError, MemoryReader, MemoryWriter
from shared.console.bulk import MAX_SELECTED, SelectionRefused, remove_many
from shared.infra import db
from shared.memory.userdata import export_user
from shared.memory.writes import MemoryGone, UnknownUser, UserRef

router = APIRouter(prefix="/console/users/{user_id}/memories", include_in_schema=False)

# One more than allowed gets through the form parsing, so the refusal names the limit.
MemoryIds = Annotated[list[int] | None, Form(max_length=MAX_SELECTED + 1)]


@router.post("/bulk-delete")
def delete_selected(user_id: UserId, signed: MemoryWriter, ids: MemoryIds = None) -> Response:
    try:
        deleted = remove_many(UserRef(signed.principal.id, user_id), ids or [])
    except UnknownUser as exc:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"no user {user_id!r}") from exc
    except SelectionRefused as exc:
        raise ConsoleError(status.HTTP_400_BAD_REQUEST, f"{exc}; nothing was deleted") from exc
    except MemoryGone as exc:
        raise ConsoleError(
            status.HTTP_409_CONFLICT,
            f"memory {exc.args[0]} is not an active memory of {user_id!r} (changed or deleted since the page was "
            "shown); nothing was deleted",
        ) from exc
    return RedirectResponse(f"/console/users/{user_id}/memories?deleted={deleted}", status.HTTP_303_SEE_OTHER)


def _plain(value: Any) -> Any:
    """JSON for the values rows hold beyond JSON's own: as the API's encoder writes them, several times faster on
    a heavy user's tens of thousands of rows."""
    if isinstance(value, date):  # datetimes too
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


@router.get("/export")
def export(user_id: UserId, signed: MemoryReader) -> Response:
    with db.connection() as conn:
        document = export_user(conn, user_scope(conn, signed.principal.id, user_id))
    return Response(
        json.dumps(document, default=_plain, ensure_ascii=False),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="engram-{user_id}.json"'},
    )
