"""Channel connections: a tenant's Slack or Telegram bot, named by a slug.

Secrets (Slack signing secret and bot token, Telegram bot token and webhook secret) are stored encrypted
(`secrets_encrypted`: name → Fernet token, shared/infra/secretbox.py) and read from the row into `SecretStr`s,
which print as `**********`; listings say which secrets are set, never their values, and every error
text that could carry one goes through `redact` before it is logged or stored.

The plain `secrets` column only holds rows written before migration 0017 (or by a previous release
during a rolling upgrade): they are read as they are, and `seal_plain_secrets` (run by `engram up`,
`engram migrate` and `engram secrets rotate`) encrypts them and empties the column. A row's plain
secrets, when present, are the newest (every write of this code empties them).
"""

from __future__ import annotations

import re
import secrets as token_source
from dataclasses import dataclass
from typing import Any, Literal

from psycopg.types.json import Jsonb
from pydantic import SecretStr

from shared.infra.config import Settings, get_settings
from shared.infra.db import Conn
from shared.infra.secretbox import InvalidToken, KeyRing, SecretKeyError, SecretKeyMissing, keyring

Kind = Literal["slack", "telegram"]
KINDS: tuple[Kind, ...] = ("slack", "telegram")
SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"
ENV_SLUG = "default"  # the connection the environment shortcut creates in the default tenant

# Which secrets each platform needs. A Telegram webhook secret is generated when none is given.
REQUIRED_SECRETS: dict[str, tuple[str, ...]] = {
    "slack": ("signing_secret", "bot_token"),
    "telegram": ("bot_token", "webhook_secret"),
}
_TELEGRAM_TOKEN = re.compile(r"^\d{1,20}:[A-Za-z0-9_-]{10,200}$")
# Telegram allows 1-256 characters A-Z, a-z, 0-9, _ and - in X-Telegram-Bot-Api-Secret-Token.
_TELEGRAM_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


class ConnectionInvalid(ValueError):
    """A connection request that cannot be stored (bad slug, missing or malformed secret, slug taken)."""


@dataclass(frozen=True)
class Connection:
    id: int
    tenant_id: int
    kind: Kind
    slug: str
    bot_username: str | None
    secrets: dict[str, SecretStr]

    def secret(self, name: str) -> str:
        value = self.secrets.get(name)
        return value.get_secret_value() if value is not None else ""

    @property
    def telegram_bot_id(self) -> str:
        """The bot's own user id: the number before the colon of its token."""
        return self.secret("bot_token").split(":", 1)[0]

    def redact(self, text: str) -> str:
        return redact(text, [value.get_secret_value() for value in self.secrets.values()])


def redact(text: str, secret_values: list[str]) -> str:
    for value in sorted(secret_values, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, "[redacted]")
    return text


_COLUMNS = "id, tenant_id, kind, slug, bot_username, secrets, secrets_encrypted"


def _undecryptable(kind: str, slug: str, ring: KeyRing) -> SecretKeyError:
    return SecretKeyError(
        f"the secrets of the {kind} connection {slug!r} do not decrypt with the keys of {ring.source}: the key "
        "that encrypted them was changed or dropped (put it back, at least after the first key, then run "
        "`engram secrets rotate`), or re-add the connection with its secrets"
    )


def _open_secrets(row: dict[str, Any]) -> dict[str, str]:
    plain = row.get("secrets") or {}
    if plain:  # written before secrets were encrypted (or by a previous release): sealed at the next start
        return {name: str(value) for name, value in plain.items()}
    sealed = row.get("secrets_encrypted") or {}
    if not sealed:
        return {}
    ring = keyring(get_settings())
    try:
        return {name: ring.open(token) for name, token in sealed.items()}
    except InvalidToken:
        raise _undecryptable(row["kind"], row["slug"], ring) from None


def _from_row(row: dict[str, Any]) -> Connection:
    return Connection(
        id=int(row["id"]),
        tenant_id=int(row["tenant_id"]),
        kind=row["kind"],
        slug=row["slug"],
        bot_username=row["bot_username"],
        secrets={name: SecretStr(value) for name, value in _open_secrets(row).items()},
    )


def _secret_names(row: dict[str, Any]) -> list[str]:
    return sorted(set(row.get("secrets") or {}) | set(row.get("secrets_encrypted") or {}))


def public(row: dict[str, Any] | Connection) -> dict[str, Any]:
    """What listings show: never a secret, only which ones are set."""
    if isinstance(row, Connection):
        return {
            "id": row.id,
            "kind": row.kind,
            "slug": row.slug,
            "bot_username": row.bot_username,
            "secrets_set": sorted(row.secrets),
        }
    return {
        "id": row["id"],
        "kind": row["kind"],
        "slug": row["slug"],
        "bot_username": row["bot_username"],
        "secrets_set": _secret_names(row),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def get_connection(conn: Conn, kind: str, slug: str) -> Connection | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM channel_connections WHERE kind = %s AND slug = %s", (kind, slug)
    ).fetchone()
    return _from_row(row) if row else None


def get_connection_by_id(conn: Conn, connection_id: int) -> Connection | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM channel_connections WHERE id = %s", (connection_id,)).fetchone()
    return _from_row(row) if row else None


def tenant_connection(conn: Conn, tenant_id: int, kind: str, slug: str) -> Connection | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM channel_connections WHERE tenant_id = %s AND kind = %s AND slug = %s",
        (tenant_id, kind, slug),
    ).fetchone()
    return _from_row(row) if row else None


def list_connections(conn: Conn, tenant_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM channel_connections WHERE tenant_id = %s ORDER BY kind, slug", (tenant_id,)
    ).fetchall()
    return [public(row) for row in rows]


def validate(kind: str, slug: str, secrets: dict[str, str]) -> dict[str, str]:
    """The secrets to store, checked (a missing Telegram webhook secret is generated); ConnectionInvalid."""
    if kind not in KINDS:
        raise ConnectionInvalid(f"unknown channel kind {kind!r}: use slack or telegram")
    if not re.match(SLUG_PATTERN, slug):
        raise ConnectionInvalid(f"invalid name {slug!r}: 1-40 lowercase letters, digits and -, starting with one")
    cleaned = {name: value.strip() for name, value in secrets.items() if value is not None and value.strip()}
    if kind == "telegram":
        cleaned.setdefault("webhook_secret", token_source.token_urlsafe(32))
        if "bot_token" in cleaned and not _TELEGRAM_TOKEN.match(cleaned["bot_token"]):
            raise ConnectionInvalid("the Telegram bot token is malformed: BotFather's token looks like 123456:ABC-def…")
        if not _TELEGRAM_SECRET.match(cleaned["webhook_secret"]):
            raise ConnectionInvalid("the Telegram webhook secret may only hold 1-256 of A-Z, a-z, 0-9, _ and -")
    unknown = set(cleaned) - set(REQUIRED_SECRETS[kind])
    if unknown:
        raise ConnectionInvalid(f"{kind} connections take no {', '.join(sorted(unknown))}")
    missing = [name for name in REQUIRED_SECRETS[kind] if name not in cleaned]
    if missing:
        raise ConnectionInvalid(f"a {kind} connection needs {' and '.join(missing)}")
    return cleaned


def upsert_connection(
    conn: Conn, tenant_id: int, kind: str, slug: str, secrets: dict[str, str], bot_username: str | None = None
) -> tuple[Connection, bool]:
    """Create the connection, or replace the secrets of the tenant's connection with this slug.

    Returns (connection, created). A slug another tenant uses is refused (the webhook URL has no tenant)."""
    cleaned = validate(kind, slug, secrets)
    ring = keyring(get_settings())  # SecretKeyMissing before anything is written
    sealed = {name: ring.seal(value) for name, value in cleaned.items()}
    row = conn.execute(
        f"""INSERT INTO channel_connections (tenant_id, kind, slug, secrets, secrets_encrypted, bot_username)
            VALUES (%s, %s, %s, '{{}}', %s, %s)
            ON CONFLICT (kind, slug) DO UPDATE
                SET secrets = '{{}}',
                    secrets_encrypted = EXCLUDED.secrets_encrypted,
                    bot_username = coalesce(EXCLUDED.bot_username, channel_connections.bot_username),
                    updated_at = now()
                WHERE channel_connections.tenant_id = EXCLUDED.tenant_id
            RETURNING {_COLUMNS}, (xmax = 0) AS created""",
        (tenant_id, kind, slug, Jsonb(sealed), bot_username),
    ).fetchone()
    if row is None:
        raise ConnectionInvalid(f"the {kind} name {slug!r} is taken by another tenant: choose another")
    return _from_row(row), bool(row["created"])


def set_bot_username(conn: Conn, connection_id: int, username: str) -> None:
    conn.execute(
        "UPDATE channel_connections SET bot_username = %s, updated_at = now() WHERE id = %s", (username, connection_id)
    )


def delete_connection(conn: Conn, tenant_id: int, kind: str, slug: str) -> bool:
    """Remove the connection; its identity links and pending deliveries go with it (users and memories stay)."""
    row = conn.execute(
        "DELETE FROM channel_connections WHERE tenant_id = %s AND kind = %s AND slug = %s RETURNING id",
        (tenant_id, kind, slug),
    ).fetchone()
    return row is not None


def count_plain_secrets(conn: Conn) -> int:
    """Connections whose secrets are still stored in plain text."""
    row = conn.execute("SELECT count(*) AS n FROM channel_connections WHERE secrets <> '{}'::jsonb").fetchone()
    return int(row["n"]) if row else 0


def seal_plain_secrets(conn: Conn, ring: KeyRing) -> int:
    """Encrypt every connection's plain-text secrets and empty the plain column; the number sealed.

    Idempotent and safe beside running processes (each row is locked while it is rewritten)."""
    rows = conn.execute(
        "SELECT id, secrets FROM channel_connections WHERE secrets <> '{}'::jsonb ORDER BY id FOR UPDATE"
    ).fetchall()
    for row in rows:
        sealed = {name: ring.seal(str(value)) for name, value in row["secrets"].items()}
        conn.execute(
            "UPDATE channel_connections SET secrets = '{}', secrets_encrypted = %s WHERE id = %s",
            (Jsonb(sealed), row["id"]),
        )
    return len(rows)


def reseal_secrets(conn: Conn, ring: KeyRing, *, check_only: bool = False) -> int:
    """Re-encrypt every connection's secrets under the first key (after sealing plain ones); the number of
    connections. With `check_only`, write nothing: only prove every secret decrypts. SecretKeyError names
    the first connection no key opens (nothing is then written)."""
    sealed_now = 0 if check_only else seal_plain_secrets(conn, ring)
    # A check only reads: it must not queue behind (or block) a connection being written.
    lock = "" if check_only else " FOR UPDATE"
    rows = conn.execute(
        "SELECT id, kind, slug, secrets_encrypted FROM channel_connections "
        f"WHERE secrets_encrypted <> '{{}}'::jsonb ORDER BY id{lock}"
    ).fetchall()
    updates: list[tuple[int, dict[str, str]]] = []
    for row in rows:
        try:
            if check_only:
                for token in row["secrets_encrypted"].values():
                    ring.open(token)
                continue
            updates.append((row["id"], {name: ring.reseal(t) for name, t in row["secrets_encrypted"].items()}))
        except InvalidToken:
            raise _undecryptable(row["kind"], row["slug"], ring) from None
    for connection_id, resealed in updates:
        conn.execute(
            "UPDATE channel_connections SET secrets_encrypted = %s WHERE id = %s", (Jsonb(resealed), connection_id)
        )
    return len(rows) if check_only else max(len(rows), sealed_now)


@dataclass(frozen=True)
class StoredSecrets:
    """What `check_stored_secrets` found: where the keys come from and how many connections hold secrets."""

    key_source: str | None  # ENGRAM_SECRET_KEY or the key file's path; None: no key (and nothing needs one)
    keys: int
    sealed: int  # connections whose encrypted secrets every one decrypted
    plain: int  # connections still in plain text (a previous release wrote them; sealed at the next start)


def check_stored_secrets(conn: Conn, settings: Settings) -> StoredSecrets:
    """Prove the keys open every stored secret, writing nothing: what `engram doctor` reports and what a gateway
    checks before it serves (a webhook whose secret does not decrypt would be refused, every time).

    SecretKeyMissing when secrets are stored and there is no key; SecretKeyError when one does not decrypt or a
    key is malformed."""
    plain = count_plain_secrets(conn)
    try:
        ring = keyring(settings)
    except SecretKeyMissing:
        row = conn.execute(
            "SELECT count(*) AS n FROM channel_connections WHERE secrets_encrypted <> '{}'::jsonb"
        ).fetchone()
        if plain or (row is not None and row["n"]):
            raise
        return StoredSecrets(None, 0, 0, 0)
    sealed = reseal_secrets(conn, ring, check_only=True)
    return StoredSecrets(ring.source, len(ring.keys), sealed, plain)


def seal_at_start(conn: Conn, settings: Settings, *, create_key: bool) -> int:
    """What `engram up` and `engram migrate` do after the migrations: encrypt the plain secrets left from
    before 0017 (idempotent) and prove the keys open every stored secret; the number of rows sealed.

    Without any key (and none to create) nothing is sealed: SecretKeyMissing only when plain rows wait.
    SecretKeyError when a stored secret does not decrypt (a wrong or dropped key)."""
    try:
        ring = keyring(settings, create=create_key)
    except SecretKeyMissing:
        if count_plain_secrets(conn):
            raise
        return 0
    sealed = seal_plain_secrets(conn, ring)
    reseal_secrets(conn, ring, check_only=True)
    return sealed
