"""The users of the signed-in key's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from api.console.render import page
from api.console.session import ConsoleError, MemoryReader
from shared.console.users import ORDERS, list_users
from shared.replicas import read

router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/console/users", status_code=303)


@router.get("/users", response_class=HTMLResponse)
def users(
    request: Request,
    signed: MemoryReader,
    q: Annotated[str, Query(max_length=200)] = "",
    erased: Annotated[str, Query(max_length=200)] = "",
    sort: Annotated[str, Query(max_length=20)] = "id",
    page_number: Annotated[int, Query(alias="page", ge=1, le=400)] = 1,
) -> HTMLResponse:
    if sort not in ORDERS:
        raise ConsoleError(status.HTTP_400_BAD_REQUEST, f"unknown order {sort!r}; orders are {', '.join(ORDERS)}")
    principal = signed.principal
    found = read(
        lambda conn: list_users(
            conn, principal.id, search=q.strip(), only=principal.user_external_id, order=sort, page=page_number
        )
    )
    return page(
        request,
        "users.html",
        signed,
        {
            "users": found,
            "q": q,
            "sort": sort,
            "orders": ORDERS,
            "query": {"q": q, "sort": "" if sort == "id" else sort},
            "erased": erased,
        },
    )
