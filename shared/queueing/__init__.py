"""How work reaches the workers: the protocol the gateway sends work through (dispatch), queue names and
worker pools (queues), every task's name (task_names), fair turns between tenants (fairness), finding turns
whose delivery was lost (recovery) and the no-op round trip through a worker (diagnostics)."""
