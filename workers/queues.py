"""Queue names (importable without building the Celery app)."""

QUEUES = ("turns", "extraction", "flush", "compaction", "embeddings", "maintenance", "channels")
# Served by the `worker-turns` process group; everything else by `worker-background`.
INTERACTIVE_QUEUES = ("turns", "channels")
BACKGROUND_QUEUES = tuple(q for q in QUEUES if q not in INTERACTIVE_QUEUES)
