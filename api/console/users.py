"""The users of the signed-in key's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from api.console.filters import Filters
from api.console.render import page
from api.console.session import MemoryReader
from shared.console.users import ORDERS, list_users
from shared.infra.replicas import read

router = APIRouter(prefix="/console", include_in_schema=False)
LONGEST_SEARCH = 200


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/console/users", status_code=303)


@router.get("/users", response_class=HTMLResponse)
def users(
    request: Request,
    signed: MemoryReader,
    q: Annotated[str, Query(max_length=2000)] = "",
    erased: Annotated[str, Query(max_length=200)] = "",
    sort: Annotated[str, Query(max_length=2000)] = "id",
    page_number: Annotated[str, Query(alias="page", max_length=2000)] = "",
) -> HTMLResponse:
    given = Filters()
    q = given.text(q, "q", LONGEST_SEARCH)
    sort = given.choice(sort, ORDERS, "sort", "order", "id")
    number = given.page(page_number)
    principal = signed.principal
    found = read(
        lambda conn: list_users(
            conn, principal.id, search=q.strip(), only=principal.user_external_id, order=sort, page=number
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
            "errors": given.errors,
        },
        status_code=given.status_code,
    )
