"""How the schema distributes over a sharded Postgres (Citus): every table's placement.

User data is distributed by the user: `users` by `id`, every other per-user table by `user_id`, all in
one co-location group, so one user's rows of every table sit in the same shard and a request about one
user is a single-shard (router) query. `tenant_id` would not spread the load: one consumer tenant can
hold most of the users, and its whole data set would be one shard. Tables of the tenant (keys, bots,
agent profile) and the small global ones are reference tables (a copy on every node, so they join
with any shard locally); bookkeeping only the coordinator reads stays a local table there.

docs/operations/sharding.md explains the plan; tests/integration/test_sharding.py checks the live
schema and the statements real code paths run against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Placement = Literal["distributed", "reference", "coordinator"]

# Sized in docs/operations/sharding.md: the measured bytes of an active user × 100 M users, at most ~128 GB a shard.
PLANNED_SHARD_COUNT = 4096

# The co-location group of user data: every table in it is hashed on the same user id.
USER_GROUP = "users"


@dataclass(frozen=True)
class TablePlacement:
    name: str
    placement: Placement
    column: str | None = None  # the distribution column of a distributed table
    group: str | None = None  # its co-location group
    why: str = ""


# In the order a migration to Citus creates them: reference tables first, then `users`, then the tables
# whose foreign keys point at tables already distributed.
PLACEMENTS: tuple[TablePlacement, ...] = (
    TablePlacement("tenants", "reference", why="a few rows a tenant; every user table references it"),
    TablePlacement("personality_presets", "reference", why="a handful of rows; agent profiles reference it"),
    TablePlacement("agent_profiles", "reference", why="one row a tenant, read by every context build"),
    TablePlacement(
        "api_keys", "reference", why="looked up by key hash before the tenant or user is known (authentication)"
    ),
    TablePlacement(
        "channel_connections", "reference", why="a tenant's bots, looked up by (kind, slug) from a webhook URL"
    ),
    TablePlacement("embedding_space", "reference", why="one row: the model and dimension of every vector"),
    TablePlacement("users", "distributed", "id", USER_GROUP, "the user's own row anchors the group"),
    TablePlacement("sessions", "distributed", "user_id", USER_GROUP),
    TablePlacement("turns", "distributed", "user_id", USER_GROUP),
    TablePlacement("session_messages", "distributed", "user_id", USER_GROUP),
    TablePlacement("session_prompt_epochs", "distributed", "user_id", USER_GROUP),
    TablePlacement("memories", "distributed", "user_id", USER_GROUP),
    TablePlacement("memory_chunks", "distributed", "user_id", USER_GROUP, "memory and transcript vectors"),
    TablePlacement("memory_events", "distributed", "user_id", USER_GROUP),
    TablePlacement("entities", "distributed", "user_id", USER_GROUP),
    TablePlacement("memory_entities", "distributed", "user_id", USER_GROUP, "needs a user_id column first"),
    TablePlacement("documents", "distributed", "user_id", USER_GROUP),
    TablePlacement("llm_calls", "distributed", "user_id", USER_GROUP),
    TablePlacement("channel_identities", "distributed", "user_id", USER_GROUP),
    TablePlacement("inbound_events", "distributed", "user_id", USER_GROUP),
    TablePlacement("channel_deliveries", "distributed", "user_id", USER_GROUP),
    TablePlacement(
        "embedding_cache",
        "distributed",
        "content_hash",
        "embedding_cache",
        "shared by every user (keyed by text hash): its own group, so no node holds a full copy",
    ),
    TablePlacement("job_runs", "coordinator", why="maintenance bookkeeping, read and written by beat's jobs only"),
    TablePlacement("schema_migrations", "coordinator", why="applied migration files, read by `engram migrate`"),
)

BY_NAME: dict[str, TablePlacement] = {table.name: table for table in PLACEMENTS}


def distributed() -> tuple[TablePlacement, ...]:
    return tuple(table for table in PLACEMENTS if table.placement == "distributed")


def distribution_sql(shard_count: int) -> str:
    """The Citus calls that place every table, in an order whose foreign keys resolve."""
    lines = [f"SET citus.shard_count = {shard_count};"]
    for table in PLACEMENTS:
        if table.placement == "reference":
            lines.append(f"SELECT create_reference_table('{table.name}');")
        elif table.placement == "distributed":
            anchor = next(t.name for t in PLACEMENTS if t.group == table.group)
            colocate = "none" if anchor == table.name else anchor
            lines.append(
                f"SELECT create_distributed_table('{table.name}', '{table.column}', colocate_with => '{colocate}');"
            )
    return "\n".join(lines)
