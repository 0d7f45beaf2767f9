"""The plumbing every part of engram uses: settings, Postgres and Redis access (with replicas, Sentinel and
migrations), locks, live events, logging, tracing, metrics, worker heartbeats and the startup heap freeze."""
