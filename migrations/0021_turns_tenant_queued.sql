-- A tenant's sessions with queued turns, oldest first: read each time a drain ends and frees one of the
-- tenant's slots (shared/fairness.py).
CREATE INDEX IF NOT EXISTS turns_tenant_queued_idx ON turns (tenant_id, id) WHERE status = 'queued';
