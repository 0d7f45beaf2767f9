-- The console's operations page lists a tenant's job runs and the all-users runs newest first
-- (shared/console/operations.py RUNS_SQL): this index yields them in that order, so a page reads its own rows
-- and a few of other tenants' instead of sorting every run ever recorded.
CREATE INDEX IF NOT EXISTS job_runs_started_idx ON job_runs (started_at DESC, id DESC);
