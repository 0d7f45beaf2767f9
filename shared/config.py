"""The one settings object. Every field is read from an `ENGRAM_`-prefixed environment variable
(or a `.env` file in the working directory) and is listed in the README with its default."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.cron import parse_cron

ProviderName = Literal["auto", "offline", "anthropic", "openai"]


def _default_data_dir() -> Path:
    return Path.home() / ".engram"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", env_file=".env", extra="ignore")

    # --- where state lives -------------------------------------------------------------------
    data_dir: Path = Field(
        default_factory=_default_data_dir, description="Embedded servers' data, PID files, dev API key"
    )
    database_url: str | None = Field(None, description="Postgres URL; unset = embedded Postgres in data_dir")
    redis_url: str | None = Field(None, description="Redis URL; unset = embedded valkey in data_dir")
    db_pool_size: int = Field(10, ge=1, description="Max connections per process pool")

    # --- gateway -----------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = 8000
    flower_port: int = 5555
    max_turn_chars: int = Field(16_000, ge=1, description="Longest accepted user message")
    max_wait_seconds: float = Field(60.0, ge=0, description="Cap on ?wait= long polls")
    max_request_bytes: int = Field(
        1_048_576, ge=1024, description="Largest accepted request body; larger is 413 before it is read"
    )
    sse_max_seconds: float = Field(
        300.0, gt=0, description="Longest an event stream stays open; clients resume with Last-Event-ID"
    )
    # Token buckets in Redis: a sustained rate and a burst, per API key and per tenant (0 = no limit).
    rate_limit_key_per_second: float = Field(50.0, ge=0, description="Requests per second one API key may sustain")
    rate_limit_key_burst: int = Field(100, ge=1, description="Requests one API key may send at once")
    rate_limit_tenant_per_second: float = Field(200.0, ge=0, description="Requests per second per tenant")
    rate_limit_tenant_burst: int = Field(400, ge=1, description="Requests one tenant may send at once")
    # Message ingest (outside conversations): bounds of one POST …/messages (over them is 413).
    ingest_max_messages: int = Field(500, ge=1, description="Messages one ingest request may carry")
    ingest_max_message_chars: int = Field(32_000, ge=1, description="Longest ingested message, in characters")
    # A fixed key for the default tenant (e.g. in docker-compose); unset = one is generated once.
    dev_api_key: SecretStr | None = None

    # --- language model ----------------------------------------------------------------------
    llm_provider: ProviderName = Field("auto", description="auto picks anthropic/openai by key, else offline")
    llm_model: str | None = Field(None, description="Chat model; default per provider")
    llm_cheap_model: str | None = Field(None, description="Model for background work; default per provider")
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = Field(None, description="Any OpenAI-compatible endpoint (Ollama, vLLM), with /v1")
    llm_timeout_seconds: float = 120.0
    llm_max_attempts: int = Field(4, ge=1, description="Tries per LLM call on 429/5xx/timeouts")
    llm_max_retry_wait_seconds: float = 30.0
    max_output_tokens: int = 1024
    llm_prices: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="US$ per million tokens by model and kind, for the cost metric (JSON); unset = no cost",
    )

    # --- embeddings ----------------------------------------------------------------------------
    embedding_provider: Literal["local", "openai"] = Field(
        "local", description="local = bundled MiniLM (offline); openai = OpenAI or any compatible endpoint"
    )
    embedding_model: str | None = Field(None, description="Default: all-MiniLM-L6-v2 (local), text-embedding-3-small")
    embedding_dimensions: int | None = Field(None, ge=1, description="OpenAI text-embedding-3 `dimensions`")
    embedding_base_url: str | None = Field(None, description="OpenAI-compatible embeddings endpoint, with /v1")
    embedding_api_key: SecretStr | None = Field(None, description="Default: ENGRAM_OPENAI_API_KEY")
    embedding_batch_size: int = Field(
        64,
        ge=1,
        description="Texts per embedding call (memories; the transcript units' drain takes a quarter of it per task)",
    )
    embedding_backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        "auto",
        description="Local model runtime. auto = onnx-int8 for a new database, else the local space it "
        "records (fp32 or int8: no reindex on upgrade); onnx = fp32 on onnxruntime; torch = the same fp32 "
        "model and vectors on sentence-transformers; onnx-int8 = int8 weights (about 2x faster, its own "
        "embedding space: switching an fp32 database to it needs engram reindex)",
    )
    embedding_onnx_path: Path | None = Field(
        None, description="ONNX export of the local model; unset = the user's cache dir, exported on first use"
    )
    embedding_space_check_seconds: float = Field(
        60.0, ge=0, description="How long a process trusts its last check of the recorded embedding model"
    )

    # --- search ------------------------------------------------------------------------------
    search_fusion: Literal["weighted", "rrf"] = Field("weighted", description="How the search legs are fused")
    search_rrf_k: int = Field(60, ge=1)
    search_vector_weight: float = Field(0.7, ge=0, le=1)
    turn_recall_tokens: int = Field(
        500,
        ge=0,
        description="Budget of a turn's relevant memory: facts and excerpts of the user's other conversations "
        "for the latest message, in the dynamic context (0 = none)",
    )
    search_relative_floor: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Weighted mode: drop results scoring under this share of the query's best result",
    )
    search_overfetch: int = Field(8, ge=1, description="Each leg fetches limit × this before fusion")

    # --- context ---------------------------------------------------------------------------------
    context_dir: Path | None = Field(None, description="SOUL.md / AGENTS.md / MEMORY.md fallback when no agent profile")
    context_window_tokens: int | None = Field(None, ge=1000, description="Override the model's context window")
    compaction_threshold_tokens: int | None = Field(
        None, ge=200, description="Compact a session at this many tokens; default 60% of the context window"
    )
    flush_ratio: float = Field(0.75, gt=0, lt=1, description="Memory flush at this share of the compaction threshold")
    prompt_epoch_max_delta: int = Field(
        10, ge=0, description="New memories shown in the dynamic tail before a session's What You Know is rebuilt"
    )

    # --- background memory pipeline -------------------------------------------------------------
    auto_memory: bool = Field(True, description="Extract, flush and compact automatically after turns")
    extraction_debounce_seconds: float = Field(5.0, ge=0, description="Extract this long after the last turn")
    extraction_max_wait_seconds: float = Field(
        60.0, ge=0, description="…but no later than this after the first pending turn (chatty sessions)"
    )
    eta_task_limit: int = Field(1000, ge=1, description="Delayed (ETA) tasks a worker holds in memory at most")

    # --- agent loop --------------------------------------------------------------------------
    max_iterations: int = Field(8, ge=1, description="LLM calls per turn at most (tool loop)")
    session_lock_ttl_seconds: int = Field(30, ge=5, description="Per-session lock TTL; heartbeat at a third")
    turn_soft_time_limit: int = 300
    turn_time_limit: int = 330
    stalled_turn_seconds: int = Field(60, ge=5, description="Queued turns older than this are re-enqueued")
    sweep_interval_seconds: float = Field(30.0, gt=0, description="How often beat looks for stalled turns")
    broker_visibility_timeout: int = Field(
        3600, ge=60, description="Seconds before an unacked task is redelivered; > any countdown or time limit"
    )

    # --- processes started by `engram up` ------------------------------------------------------
    turn_worker_concurrency: int = Field(2, ge=1, description="Processes consuming turns + channels")
    background_worker_concurrency: int = Field(2, ge=1, description="Processes for the memory queues")
    up_worker_metrics_port: int = Field(
        9808,
        ge=0,
        le=65535,
        description="`engram up`: first port of the worker pools' exporters, one port per pool; 0 = any free ports",
    )

    # --- worker pools: Celery --autoscale bounds (processes per pool instance; `engram worker POOL`) ---------
    pool_turns_min_processes: int = Field(2, ge=1, description="Pool turns (turns, channels): processes at least")
    pool_turns_max_processes: int = Field(4, ge=1, description="Pool turns: processes at most (grows with backlog)")
    pool_memory_min_processes: int = Field(1, ge=1, description="Pool memory (extraction, flush, compaction): at least")
    pool_memory_max_processes: int = Field(2, ge=1, description="Pool memory: processes at most")
    pool_embeddings_min_processes: int = Field(1, ge=1, description="Pool embeddings: processes at least")
    pool_embeddings_max_processes: int = Field(2, ge=1, description="Pool embeddings: processes at most")
    pool_maintenance_min_processes: int = Field(1, ge=1, description="Pool maintenance: processes at least")
    pool_maintenance_max_processes: int = Field(1, ge=1, description="Pool maintenance: processes at most")

    # --- Flower (started by `engram up`) --------------------------------------------------------
    flower_host: str = Field("127.0.0.1", description="Address Flower binds to (not ENGRAM_HOST: it can run tasks)")
    flower_user: str = Field("engram", pattern=r"^[^:,]+$", description="Flower basic-auth user")
    flower_password: SecretStr | None = Field(
        None, description="Flower basic-auth password; unset = generated once and kept in the data dir"
    )
    # Celery task events (task-sent/received/started/succeeded): a Redis PUBLISH each, ~8 per turn, read by
    # nobody unless Flower runs, and Flower switches the workers' events on itself every few seconds.
    celery_task_events: bool = Field(
        False, description="Workers send task events from start (Flower turns them on while it runs)"
    )

    # --- maintenance jobs (beat) -----------------------------------------------------------------
    # Schedules are 5-field cron expressions (minute hour day-of-month month day-of-week; day of week
    # 0 = Sunday) in `jobs_timezone`. Defaults from the references: enrichment 02:00, consolidation
    # 03:00, decay 04:00, reflection Sunday 03:00, embedding-cache eviction daily.
    jobs_timezone: str = Field("UTC", description="Time zone of the job schedules and of a run's period (its day)")
    job_enrichment_schedule: str = Field("0 2 * * *", description="Cron schedule of entity enrichment")
    job_enrichment_enabled: bool = True
    job_consolidation_schedule: str = Field("0 3 * * *", description="Cron schedule of the consolidation sweep")
    job_consolidation_enabled: bool = True
    job_decay_schedule: str = Field("0 4 * * *", description="Cron schedule of decay")
    job_decay_enabled: bool = True
    job_reflection_schedule: str = Field("0 3 * * 0", description="Cron schedule of the weekly reflection")
    job_reflection_enabled: bool = True
    job_cache_eviction_schedule: str = Field("30 4 * * *", description="Cron schedule of embedding-cache eviction")
    job_cache_eviction_enabled: bool = True
    job_page_size: int = Field(200, ge=1, le=10_000, description="Memories (or sessions) per page; a page commits")
    job_slice_seconds: float = Field(
        240.0, gt=0, description="A job task works this long, then sends itself on (resuming from its cursor)"
    )
    beat_lock_timeout_seconds: int = Field(
        30, ge=10, description="Beat leader lock TTL in Redis; a standby beat takes over within about this"
    )
    decay_threshold: float = Field(0.05, gt=0, lt=1, description="Decayed confidence below this soft-deletes")
    maintenance_daily_token_budget: int = Field(
        200_000, ge=0, description="Per tenant: LLM tokens a day for consolidation, enrichment, reflection (0 = none)"
    )
    embedding_cache_max_idle_days: int = Field(30, ge=1, description="Cache entries unused this long are evicted")
    consolidation_dedup_jaccard: float = Field(
        0.75, gt=0, le=1, description="Word-overlap Jaccard at which a consolidated fact duplicates a stored one"
    )

    # --- chat channels (Slack, Telegram) --------------------------------------------------------
    # The environment shortcut: these create/update the connection `default` of the default tenant at start.
    slack_signing_secret: SecretStr | None = None
    slack_bot_token: SecretStr | None = None
    telegram_bot_token: SecretStr | None = None
    telegram_webhook_secret: SecretStr | None = None
    slack_api_url: str = Field("https://slack.com/api/", description="Slack Web API base URL (tests: a fake)")
    telegram_api_url: str = Field("https://api.telegram.org", description="Bot API host; methods at /bot<token>/<m>")
    channel_http_timeout_seconds: float = Field(10.0, gt=0, description="Timeout of one platform API request")
    channel_send_attempts: int = Field(5, ge=1, description="Tries per message part on 429, 5xx and network errors")
    channel_retry_max_wait_seconds: float = Field(
        30.0, ge=0, description="Longest wait between tries; a longer Retry-After reschedules the delivery"
    )
    channel_stalled_delivery_seconds: float = Field(
        60.0, gt=0, description="Deliveries pending this long (their task lost) are re-enqueued by the sweep"
    )

    # --- OpenAI-compatible chat completions and MCP ---------------------------------------------
    chat_completions_wait_seconds: float = Field(
        300.0, gt=0, description="How long /v1/chat/completions waits for its turn before answering 504"
    )
    chat_completions_max_messages: int = Field(
        1000, ge=1, description="Messages one /v1/chat/completions request may carry"
    )

    # --- logging -----------------------------------------------------------------------------
    log_level: str = "INFO"
    log_json: bool = Field(False, description="JSON log lines instead of console format")

    # --- tracing (OpenTelemetry; shared/tracing.py) -------------------------------------------------
    otel_enabled: bool = Field(False, description="Export OpenTelemetry traces (OTLP over HTTP)")
    otel_endpoint: str | None = Field(
        None, description="OTLP/HTTP collector base URL (spans go to <url>/v1/traces); unset = http://localhost:4318"
    )
    otel_headers: SecretStr | None = Field(None, description="Extra OTLP request headers, `name=value,name=value`")
    otel_service_name: str = Field("engram", description="service.name prefix; each process adds its role")
    otel_sample_ratio: float = Field(1.0, ge=0, le=1, description="Share of new traces recorded (head sampling)")

    # --- metrics ---------------------------------------------------------------------------------
    worker_metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Port of a worker pool's Prometheus exporter; unset = none"
    )
    worker_metrics_host: str = Field("127.0.0.1", description="Address the worker exporter binds to (key required)")
    metrics_sql_interval_seconds: float = Field(
        60.0, ge=0, description="Cross-tenant SQL aggregates in metrics are recomputed at most this often"
    )
    metrics_api_key: SecretStr | None = Field(
        None, description="A fixed key with only the metrics scope, registered by `engram migrate` (Prometheus)"
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
        """(min, max) processes of a worker pool (shared/queues.py POOLS), Celery's --autoscale bounds."""
        return int(getattr(self, f"pool_{pool}_min_processes")), int(getattr(self, f"pool_{pool}_max_processes"))

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
