"""Embedding-cache eviction: entries unused for ENGRAM_EMBEDDING_CACHE_MAX_IDLE_DAYS (30) go.

The cache only saves re-embedding identical text; chunks keep their own vectors, so evicting never
changes what search finds. The reference evicts at service start only; a daily job keeps the table
bounded on a gateway that runs for months. Deleted in bounded batches, each its own commit.
"""

from __future__ import annotations

from datetime import timedelta

from shared.maintenance.runs import RunHandle

BATCH = 5000


def run(handle: RunHandle) -> None:
    cutoff = handle.as_of - timedelta(days=handle.settings.embedding_cache_max_idle_days)
    while True:
        with handle.page() as page:
            evicted = page.conn.execute(
                """DELETE FROM embedding_cache WHERE ctid = ANY(ARRAY(
                       SELECT ctid FROM embedding_cache WHERE last_used_at < %s LIMIT %s))""",
                (cutoff, BATCH),
            ).rowcount
            page.count("evicted", evicted)
        if evicted < BATCH or handle.should_stop():
            return
