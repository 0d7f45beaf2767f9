"""The sharding plan's page shows the Citus calls shared/infra/sharding.py would make, for the shard count it plans."""

from __future__ import annotations

from pathlib import Path

from shared.infra.sharding import PLANNED_SHARD_COUNT, distribution_sql

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "sharding.md"


def test_the_page_lists_the_distribution_calls_in_order() -> None:
    assert f"```sql\n{distribution_sql(PLANNED_SHARD_COUNT)}\n```" in PAGE.read_text()
