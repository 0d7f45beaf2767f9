"""The plumbing every part of engram uses: settings, Postgres and Redis access (with replicas, Sentinel and
migrations), locks, live events, logging, tracing, metrics, worker heartbeats, the startup heap freeze, secrets at
rest (secretbox), the sharding plan (sharding) and 5-field cron expressions (cron)."""
