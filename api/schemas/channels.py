"""Bodies of channel administration (`/v1/admin/channels`, `/identities`, `/deliveries`). Secrets go in and never
come out: a connection is shown with the names of the secrets it has set."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

from api.schemas.common import ID_PATTERN, RequestBody
from shared.channels.connections import SLUG_PATTERN
from shared.channels.identities import PLATFORM_ID_PATTERN

Kind = Literal["slack", "telegram"]
DeliveryStatus = Literal["waiting", "pending", "sending", "sent", "failed"]


class ConnectionIn(RequestBody):
    kind: Kind
    slug: str = Field(pattern=SLUG_PATTERN, description="Names the webhook URL: /v1/channels/<kind>/<slug>/…")
    signing_secret: SecretStr | None = Field(None, max_length=200, description="Slack: the app's signing secret")
    bot_token: SecretStr | None = Field(None, max_length=300, description="Slack xoxb-… or Telegram BotFather token")
    webhook_secret: SecretStr | None = Field(
        None, max_length=256, description="Telegram: X-Telegram-Bot-Api-Secret-Token; generated when left out"
    )
    bot_username: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_]{3,64}$", description="Telegram: the bot's @name (default: asked with getMe)"
    )


class ConnectionOut(BaseModel):
    id: int
    kind: str
    slug: str
    bot_username: str | None
    secrets_set: list[str] = Field(description="Which secrets are stored (their values are never shown)")
    webhook_path: str


class IdentityIn(RequestBody):
    user_id: str = Field(pattern=ID_PATTERN, description="The engram user the identity should map to")
    kind: Kind
    connection: str = Field(pattern=SLUG_PATTERN, description="The connection's slug")
    platform_user_id: str = Field(pattern=PLATFORM_ID_PATTERN, description="Slack user id (U…) or Telegram user id")


class IdentityOut(BaseModel):
    kind: str
    connection: str
    platform_user_id: str
    user_id: str
    previous_user_id: str | None = Field(None, description="The user the identity mapped to before, if another")


class DeliveryOut(BaseModel):
    id: int
    kind: str
    connection: str
    user_id: str | None
    turn_id: int | None
    target: dict[str, Any]
    status: str
    attempts: int
    parts_sent: int
    last_error: str | None
    next_attempt_at: datetime
    created_at: datetime
    updated_at: datetime
    sent_at: datetime | None
