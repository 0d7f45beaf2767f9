"""Agent and user profiles: what the static prompt says about who the agent is and who the user is."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from shared.infra.db import Conn, Query

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

# Limits. Every agent-profile field is in the static prompt of every turn, and a user's profile in every
# turn of that user: megabytes here would be sent (and paid for) on every request. The API schema states
# the per-field limits; the totals, which depend on what is already stored, are checked here.
MAX_AGENT_NAME_CHARS = 80
MAX_PRESET_NAME_CHARS = 64
MAX_SHORT_FIELD_CHARS = 200  # creature, role, vibe, communication-style fields, user profile short fields
MAX_EMOJI_CHARS = 16
MAX_PERSONALITY_CHARS = 8_000
MAX_NOTES_CHARS = 8_000  # rules, and tool notes: each as markdown, or its structured titles + items together
MAX_NOTE_SECTIONS = 20
MAX_NOTE_ITEMS = 50  # per section
MAX_NOTE_ITEM_CHARS = 1_000
MAX_AGENT_PROFILE_CHARS = 24_000  # all agent-profile text together, ~6k tokens
MAX_USER_LIST_ITEMS = 30  # interests, goals
MAX_INTEREST_CHARS = 200
MAX_GOAL_CHARS = 500
MAX_USER_CONTEXT_CHARS = 5_000
MAX_COMMUNICATION_STYLE_CHARS = 1_000
MAX_USER_PROFILE_CHARS = 8_000  # all user-profile text together


class UnknownPreset(ValueError):
    pass


class ProfileTooLarge(ValueError):
    """The profile would put more text into every prompt than the limits allow; the message says how much."""


def text_chars(value: Any) -> int:
    """Characters of prompt text in a profile value: strings, lists of strings, structured notes."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_chars(v) for k, v in value.items() if k != "enabled")
    if isinstance(value, list | tuple):
        return sum(text_chars(v) for v in value)
    return len(str(value))


def _check_total(
    kind: str, stored: dict[str, Any] | None, values: dict[str, Any], fields: tuple[str, ...], limit: int
) -> None:
    merged = {field: (stored or {}).get(field) for field in fields} | values
    total = sum(text_chars(value) for value in merged.values())
    if total > limit:
        raise ProfileTooLarge(
            f"the {kind} profile would hold {total} characters of prompt text; the limit is {limit} for all its "
            "fields together (it is sent with every turn): shorten it"
        )


# NOT NULL columns: setting one of these to null (PATCH {"goals": null}) means "back to the default"
# (name Engram, no interests, no goals), not a NotNullViolation.
_NULL_MEANS_DEFAULT = frozenset({"name", "interests", "goals"})


def _adapt(field: str, value: Any) -> Any:
    return Jsonb(value) if field in _JSON_FIELDS and value is not None else value


def _assignments(values: dict[str, Any]) -> str:
    return ", ".join(
        f"{field} = DEFAULT" if value is None and field in _NULL_MEANS_DEFAULT else f"{field} = %({field})s"
        for field, value in values.items()
    )


def get_agent_profile(conn: Conn, tenant_id: int) -> dict[str, Any] | None:
    return conn.execute(
        f"SELECT {', '.join(AGENT_FIELDS)}, updated_at FROM agent_profiles WHERE tenant_id = %s", (tenant_id,)
    ).fetchone()


def agent_persona_query(tenant_id: int) -> Query:
    """The agent profile as the static prompt needs it: with its preset's prompt (`preset_prompt`)."""
    return (
        f"""SELECT {", ".join(AGENT_FIELDS)}, updated_at,
                   (SELECT p.prompt FROM personality_presets p WHERE p.name = agent_profiles.personality_preset)
                       AS preset_prompt
            FROM agent_profiles WHERE tenant_id = %s""",
        (tenant_id,),
    )


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
    _check_total("agent", get_agent_profile(conn, tenant_id), values, AGENT_FIELDS, MAX_AGENT_PROFILE_CHARS)
    conn.execute("INSERT INTO agent_profiles (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant_id,))
    if values:
        assignments = _assignments(values)
        conn.execute(
            f"UPDATE agent_profiles SET {assignments}, updated_at = now() WHERE tenant_id = %(tenant)s",
            {**{f: _adapt(f, v) for f, v in values.items()}, "tenant": tenant_id},
        )
    profile = get_agent_profile(conn, tenant_id)
    assert profile is not None
    return profile


def user_profile_query(tenant_id: int, user_id: int) -> Query:
    return (
        f"SELECT external_id, {', '.join(USER_PROFILE_FIELDS)}, updated_at FROM users WHERE tenant_id = %s AND id = %s",
        (tenant_id, user_id),
    )


def get_user_profile(conn: Conn, tenant_id: int, user_id: int) -> dict[str, Any] | None:
    return conn.execute(*user_profile_query(tenant_id, user_id)).fetchone()


def patch_user_profile(conn: Conn, tenant_id: int, user_id: int, values: dict[str, Any]) -> dict[str, Any] | None:
    unknown = set(values) - set(USER_PROFILE_FIELDS)
    if unknown:
        raise ValueError(f"unknown user profile fields: {sorted(unknown)}")
    _check_total(
        "user", get_user_profile(conn, tenant_id, user_id), values, USER_PROFILE_FIELDS, MAX_USER_PROFILE_CHARS
    )
    if values:
        assignments = _assignments(values)
        conn.execute(
            f"UPDATE users SET {assignments}, updated_at = now() WHERE tenant_id = %(tenant)s AND id = %(user)s",
            {**{f: _adapt(f, v) for f, v in values.items()}, "tenant": tenant_id, "user": user_id},
        )
    return get_user_profile(conn, tenant_id, user_id)
