-- Knowledge maintenance on beat (decay, consolidation, enrichment, reflection, cache eviction).
-- Numbered 0009 so it sorts after other branches' 0007/0008 whatever order they land in.

-- One row per run of a job for a period ('2026-03-05' for daily jobs, '2026-W10' for weekly ones)
-- and a scope ('all', or 'user:<id>' for a run limited to one user). The unique key makes a duplicate
-- beat fire, a redelivered task or a manual run in the same period a no-op. A run commits its
-- progress (`cursor`, `counts`, `changed`) with each page of work, so a killed run resumes where it
-- stopped; `attempt` fences a resumed run against the one it replaced.
CREATE TABLE IF NOT EXISTS job_runs (
    id              bigserial PRIMARY KEY,
    job             text NOT NULL,
    period          text NOT NULL,
    scope           text NOT NULL DEFAULT 'all',
    status          text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed')),
    as_of           timestamptz NOT NULL,           -- the clock the run works with (tests, backfills)
    attempt         integer NOT NULL DEFAULT 1,
    cursor          jsonb NOT NULL DEFAULT '{}',
    counts          jsonb NOT NULL DEFAULT '{}',
    changed         integer NOT NULL DEFAULT 0,     -- memories created, superseded or removed
    details         jsonb NOT NULL DEFAULT '{}',    -- e.g. tenants stopped by the token budget, and why
    error           text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    UNIQUE (job, period, scope)
);
CREATE INDEX IF NOT EXISTS job_runs_job_started_idx ON job_runs (job, started_at DESC);

-- Decay: the clock the stored confidence was last decayed to. Decay continues from
-- max(created, last access, decayed_at), so nightly runs compound exactly like one long one, and a
-- second run at the same clock changes nothing.
ALTER TABLE memories ADD COLUMN IF NOT EXISTS decayed_at timestamptz;
-- Entity enrichment: when the accurate extractor last read this memory.
ALTER TABLE memories ADD COLUMN IF NOT EXISTS enriched_at timestamptz;

-- Sessions waiting for consolidation (sessions.consolidated_at IS NULL), per user.
CREATE INDEX IF NOT EXISTS sessions_unconsolidated_idx ON sessions (user_id, id) WHERE consolidated_at IS NULL;

-- The maintenance jobs' model calls are in the ledger under their own purposes (budgets, /metrics).
ALTER TABLE llm_calls DROP CONSTRAINT IF EXISTS llm_calls_purpose_check;
ALTER TABLE llm_calls ADD CONSTRAINT llm_calls_purpose_check CHECK (purpose IN (
    'chat', 'extraction', 'flush', 'summary', 'synthesis', 'reflection', 'consolidation', 'enrichment'));

-- Consolidation reads a session 30 messages at a time; the last message consolidated is committed with
-- each page's facts, so a killed consolidation resumes after it (nothing read twice, nothing skipped).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS consolidated_message_id bigint NOT NULL DEFAULT 0;
