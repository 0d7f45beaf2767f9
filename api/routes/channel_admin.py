"""Channel administration (scope `admin`, the caller's own tenant): connections, identity links, deliveries.
The bodies are in api/schemas/channels.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status

from api.deps import AdminKey
from api.errors import ApiError
from api.schemas import ID_PATTERN
from api.schemas.channels import (
    ConnectionIn,
    ConnectionOut,
    DeliveryOut,
    DeliveryStatus,
    IdentityIn,
    IdentityOut,
    Kind,
)
from shared.channels.connections import (
    SLUG_PATTERN,
    ConnectionInvalid,
    delete_connection,
    list_connections,
    public,
    tenant_connection,
)
from shared.channels.deliveries import list_deliveries
from shared.channels.identities import link_identity, list_identities
from shared.channels.setup import add_connection
from shared.infra import db
from shared.infra.config import get_settings

router = APIRouter(prefix="/v1/admin", tags=["admin"])

SlugPath = Annotated[str, Path(pattern=SLUG_PATTERN)]


def _webhook_path(kind: str, slug: str) -> str:
    return f"/v1/channels/slack/{slug}/events" if kind == "slack" else f"/v1/channels/telegram/{slug}/webhook"


def _connection_out(row: dict[str, Any]) -> ConnectionOut:
    return ConnectionOut(**{**row, "webhook_path": _webhook_path(row["kind"], row["slug"])})


@router.get("/channels", response_model=list[ConnectionOut])
def list_channel_connections(principal: AdminKey) -> list[ConnectionOut]:
    with db.connection() as conn:
        return [_connection_out(row) for row in list_connections(conn, principal.id)]


@router.post("/channels", response_model=ConnectionOut, responses={201: {"description": "Created"}})
def put_channel_connection(body: ConnectionIn, principal: AdminKey, response: Response) -> ConnectionOut:
    """Create a connection, or replace the secrets of the tenant's connection of this kind and slug."""
    secrets = {
        name: value.get_secret_value()
        for name, value in (
            ("signing_secret", body.signing_secret),
            ("bot_token", body.bot_token),
            ("webhook_secret", body.webhook_secret),
        )
        if value is not None
    }
    try:
        with db.connection() as conn:
            connection, created = add_connection(
                conn, principal.id, body.kind, body.slug, secrets, get_settings(), body.bot_username
            )
    except ConnectionInvalid as exc:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return _connection_out(public(connection))


@router.delete(
    "/channels/{kind}/{slug}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {"description": "No such"}}
)
def remove_channel_connection(kind: Kind, slug: SlugPath, principal: AdminKey) -> Response:
    """Its identity links, pending deliveries and dedupe records go with it; users and memories stay."""
    with db.connection() as conn:
        removed = delete_connection(conn, principal.id, kind, slug)
    if not removed:
        raise ApiError(status.HTTP_404_NOT_FOUND, f"no {kind} connection {slug!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/identities", response_model=list[IdentityOut])
def list_channel_identities(
    principal: AdminKey, user_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None
) -> list[IdentityOut]:
    with db.connection() as conn:
        return [IdentityOut(**row) for row in list_identities(conn, principal.id, user_id)]


@router.post("/identities", response_model=IdentityOut, responses={404: {"description": "No such connection"}})
def link_channel_identity(body: IdentityIn, principal: AdminKey) -> IdentityOut:
    """Map a platform identity to an engram user, so memory follows the person across channels."""
    with db.connection() as conn:
        connection = tenant_connection(conn, principal.id, body.kind, body.connection)
        if connection is None:
            raise ApiError(status.HTTP_404_NOT_FOUND, f"no {body.kind} connection {body.connection!r}")
        return IdentityOut(**link_identity(conn, connection, body.platform_user_id, body.user_id))


@router.get("/deliveries", response_model=list[DeliveryOut])
def list_channel_deliveries(
    principal: AdminKey,
    delivery_status: Annotated[DeliveryStatus | None, Query(alias="status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=2**63 - 1, description="Page: older than this id")] = None,
) -> list[DeliveryOut]:
    """Replies to Slack and Telegram, newest first; `?status=failed` lists those that could not be posted,
    with the reason (the text itself is the user's, in their export)."""
    with db.connection() as conn:
        return [DeliveryOut(**row) for row in list_deliveries(conn, principal.id, delivery_status, limit, before_id)]
