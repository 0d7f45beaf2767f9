"""Queue names (importable without building the Celery app)."""

QUEUES = ("turns", "extraction", "flush", "compaction", "embeddings", "maintenance", "channels")
# Served by the `worker-turns` process group; everything else by `worker-background`.
INTERACTIVE_QUEUES = ("turns", "channels")
BACKGROUND_QUEUES = tuple(q for q in QUEUES if q not in INTERACTIVE_QUEUES)

# Worker pools of a cluster deployment (docker-compose.yml, ops/k8s): one per queue group, so a burst of
# memory work cannot delay turns, and embeddings (CPU-bound with local models) scale on their own.
POOLS: dict[str, tuple[str, ...]] = {
    "turns": INTERACTIVE_QUEUES,
    "memory": ("extraction", "flush", "compaction"),
    "embeddings": ("embeddings",),
    "maintenance": ("maintenance",),
}
