-- A tenant's transcript units (the chunks of its messages) by when they were stored: the console's lag chart
-- reads the last days' units of one tenant, and without it reads every chunk of every tenant. Partial, as the
-- chart reads message units only (a memory's chunks have no message).
CREATE INDEX IF NOT EXISTS memory_chunks_tenant_created_idx ON memory_chunks (tenant_id, created_at)
    WHERE message_id IS NOT NULL;
