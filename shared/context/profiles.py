"""Agent and user profiles: what the static prompt says about who the agent is and who the user is."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from shared.db import Conn

AGENT_FIELDS = (
    "name",
    "personality_preset",
    "custom_personality",
    "creature",
    "role",
    "vibe",
    "emoji",
    "voice_style",
    "formality",
    "emoji_usage",
    "response_length",
    "rules",
    "rules_markdown",
    "tool_notes",
    "tool_notes_markdown",
)
USER_PROFILE_FIELDS = (
    "display_name",
    "location",
    "timezone",
    "occupation",
    "interests",
    "goals",
    "context",
    "communication_style",
)
_JSON_FIELDS = frozenset({"rules", "tool_notes", "interests", "goals"})


class UnknownPreset(ValueError):
    pass


def _adapt(field: str, value: Any) -> Any:
    return Jsonb(value) if field in _JSON_FIELDS and value is not None else value


def get_agent_profile(conn: Conn, tenant_id: int) -> dict[str, Any] | None:
    return conn.execute(
        f"SELECT {', '.join(AGENT_FIELDS)}, updated_at FROM agent_profiles WHERE tenant_id = %s", (tenant_id,)
    ).fetchone()


def list_presets(conn: Conn) -> list[dict[str, Any]]:
    return conn.execute("SELECT name, title FROM personality_presets ORDER BY name").fetchall()


def preset_prompt(conn: Conn, name: str | None) -> str | None:
    if not name:
        return None
    row = conn.execute("SELECT prompt FROM personality_presets WHERE name = %s", (name,)).fetchone()
    return row["prompt"] if row else None


def put_agent_profile(conn: Conn, tenant_id: int, values: dict[str, Any]) -> dict[str, Any]:
    """Create or update the tenant's agent profile with the given fields (others keep their value)."""
    unknown = set(values) - set(AGENT_FIELDS)
    if unknown:
        raise ValueError(f"unknown agent profile fields: {sorted(unknown)}")
    preset = values.get("personality_preset")
    if preset is not None and preset_prompt(conn, preset) is None:
        names = ", ".join(p["name"] for p in list_presets(conn))
        raise UnknownPreset(f"unknown personality preset {preset!r}; use one of {names}, or set custom_personality")
    conn.execute("INSERT INTO agent_profiles (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant_id,))
    if values:
        assignments = ", ".join(f"{field} = %({field})s" for field in values)
        conn.execute(
            f"UPDATE agent_profiles SET {assignments}, updated_at = now() WHERE tenant_id = %(tenant)s",
            {**{f: _adapt(f, v) for f, v in values.items()}, "tenant": tenant_id},
        )
    profile = get_agent_profile(conn, tenant_id)
    assert profile is not None
    return profile


def get_user_profile(conn: Conn, tenant_id: int, user_id: int) -> dict[str, Any] | None:
    return conn.execute(
        f"SELECT external_id, {', '.join(USER_PROFILE_FIELDS)}, updated_at FROM users WHERE tenant_id = %s AND id = %s",
        (tenant_id, user_id),
    ).fetchone()


def patch_user_profile(conn: Conn, tenant_id: int, user_id: int, values: dict[str, Any]) -> dict[str, Any] | None:
    unknown = set(values) - set(USER_PROFILE_FIELDS)
    if unknown:
        raise ValueError(f"unknown user profile fields: {sorted(unknown)}")
    if values:
        assignments = ", ".join(f"{field} = %({field})s" for field in values)
        conn.execute(
            f"UPDATE users SET {assignments}, updated_at = now() WHERE tenant_id = %(tenant)s AND id = %(user)s",
            {**{f: _adapt(f, v) for f, v in values.items()}, "tenant": tenant_id, "user": user_id},
        )
    return get_user_profile(conn, tenant_id, user_id)
