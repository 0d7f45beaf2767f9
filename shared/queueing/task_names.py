"""Every Celery task's name, in one place.

A task is registered as `engram.<queue>.<function name>` (workers/base.py `engram_task`, which refuses a
name missing here) and sent by name: the gateway and the workers' follow-up work (workers/dispatch.py),
beat (workers/app.py, the maintenance job table in shared/maintenance/schedule.py) and the benchmarks
(ops/bench). A sender that used a name no worker registers would lose its work silently, so senders use
these constants and never spell a name out.
"""

from __future__ import annotations

PREFIX = "engram."


def task_name(queue: str, function: str) -> str:
    """The name `engram_task(queue)` registers `function` under (also a route pattern with function "*")."""
    return f"{PREFIX}{queue}.{function}"


# turns
TURNS_DRAIN = task_name("turns", "drain")
TURNS_PING = task_name("turns", "ping")
# extraction
EXTRACTION_EXTRACT = task_name("extraction", "extract")
EXTRACTION_SYNTHESIZE = task_name("extraction", "synthesize")
# flush, compaction
FLUSH = task_name("flush", "flush")
COMPACTION_COMPACT = task_name("compaction", "compact")
# embeddings
EMBED_PENDING = task_name("embeddings", "embed_pending")
EMBED_TRANSCRIPT = task_name("embeddings", "embed_transcript")
EMBED_MEMORY = task_name("embeddings", "embed_memory")
INDEX_MISSING_MEMORIES = task_name("embeddings", "index_missing_memories")
# channels
CHANNELS_DELIVER = task_name("channels", "deliver")
# maintenance: the jobs (named like the job: cache-eviction → engram.maintenance.cache_eviction) ...
JOB_ENRICHMENT = task_name("maintenance", "enrichment")
JOB_CONSOLIDATION = task_name("maintenance", "consolidation")
JOB_DECAY = task_name("maintenance", "decay")
JOB_REFLECTION = task_name("maintenance", "reflection")
JOB_CACHE_EVICTION = task_name("maintenance", "cache_eviction")
# ... and the sweeps
CONSOLIDATE_SESSION = task_name("maintenance", "consolidate_session")
QUEUE_CONSOLIDATIONS = task_name("maintenance", "queue_consolidations")
RESUME_JOB_RUNS = task_name("maintenance", "resume_job_runs")
REDRIVE_STALLED_TURNS = task_name("maintenance", "redrive_stalled_turns")
REDRIVE_PENDING_EXTRACTION = task_name("maintenance", "redrive_pending_extraction")
REDRIVE_STALLED_DELIVERIES = task_name("maintenance", "redrive_stalled_deliveries")

ALL = frozenset(
    {
        TURNS_DRAIN,
        TURNS_PING,
        EXTRACTION_EXTRACT,
        EXTRACTION_SYNTHESIZE,
        FLUSH,
        COMPACTION_COMPACT,
        EMBED_PENDING,
        EMBED_TRANSCRIPT,
        EMBED_MEMORY,
        INDEX_MISSING_MEMORIES,
        CHANNELS_DELIVER,
        JOB_ENRICHMENT,
        JOB_CONSOLIDATION,
        JOB_DECAY,
        JOB_REFLECTION,
        JOB_CACHE_EVICTION,
        CONSOLIDATE_SESSION,
        QUEUE_CONSOLIDATIONS,
        RESUME_JOB_RUNS,
        REDRIVE_STALLED_TURNS,
        REDRIVE_PENDING_EXTRACTION,
        REDRIVE_STALLED_DELIVERIES,
    }
)
