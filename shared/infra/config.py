"""The one settings object. Every field is read from an `ENGRAM_`-prefixed environment variable
(or a `.env` file in the working directory) and documented here: its `description` is its meaning
(markdown; links are relative to docs/reference/), and the `# --- … ---` comments are its sections.
The Settings page of the docs (docs/reference/settings.md) and `.env.example` are generated from this
class (`python -m ops.settings_doc`, `python -m ops.env_example`); a field without a description stops
both. `json_schema_extra={"doc_default": …}` gives the default those files show where the object has
none to show (unset, computed, generated) or spells one (it must parse to the object's default).

Longer than other modules on purpose: one object holds every setting, so that one place validates them
together and documents them all; splitting it would scatter that reference. Its sections are the
`# --- … ---` comments."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.infra.cron import parse_cron
from shared.infra.sentinel import is_sentinel_url, parse_sentinels

ProviderName = Literal["auto", "offline", "anthropic", "openai"]


def _default_data_dir() -> Path:
    return Path.home() / ".engram"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", env_file=".env", extra="ignore")

    # --- where state lives -------------------------------------------------------------------
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="embedded servers' data, PID files, the dev API key",
        json_schema_extra={"doc_default": "`~/.engram`"},
    )
    database_url: str | None = Field(
        None, description="Postgres URL (needs pgvector); unset = embedded Postgres in the data dir"
    )
    redis_url: str | None = Field(
        None,
        description="Redis URL; unset = embedded valkey in the data dir. A kombu-style Sentinel URL "
        "(`sentinel://host:port;sentinel://host:port`) means the same as `ENGRAM_REDIS_SENTINELS`",
    )
    redis_sentinels: str | None = Field(
        None,
        description="Redis Sentinel addresses, `host:port,host:port`; when set, every Redis client (broker, "
        "locks, event streams, rate limits, beat) asks them for the primary of `ENGRAM_REDIS_SENTINEL_SERVICE` "
        "and follows a failover, and `ENGRAM_REDIS_URL` is not used (see [Redis Sentinel]"
        "(../operations/sentinel.md))",
    )
    redis_sentinel_service: str = Field(
        "engram", min_length=1, description="the master name the sentinels monitor (`sentinel monitor <name> …`)"
    )
    database_replica_urls: str = Field(
        "",
        description="comma-separated URLs of Postgres streaming replicas of `ENGRAM_DATABASE_URL`; memory search "
        "and lists, `/context`, exports and the console's lists read from them (see Operations → Read replicas); "
        "empty = every read goes to the primary",
    )
    database_replica_max_lag_seconds: float = Field(
        5.0,
        gt=0,
        description="a replica is read from only while it has replayed everything the primary had committed this "
        "many seconds ago (the staleness bound of replica reads); a replica further behind is skipped",
    )
    database_replica_lsn_wait_seconds: float = Field(
        0.5,
        ge=0,
        description="a read that names the last write it must see (`X-Engram-Min-Lsn`) waits this long at most for "
        "a replica to replay it, then reads the primary",
    )
    database_replica_down_seconds: float = Field(
        5.0,
        gt=0,
        description="a replica that could not be reached is skipped (reads go to the others or the primary) this "
        "long before it is tried again",
    )
    db_pool_size: int = Field(
        10,
        ge=1,
        description="connections per process pool at most; the gateway opens all of them at start and keeps them "
        "open (count gateways × this against Postgres' `max_connections`)",
    )

    # --- time limits: a dependency that stops answering ------------------------------------------
    db_connect_timeout_seconds: int = Field(
        3, ge=1, description="longest a new Postgres connection may take to open (libpq `connect_timeout`)"
    )
    db_pool_timeout_seconds: float = Field(
        10.0,
        gt=0,
        description="longest a request or task waits for a free pooled Postgres connection before `503 "
        "database_unavailable` (a task retries)",
    )
    db_statement_timeout_seconds: float = Field(
        60.0,
        ge=0,
        description="Postgres `statement_timeout` of pooled connections (a statement waiting on a lock or running "
        "this long is cancelled, its transaction rolled back, and answered as `database_unavailable`); "
        "`0` = none. Migrations and `engram backup` do not use the pool",
    )
    redis_connect_timeout_seconds: float = Field(
        3.0, gt=0, description="longest a new Redis connection may take to open (clients and the Celery broker)"
    )
    redis_socket_timeout_seconds: float = Field(
        5.0,
        gt=1,
        description="longest one Redis command may wait for its answer (clients and the Celery broker); longer "
        "than any blocking read engram makes (1 s)",
    )
    redis_health_check_interval_seconds: int = Field(
        15, ge=0, description="a Redis connection idle this long is pinged before it is used again (`0` = never)"
    )
    request_time_limit_seconds: float = Field(
        15.0,
        ge=0,
        description="longest the gateway works on a request before it answers `503 dependency_timeout` (Postgres, "
        "Redis or the broker stopped answering); a long poll adds its `wait` (at most "
        "`ENGRAM_MAX_WAIT_SECONDS`), `POST /v1/chat/completions` adds `ENGRAM_CHAT_COMPLETIONS_WAIT_SECONDS`; "
        "the limit ends when the response starts, so a stream (`/events`, `stream=true`) runs on under its "
        "own limit; `0` = no limit. A `POST` answered so may still have been stored: repeat it with the same "
        "`Idempotency-Key`",
    )

    # --- gateway -----------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="address the gateway binds to")
    port: int = Field(8000, description="gateway port")
    flower_port: int = Field(5555, description="Flower port")
    max_turn_chars: int = Field(16_000, ge=1, description="longest accepted user message (longer is `413`)")
    max_wait_seconds: float = Field(60.0, ge=0, description="cap on `?wait=` long polls")
    max_request_bytes: int = Field(
        1_048_576,
        ge=1024,
        description="largest accepted request body (1 MiB); a larger one is `413 payload_too_large`, refused from "
        "its `Content-Length` before the body is read, or as soon as a streamed body passes the limit",
    )
    sse_max_seconds: float = Field(
        300.0,
        gt=0,
        description="longest a `/events` stream stays open; it ends earlier when the turn is done or failed, and "
        "a client resumes with `Last-Event-ID`",
    )
    # Token buckets in Redis: a sustained rate and a burst, per API key and per tenant (0 = no limit).
    rate_limit_key_per_second: float = Field(
        50.0,
        ge=0,
        description="requests per second one API key may sustain (token bucket in Redis; `0` = no limit); over it "
        "is `429 rate_limited` with `Retry-After`",
    )
    rate_limit_key_burst: int = Field(100, ge=1, description="requests one API key may send at once")
    rate_limit_tenant_per_second: float = Field(
        200.0, ge=0, description="requests per second all of a tenant's keys together may sustain (`0` = no limit)"
    )
    rate_limit_tenant_burst: int = Field(400, ge=1, description="requests a tenant may send at once")
    # Message ingest (outside conversations): bounds of one POST …/messages (over them is 413).
    ingest_max_messages: int = Field(
        500,
        ge=1,
        description="messages one `POST …/sessions/{key}/messages` may carry (more is `413`, nothing written)",
    )
    ingest_max_message_chars: int = Field(
        32_000, ge=1, description="longest ingested message in characters (longer is `413`, nothing written)"
    )
    dev_api_key: SecretStr | None = Field(
        None,
        description="fixed key for the `default` tenant (e.g. docker-compose); unset = generated once and kept in "
        "the data dir",
    )
    secret_key: SecretStr | None = Field(
        None,
        description="Fernet key(s) that encrypt stored channel secrets, comma-separated: the first encrypts, all "
        "decrypt (rotation: [Security](../concepts/security.md#secrets-at-rest)); unset = `<data dir>/secret-key`, "
        "which `engram up` generates; set it (the same in every process) when processes do not share a data dir",
        json_schema_extra={"doc_default": "generated"},
    )

    # --- language model ----------------------------------------------------------------------
    llm_provider: ProviderName = Field(
        "auto",
        description="`auto`, `offline`, `anthropic` or `openai`; auto picks Anthropic when its key is set, then "
        "OpenAI (key or base URL), else offline",
    )
    llm_model: str | None = Field(
        None,
        description="chat model (`claude-sonnet-4-6`, `gpt-4.1`, `offline-rules`)",
        json_schema_extra={"doc_default": "per provider"},
    )
    llm_cheap_model: str | None = Field(
        None,
        description="model for background work (`claude-haiku-4-5`, `gpt-4.1-mini`); its calls send `temperature` "
        "0, which Anthropic's pages say Claude Sonnet 5 refuses (400), so keep a 4.x Claude here (a "
        "failed call falls back to the chat model)",
        json_schema_extra={"doc_default": "per provider"},
    )
    anthropic_api_key: SecretStr | None = Field(None, description="Anthropic key")
    anthropic_base_url: str | None = Field(None, description="Anthropic API base URL, without `/v1`")
    openai_api_key: SecretStr | None = Field(None, description="OpenAI key (not needed for local compatible servers)")
    openai_base_url: str | None = Field(
        None, description="any OpenAI-compatible endpoint, with `/v1` (e.g. `http://127.0.0.1:11434/v1` for Ollama)"
    )
    llm_timeout_seconds: float = Field(120.0, description="timeout of one LLM request")
    llm_max_attempts: int = Field(
        4,
        ge=1,
        description="tries per LLM call; only 429, 5xx, timeouts and connection errors are retried, honouring "
        "`Retry-After`",
    )
    llm_max_retry_wait_seconds: float = Field(30.0, description="longest wait between tries")
    max_output_tokens: int = Field(1024, description="`max_tokens` of a chat call")
    llm_prices: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description='US$ per million tokens by model and kind, JSON, e.g. `{"claude-sonnet-4-6": {"input": 3, '
        '"output": 15, "cache_read": 0.3, "cache_write": 3.75}}`; feeds `engram_llm_cost_usd_total` '
        "(no built-in prices: they change)",
    )

    # --- embeddings ----------------------------------------------------------------------------
    embedding_provider: Literal["local", "openai"] = Field(
        "local",
        description="`local` = the bundled all-MiniLM-L6-v2 (384 dims, offline, CPU); `openai` = OpenAI or any "
        "compatible endpoint",
    )
    embedding_model: str | None = Field(
        None,
        description="`all-MiniLM-L6-v2` (local), `text-embedding-3-small` (openai)",
        json_schema_extra={"doc_default": "per provider"},
    )
    embedding_dimensions: int | None = Field(
        None, ge=1, description="the `dimensions` parameter of OpenAI text-embedding-3 models"
    )
    embedding_base_url: str | None = Field(
        None, description="OpenAI-compatible embeddings endpoint, with `/v1` (default: `ENGRAM_OPENAI_BASE_URL`)"
    )
    embedding_api_key: SecretStr | None = Field(
        None, description="key for that endpoint (default: `ENGRAM_OPENAI_API_KEY`)"
    )
    embedding_batch_size: int = Field(
        64,
        ge=1,
        description="texts per embedding call (memories; the transcript units' drain takes a quarter of it per task)",
    )
    embedding_backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        "auto",
        description="runtime of the local model. `auto`: int8 weights on onnxruntime for a new database (about 2× "
        "fp32's texts/s, hybrid recall@10 0.755 vs 0.759 on `locomo-dev.json`), and the fp32 model "
        "for a database whose vectors fp32 made, so an upgrade needs no reindex (see "
        "[Embeddings](../concepts/memory.md#embeddings)). `onnx` (fp32 on onnxruntime) or `torch` "
        "(sentence-transformers): the same model and the same vectors (cosine ≥ 0.9999), so switching "
        "between them needs no reindex; onnx has 2.2-4.0× the texts/s at 0.65× the peak RSS on 2 "
        "cores and loads in under a second instead of 11-27 s (`python -m ops.bench.embedders`). "
        "`onnx-int8`: the int8 model always (quantized once from the export, next to it); other "
        "vectors (cosine ≥ 0.985 to fp32 on LoCoMo turns), so it is another embedding space and "
        "switching an fp32 database to it needs `engram reindex`. Explicit backends never follow the "
        "database",
    )
    embedding_onnx_path: Path | None = Field(
        None,
        description="ONNX export of the local model; unset = the user's cache "
        "(`$XDG_CACHE_HOME/engram/models/all-MiniLM-L6-v2-<package versions>-opset17.onnx`, "
        "`~/.cache/…` when unset), exported there on first use (needs torch, a few seconds; later "
        "processes do not import torch). To export at build time: `python -m "
        "shared.embeddings.providers export PATH` (the image does; it also writes the int8 model next "
        "to it, `<PATH stem>-int8-onnxruntime-<version>.onnx`, which `auto` and `onnx-int8` load, "
        "quantizing it there on first use when missing)",
    )
    embedding_space_check_seconds: float = Field(
        60.0,
        ge=0,
        description="how long a process trusts its last check that the recorded embedding model is the configured one",
    )

    # --- search ------------------------------------------------------------------------------
    search_fusion: Literal["weighted", "rrf"] = Field(
        "weighted",
        description="how search legs are fused: `weighted` or `rrf` (see [Search](../concepts/memory.md#search))",
    )
    search_rrf_k: int = Field(60, ge=1, description="the k of reciprocal rank fusion")
    search_vector_weight: float = Field(
        0.7, ge=0, le=1, description="weighted mode: weight of vector similarity (text gets the rest)"
    )
    turn_recall_tokens: int = Field(
        500,
        ge=0,
        description="budget of a turn's relevant memory (facts and excerpts of the user's other conversations, in "
        "the dynamic context); 0 = none",
    )
    search_relative_floor: float = Field(
        0.3,
        ge=0,
        le=1,
        description="weighted mode: results scoring under this share of the query's best result are dropped",
    )
    search_overfetch: int = Field(8, ge=1, description="each leg fetches limit × this many candidates before fusion")

    # --- context ---------------------------------------------------------------------------------
    context_dir: Path | None = Field(
        None, description="directory with SOUL.md / AGENTS.md / MEMORY.md, used when the tenant has no agent profile"
    )
    context_window_tokens: int | None = Field(
        None,
        ge=1000,
        description="override the chat model's context window (pruning budget)",
        json_schema_extra={"doc_default": "per model"},
    )
    compaction_threshold_tokens: int | None = Field(
        None,
        ge=200,
        description="compact a session when its live messages reach this many tokens (its next extraction "
        "compacts it, in the same model call)",
        json_schema_extra={"doc_default": "60 % of the window"},
    )
    flush_ratio: float = Field(
        0.75, gt=0, lt=1, description="memory flush when a session reaches this share of the compaction threshold"
    )
    prompt_epoch_max_delta: int = Field(
        10,
        ge=0,
        description='memories that joined "What You Know" since a session\'s prompt epoch, shown in the dynamic '
        "tail; one more rebuilds the list (and changes the cached prefix once)",
    )

    # --- background memory pipeline -------------------------------------------------------------
    auto_memory: bool = Field(True, description="extract, flush and compact automatically after turns")
    extraction_debounce_seconds: float = Field(
        5.0, ge=0, description="extract this long after the last turn of a session…"
    )
    extraction_max_wait_seconds: float = Field(
        60.0, ge=0, description="…but no later than this after the first turn waiting for extraction"
    )
    extraction_debounce_stretch: float = Field(
        1.5,
        ge=0,
        description="a chatty session (its previous turn came less than the max wait before) is extracted once it "
        "has been quiet for this many times that gap, at least the debounce and at most the max wait: a user "
        "still talking is not extracted turn by turn (fewer model calls, memories up to the max wait later); "
        "`0` = always the plain debounce",
    )
    eta_task_limit: int = Field(
        1000, ge=1, description="delayed (countdown) tasks a worker holds in memory at most (`worker_eta_task_limit`)"
    )
    worker_heartbeat_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        description="how often each worker process writes its heartbeat to Redis (hostname, queues, last seen); "
        "the console's operations page lists a worker as live while its heartbeat is younger than three intervals",
    )

    # --- agent loop --------------------------------------------------------------------------
    max_iterations: int = Field(8, ge=1, description="LLM calls per turn at most (the tool loop)")
    session_lock_ttl_seconds: int = Field(
        10,
        ge=5,
        description="per-session lock lease: the worker running a session's turns renews it every third of this; "
        "a worker that stops (killed, frozen, cut off from Redis) loses the session after at most this "
        "long, and one that finds its lease lost writes nothing, unless it takes the lease back before another "
        "worker took the session (a stopped Redis lapses every lease at once)",
    )
    turn_soft_time_limit: int = Field(300, description="soft time limit of a task, seconds")
    turn_time_limit: int = Field(330, description="hard time limit of a task, seconds")
    stalled_turn_seconds: int = Field(
        60, ge=5, description="open turns untouched this long (and unlocked) are re-enqueued"
    )
    sweep_interval_seconds: float = Field(30.0, gt=0, description="how often beat looks for stalled turns")
    tenant_max_active_sessions: int | None = Field(
        None,
        ge=0,
        description="sessions of one tenant whose turns are on the `turns` queue or running at a time; more wait "
        "in Postgres for a free slot, so one tenant's backlog cannot queue ahead of another tenant's turns "
        "(docs/concepts/turns.md, Fairness). Unset: as many as one turns worker runs at once "
        "(ENGRAM_TURN_WORKER_CONCURRENCY), so a tenant alone keeps every process busy; 0 = no bound",
        json_schema_extra={"doc_default": "as ENGRAM_TURN_WORKER_CONCURRENCY"},
    )
    drain_max_turns: int = Field(
        1,
        ge=1,
        description="turns one drain task runs before its session goes to the back of the queue (with "
        "ENGRAM_TENANT_MAX_ACTIVE_SESSIONS: how long another tenant's turn can wait for a worker)",
    )
    broker_visibility_timeout: int = Field(
        3600,
        ge=60,
        description="seconds before an unacknowledged task is redelivered; must exceed the time limit plus any "
        "task's longest retry backoff or countdown (checked at worker start)",
    )

    # --- processes started by `engram up` ------------------------------------------------------
    turn_worker_concurrency: int = Field(2, ge=1, description="processes of `worker-turns`")
    background_worker_concurrency: int = Field(
        2,
        ge=1,
        description="processes of `worker-background` (each loads the embedding model, ~0.5 GB peak RSS with "
        "MiniLM on onnxruntime, ~0.8 GB on torch; one process fell behind the extraction backlog of "
        "`ops/bench/pipeline` at its default load on 2 cores)",
    )
    up_worker_metrics_port: int = Field(
        9808,
        ge=0,
        le=65535,
        description="`engram up`: port of the first worker process's metrics exporter; the other pools take the "
        "next ports (listed at start); `0` = any free ports",
    )

    # --- worker pools: Celery --autoscale bounds (processes per pool instance; `engram worker POOL`) ---------
    pool_turns_min_processes: int = Field(
        2,
        ge=1,
        description="pool `turns` (queues turns, channels): processes at least (Celery `--autoscale` lower bound, "
        "`engram worker turns`, `engram up --cluster`)",
    )
    pool_turns_max_processes: int = Field(
        4, ge=1, description="pool `turns`: processes at most; the autoscaler adds processes while turns wait"
    )
    pool_memory_min_processes: int = Field(
        1, ge=1, description="pool `memory` (extraction, flush, compaction): processes at least"
    )
    pool_memory_max_processes: int = Field(2, ge=1, description="pool `memory`: processes at most")
    pool_embeddings_min_processes: int = Field(1, ge=1, description="pool `embeddings`: processes at least")
    pool_embeddings_max_processes: int = Field(
        2,
        ge=1,
        description="pool `embeddings`: processes at most (local embeddings are CPU-bound: at most the cores you "
        "give it)",
    )
    pool_maintenance_min_processes: int = Field(1, ge=1, description="pool `maintenance`: processes at least")
    pool_maintenance_max_processes: int = Field(1, ge=1, description="pool `maintenance`: processes at most")

    # --- Flower (started by `engram up`) --------------------------------------------------------
    flower_host: str = Field(
        "127.0.0.1",
        description="address Flower binds to (it can run and revoke tasks, so it does not follow `ENGRAM_HOST`)",
    )
    flower_user: str = Field("engram", pattern=r"^[^:,]+$", description="Flower basic-auth user (no `:` or `,`)")
    flower_password: SecretStr | None = Field(
        None,
        description="Flower basic-auth password (no `,`); unset = generated once and kept in `<data "
        "dir>/flower-password` (mode 600)",
    )
    # Celery task events (task-sent/received/started/succeeded): a Redis PUBLISH each, ~8 per turn, read by
    # nobody unless Flower runs, and Flower switches the workers' events on itself every few seconds.
    celery_task_events: bool = Field(
        False,
        description="Celery task events from every worker and publisher from the start (a Redis `PUBLISH` per "
        "task state, about 8 per turn). Off, Flower still shows tasks: it switches the workers' "
        "events on every 5 s while it runs; only the `sent` state (published by the sender) needs "
        "this on",
    )

    # --- maintenance jobs (beat) -----------------------------------------------------------------
    # Schedules are 5-field cron expressions (minute hour day-of-month month day-of-week; day of week
    # 0 = Sunday) in `jobs_timezone`. Defaults from the references: enrichment 02:00, consolidation
    # 03:00, decay 04:00, reflection Sunday 03:00, embedding-cache eviction daily.
    jobs_timezone: str = Field(
        "UTC", description="time zone of the maintenance job schedules and of a run's period (its day)"
    )
    job_enrichment_schedule: str = Field(
        "0 2 * * *",
        description="cron schedule (minute hour day-of-month month day-of-week, 0 = Sunday) of entity enrichment",
    )
    job_enrichment_enabled: bool = Field(True, description="beat runs entity enrichment")
    job_consolidation_schedule: str = Field("0 3 * * *", description="cron schedule of the nightly consolidation sweep")
    job_consolidation_enabled: bool = Field(
        True,
        description="beat runs the consolidation sweep (and a new session queues the user's earlier ones, unless "
        "`ENGRAM_AUTO_MEMORY=false`)",
    )
    job_decay_schedule: str = Field("0 4 * * *", description="cron schedule of decay")
    job_decay_enabled: bool = Field(True, description="beat runs decay")
    job_reflection_schedule: str = Field(
        "0 3 * * 0", description="cron schedule of the weekly reflection (Sunday 03:00)"
    )
    job_reflection_enabled: bool = Field(True, description="beat runs the weekly reflection")
    job_cache_eviction_schedule: str = Field("30 4 * * *", description="cron schedule of embedding-cache eviction")
    job_cache_eviction_enabled: bool = Field(True, description="beat runs embedding-cache eviction")
    job_page_size: int = Field(
        200,
        ge=1,
        le=10_000,
        description="memories (or sessions) a job handles per page; each page commits with the run's progress",
    )
    job_slice_seconds: float = Field(
        240.0,
        gt=0,
        description="a job task works this long, then sends itself on to resume from its cursor (below "
        "`ENGRAM_TURN_SOFT_TIME_LIMIT`)",
    )
    beat_lock_timeout_seconds: int = Field(
        30,
        ge=10,
        description="TTL of the beat leader lock in Redis: a standby beat takes over within about this when the "
        "leader dies",
    )
    decay_threshold: float = Field(
        0.05, gt=0, lt=1, description="decay soft-deletes a memory whose confidence falls below this"
    )
    maintenance_daily_token_budget: int = Field(
        200_000,
        ge=0,
        description="per tenant and UTC day: LLM tokens consolidation, enrichment and reflection may spend (`0` = "
        "no cap); over it the job stops for that tenant and says so in its run",
    )
    embedding_cache_max_idle_days: int = Field(
        30, ge=1, description="embedding-cache entries unused this long are evicted"
    )
    consolidation_dedup_jaccard: float = Field(
        0.75,
        gt=0,
        le=1,
        description="consolidation skips a new fact whose words overlap an active fact of the user (another key) "
        "with at least this Jaccard (measured choice: see [Maintenance "
        "jobs](../concepts/maintenance.md#dedup-measured))",
    )

    # --- chat channels (Slack, Telegram) --------------------------------------------------------
    # The environment shortcut: these create/update the connection `default` of the default tenant at start.
    slack_signing_secret: SecretStr | None = Field(
        None,
        description="with `ENGRAM_SLACK_BOT_TOKEN`: the Slack connection `default` of the default tenant, created "
        "or updated at start",
    )
    slack_bot_token: SecretStr | None = Field(
        None, description="the Slack app's bot token (`xoxb-…`) for that connection"
    )
    telegram_bot_token: SecretStr | None = Field(
        None,
        description="BotFather's token: the Telegram connection `default` of the default tenant, created or "
        "updated at start",
    )
    telegram_webhook_secret: SecretStr | None = Field(
        None,
        description="the webhook's `X-Telegram-Bot-Api-Secret-Token` for that connection (1-256 of `A-Za-z0-9_-`)",
        json_schema_extra={"doc_default": "generated"},
    )
    slack_api_url: str = Field(
        "https://slack.com/api/",
        description="Slack Web API base URL (tests and air-gapped installs point it elsewhere)",
    )
    telegram_api_url: str = Field(
        "https://api.telegram.org", description="Bot API host; methods are called at `/bot<token>/<method>`"
    )
    channel_http_timeout_seconds: float = Field(10.0, gt=0, description="timeout of one Slack or Telegram API request")
    channel_send_attempts: int = Field(
        5, ge=1, description="tries per message part on `429`, `5xx` and network errors before the delivery is `failed`"
    )
    channel_retry_max_wait_seconds: float = Field(
        30.0,
        ge=0,
        description="longest wait between tries (backoff, or the platform's `Retry-After`); a longer "
        "`Retry-After` puts the delivery back for the sweep",
    )
    channel_stalled_delivery_seconds: float = Field(
        60.0, gt=0, description="deliveries pending this long (their task lost) are re-sent by the beat sweep"
    )

    # --- OpenAI-compatible chat completions and MCP ---------------------------------------------
    chat_completions_wait_seconds: float = Field(
        300.0,
        gt=0,
        description="how long a `/v1/chat/completions` request waits for its turn (answered, or the stream ended) "
        "before `504`; the same request again joins the turn",
    )
    chat_completions_max_messages: int = Field(
        1000, ge=1, description="messages one `/v1/chat/completions` request may carry (more is `413`)"
    )

    # --- logging -----------------------------------------------------------------------------
    log_level: str = Field("INFO", description="log level")
    log_json: bool = Field(False, description="JSON log lines instead of the console format")

    # --- tracing (OpenTelemetry; shared/infra/tracing.py) -------------------------------------------
    otel_enabled: bool = Field(
        False,
        description="export OpenTelemetry traces (gateway request → turn task → model call and SQL → follow-up "
        "tasks) over OTLP/HTTP",
    )
    otel_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP collector base URL (spans go to `<url>/v1/traces`); unset = the exporter's default "
        "(`OTEL_EXPORTER_OTLP_*`, else `http://localhost:4318`)",
    )
    otel_headers: SecretStr | None = Field(
        None, description="extra OTLP request headers, `name=value,name=value` (a vendor's API key)"
    )
    otel_service_name: str = Field(
        "engram", description="`service.name` prefix; each process adds its role (`engram-gateway`, `engram-worker`)"
    )
    otel_sample_ratio: float = Field(
        1.0,
        ge=0,
        le=1,
        description="share of new traces recorded (0–1); a task continues its sender's decision",
        json_schema_extra={"doc_default": "`1.0`"},
    )

    # --- metrics ---------------------------------------------------------------------------------
    worker_metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="port of a worker pool's Prometheus exporter (its main process serves all its pool "
        "processes); unset = no exporter",
    )
    worker_metrics_host: str = Field(
        "127.0.0.1",
        description="address the worker exporter binds to; it always requires a key with the `metrics` scope",
    )
    metrics_sql_interval_seconds: float = Field(
        60.0,
        ge=0,
        description="cross-tenant SQL aggregates in metrics (turns by status, active memories, embedding backlog) "
        "are recomputed at most this often per process",
    )
    metrics_api_key: SecretStr | None = Field(
        None,
        description="a fixed key with the `metrics` scope only, registered for the default tenant by `engram "
        "migrate` (what Prometheus uses in docker-compose and Kubernetes); a key registered earlier "
        "keeps its scopes",
    )

    @field_validator(
        "job_enrichment_schedule",
        "job_consolidation_schedule",
        "job_decay_schedule",
        "job_reflection_schedule",
        "job_cache_eviction_schedule",
    )
    @classmethod
    def _cron(cls, value: str) -> str:
        parse_cron(value)  # ValueError with the reason
        return " ".join(value.split())

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            parse_sentinels(value)  # ValueError naming the bad entry
            return value
        return None

    @field_validator("redis_url")
    @classmethod
    def _sentinel_url(cls, value: str | None) -> str | None:
        if is_sentinel_url(value):
            parse_sentinels(str(value), "ENGRAM_REDIS_URL")
        return value

    @field_validator("jobs_timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("llm_prices")
    @classmethod
    def _price_kinds(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        kinds = {"input", "output", "cache_read", "cache_write"}
        for model, price in value.items():
            unknown = set(price) - kinds
            if unknown:
                raise ValueError(
                    f"ENGRAM_LLM_PRICES[{model!r}]: unknown token kinds {sorted(unknown)}; use {sorted(kinds)}"
                )
        return value

    @field_validator("secret_key")
    @classmethod
    def _secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            from shared.infra.secretbox import SecretKeyError, parse_keys

            try:
                parse_keys(value.get_secret_value(), "ENGRAM_SECRET_KEY")
            except SecretKeyError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("flower_password")
    @classmethod
    def _flower_password(cls, value: SecretStr | None) -> SecretStr | None:
        # Flower splits FLOWER_BASIC_AUTH at commas (a list of user:password pairs).
        if value is not None and ("," in value.get_secret_value() or not value.get_secret_value()):
            raise ValueError("ENGRAM_FLOWER_PASSWORD must be non-empty and must not contain a comma")
        return value

    @model_validator(mode="after")
    def _pool_bounds(self) -> Settings:
        for pool in ("turns", "memory", "embeddings", "maintenance"):
            low, high = self.pool_processes(pool)
            if high < low:
                raise ValueError(
                    f"ENGRAM_POOL_{pool.upper()}_MAX_PROCESSES ({high}) is below "
                    f"ENGRAM_POOL_{pool.upper()}_MIN_PROCESSES ({low})"
                )
        return self

    def pool_processes(self, pool: str) -> tuple[int, int]:
        """(min, max) processes of a worker pool (shared/queueing/queues.py POOLS), Celery's --autoscale bounds."""
        return int(getattr(self, f"pool_{pool}_min_processes")), int(getattr(self, f"pool_{pool}_max_processes"))

    @property
    def turn_slots_per_tenant(self) -> int:
        """ENGRAM_TENANT_MAX_ACTIVE_SESSIONS, or the turns worker's processes when it is unset (0 = no bound)."""
        if self.tenant_max_active_sessions is not None:
            return self.tenant_max_active_sessions
        return self.turn_worker_concurrency

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"

    @property
    def dev_key_file(self) -> Path:
        return self.data_dir / "dev-api-key"

    @property
    def flower_password_file(self) -> Path:
        return self.data_dir / "flower-password"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
