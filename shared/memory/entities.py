"""Entities of a user's world (people, places, handles, links) and their links to memories.

Mentions come from the regex extractor. A mention joins an existing entity when its normalised
name equals the entity's name or one of its aliases; a lone first name ("caroline") and a full
name starting with it ("caroline smith") are merged into one entity with the longer name as the
canonical one and the shorter as an alias.
"""

from __future__ import annotations

from typing import Any

from shared.infra.db import Conn
from shared.memory.entity_extraction import EntityMention, extract_entities, normalize_entity_name

NAME_TYPES = ("person_or_thing",)


def _find(conn: Conn, user_id: int, mention: EntityMention) -> dict[str, Any] | None:
    return conn.execute(
        """SELECT * FROM entities
           WHERE user_id = %s AND entity_type = %s AND (normalized_name = %s OR %s = ANY(aliases))
           ORDER BY mention_count DESC LIMIT 1""",
        (user_id, mention.entity_type, mention.normalized, mention.normalized),
    ).fetchone()


def _find_by_first_name(conn: Conn, user_id: int, mention: EntityMention) -> dict[str, Any] | None:
    """For names only: 'caroline' ↔ 'caroline smith' (either direction)."""
    if mention.entity_type not in NAME_TYPES:
        return None
    first = mention.normalized.split(" ")[0]
    if " " in mention.normalized:  # a full name: is its first name already an entity?
        return conn.execute(
            "SELECT * FROM entities WHERE user_id = %s AND entity_type = %s AND normalized_name = %s",
            (user_id, mention.entity_type, first),
        ).fetchone()
    rows = conn.execute(
        """SELECT * FROM entities WHERE user_id = %s AND entity_type = %s AND normalized_name LIKE %s""",
        (user_id, mention.entity_type, first + " %"),
    ).fetchall()
    return rows[0] if len(rows) == 1 else None  # ambiguous first names stay separate


def upsert_entity(conn: Conn, tenant_id: int, user_id: int, mention: EntityMention) -> int:
    existing = _find(conn, user_id, mention) or _find_by_first_name(conn, user_id, mention)
    if existing is None:
        row = conn.execute(
            """INSERT INTO entities (tenant_id, user_id, canonical_name, normalized_name, entity_type, mention_count)
               VALUES (%s, %s, %s, %s, %s, 1)
               ON CONFLICT (user_id, entity_type, normalized_name)
               DO UPDATE SET mention_count = entities.mention_count + 1, last_seen_at = now()
               RETURNING id""",
            (tenant_id, user_id, mention.name, mention.normalized, mention.entity_type),
        ).fetchone()
        assert row is not None
        return int(row["id"])
    if len(mention.normalized) > len(existing["normalized_name"]) and mention.normalized not in existing["aliases"]:
        # The fuller name becomes canonical; the shorter one is kept as an alias.
        conn.execute(
            """UPDATE entities SET canonical_name = %s, normalized_name = %s,
                   aliases = array_append(aliases, normalized_name), mention_count = mention_count + 1,
                   last_seen_at = now()
               WHERE tenant_id = %s AND user_id = %s AND id = %s""",
            (mention.name, mention.normalized, tenant_id, user_id, existing["id"]),
        )
    else:
        conn.execute(
            """UPDATE entities SET mention_count = mention_count + 1, last_seen_at = now(),
                   aliases = CASE WHEN %s = normalized_name OR %s = ANY(aliases) THEN aliases
                                  ELSE array_append(aliases, %s) END
               WHERE tenant_id = %s AND user_id = %s AND id = %s""",
            (mention.normalized, mention.normalized, mention.normalized, tenant_id, user_id, existing["id"]),
        )
    return int(existing["id"])


def link_entities(conn: Conn, tenant_id: int, user_id: int, memory_id: int, text: str) -> list[int]:
    entity_ids = [upsert_entity(conn, tenant_id, user_id, mention) for mention in extract_entities(text)]
    if entity_ids:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_entities (memory_id, entity_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                [(memory_id, entity_id) for entity_id in dict.fromkeys(entity_ids)],
            )
    return entity_ids


def list_entities(conn: Conn, tenant_id: int, user_id: int, limit: int = 100) -> list[dict[str, Any]]:
    return conn.execute(
        """SELECT id, canonical_name, entity_type, aliases, mention_count, first_seen_at, last_seen_at
           FROM entities WHERE tenant_id = %s AND user_id = %s
           ORDER BY mention_count DESC, canonical_name LIMIT %s""",
        (tenant_id, user_id, limit),
    ).fetchall()


def entity_info(conn: Conn, tenant_id: int, user_id: int, name: str) -> dict[str, Any] | None:
    """An entity found by name or alias, with its active linked memories."""
    normalized = normalize_entity_name(name)
    entity = conn.execute(
        """SELECT id, canonical_name, entity_type, aliases, mention_count, first_seen_at, last_seen_at
           FROM entities WHERE tenant_id = %s AND user_id = %s AND (normalized_name = %s OR %s = ANY(aliases))
           ORDER BY mention_count DESC LIMIT 1""",
        (tenant_id, user_id, normalized, normalized),
    ).fetchone()
    if entity is None:
        return None
    memories = conn.execute(
        """SELECT m.id, m.namespace, m.key, m.value, m.kind FROM memory_entities me
           JOIN memories m ON m.id = me.memory_id
           WHERE me.entity_id = %s AND m.user_id = %s AND m.valid_until IS NULL
           ORDER BY m.updated_at DESC LIMIT 50""",
        (entity["id"], user_id),
    ).fetchall()
    return {**entity, "memories": memories}
