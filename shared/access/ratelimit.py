"""Request rate limits: token buckets in Redis, one per API key and one per tenant.

A bucket holds up to `burst` tokens and refills at `rate` per second; a request takes one token or
is refused with the wait until one is back. All of a request's buckets are checked by one Lua script,
so the check is atomic across every gateway process and costs one round trip. (The `limits` package
offers fixed and sliding windows but no token bucket; a bucket allows bursts up to a bound without a
window edge that lets 2× the rate through, which is what API clients expect.)

Redis is coordination, not truth: when it is down the limiter lets requests through (turns are
still accepted while Redis is down — they are in Postgres) rather than failing every request.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import redis

from shared.infra.logging import get_logger

log = get_logger(__name__)

# KEYS the buckets, in order; ARGV: now (seconds), then rate per second and burst of each bucket.
# Takes one token from each bucket in turn and stops at the first empty one (the buckets before it keep
# their token spent, as separate checks would). Returns {0, 0} when every bucket allowed the request, else
# {the refusing bucket's 1-based index, wait_ms until it has a token}. One script for all buckets: one
# round trip per request, however many limits apply.
_TOKEN_BUCKETS = """
local now = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1]) or burst
  local at = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
  local wait_ms = 0
  if tokens >= 1 then
    tokens = tokens - 1
  else
    wait_ms = math.ceil((1 - tokens) / rate * 1000)
  end
  redis.call('HSET', key, 'tokens', tokens, 'at', now)
  redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000) + 1000)
  if wait_ms > 0 then
    return {i, wait_ms}
  end
end
return {0, 0}
"""


@dataclass(frozen=True)
class Limit:
    name: str  # what is limited, for the message: "API key", "tenant"
    bucket: str  # the Redis key
    per_second: float
    burst: int


@dataclass(frozen=True)
class Refusal:
    limit: Limit
    retry_after_s: int

    def message(self) -> str:
        return (
            f"rate limit of this {self.limit.name} exceeded ({self.limit.per_second:g} requests/s, bursts of "
            f"{self.limit.burst}); retry after {self.retry_after_s} s"
        )


def take(client: redis.Redis, limits: list[Limit]) -> Refusal | None:
    """Take one token from each bucket in turn (one script, one round trip); the first empty one refuses
    the request."""
    active = [limit for limit in limits if limit.per_second > 0]
    if not active:
        return None
    args: list[float] = [time.time()]
    for limit in active:
        args += [limit.per_second, limit.burst]
    try:
        refused, wait_ms = client.register_script(_TOKEN_BUCKETS)(keys=[limit.bucket for limit in active], args=args)
    except (redis.RedisError, OSError) as exc:
        log.warning("rate limiter unavailable; request let through", error=str(exc))
        return None
    if not int(refused):
        return None
    return Refusal(active[int(refused) - 1], max(1, math.ceil(int(wait_ms) / 1000)))


def request_limits(
    tenant_id: int, key_id: int, *, key_rate: float, key_burst: int, tenant_rate: float, tenant_burst: int
) -> list[Limit]:
    return [
        Limit("API key", f"engram:ratelimit:key:{key_id}", key_rate, key_burst),
        Limit("tenant", f"engram:ratelimit:tenant:{tenant_id}", tenant_rate, tenant_burst),
    ]
