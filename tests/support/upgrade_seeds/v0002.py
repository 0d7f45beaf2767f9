"""0002 memory: memories with their chunks' vectors (the embedding space fixed by the first embedder, as
shared/embeddings/space.py did then), a superseded value with its history, an entity linked to a memory."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert

PET = "Alice has a golden retriever called Biscuit"
OLD_JOB = "works as a nurse at the city hospital"
JOB = "works as a paediatric nurse at the children's hospital"


def seed(conn: Conn, world: World) -> None:
    tenant, alice = world.ids["tenant"], world.ids["alice"]
    dimension = world.embedder.dimension
    conn.execute(f"ALTER TABLE memory_chunks ALTER COLUMN embedding TYPE vector({int(dimension)})")
    conn.execute(
        "INSERT INTO embedding_space (provider, model, dimension) VALUES (%s, %s, %s)",
        (world.embedder.provider, world.embedder.model, dimension),
    )
    pet = _memory(conn, world, "pet", PET, kind="fact")
    old_job = _memory(conn, world, "job", OLD_JOB, kind="fact", superseded=True)
    job = _memory(conn, world, "job", JOB, kind="fact", supersedes=old_job)
    conn.execute(
        """INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, old_value, new_value,
                                      actor)
           VALUES (%s, %s, %s, 'supersede', 'tacit/facts', 'job', %s, %s, 'agent')""",
        (tenant, alice, job, OLD_JOB, JOB),
    )
    entity = insert(
        conn,
        """INSERT INTO entities (tenant_id, user_id, canonical_name, normalized_name, entity_type, mention_count)
           VALUES (%s, %s, 'Biscuit', 'biscuit', 'person', 1) RETURNING id""",
        (tenant, alice),
    )
    conn.execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES (%s, %s)", (pet, entity))
    world.ids.update(memory_pet=pet, memory_old_job=old_job, memory_job=job, entity=entity)


def _memory(
    conn: Conn,
    world: World,
    key: str,
    value: str,
    *,
    kind: str,
    superseded: bool = False,
    supersedes: int | None = None,
) -> int:
    tenant, alice = world.ids["tenant"], world.ids["alice"]
    memory = insert(
        conn,
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, source, source_session_id,
                                 supersedes_id, valid_until)
           VALUES (%s, %s, 'tacit/facts', %s, %s, %s, 'agent', %s, %s, CASE WHEN %s THEN now() END) RETURNING id""",
        (tenant, alice, key, value, kind, world.ids["session"], supersedes, superseded),
    )
    text = f"{key}: {value}"
    conn.execute(
        """INSERT INTO memory_chunks (tenant_id, user_id, memory_id, text, end_char, content_hash, embedding)
           VALUES (%s, %s, %s, %s, %s, md5(%s), %s::vector)""",
        (tenant, alice, memory, text, len(text), text, world.vector(text)),
    )
    conn.execute(
        """INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, new_value, actor)
           VALUES (%s, %s, %s, 'add', 'tacit/facts', %s, %s, 'agent')""",
        (tenant, alice, memory, key, value),
    )
    return memory
