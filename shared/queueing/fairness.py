"""Fair turns between tenants: at most N sessions of one tenant have a drain on the `turns` queue or
running at a time.

The `turns` queue is one FIFO list shared by every tenant. Without a bound, a tenant that sends 2,000 turns
puts 2,000 drains ahead of everyone else's next turn. Here a tenant's drains take slots: a drain is sent only
when its session gets one of the tenant's N slots (`admit`), and a drain runs at most
ENGRAM_DRAIN_MAX_TURNS turns before it gives its slot back. Turns that find no slot stay queued in Postgres
(where every turn is stored as queued anyway); when a drain ends, `finish` frees its slot and hands the
tenant's free slots to its sessions that have waited longest, whose drains go to the back of the queue. So
the queue never holds more than N drains of one tenant ahead of another tenant's, and a worker is never held
by one tenant's backlog for more than one drain's few turns.

The slots are a sorted set per tenant in Redis (session id, scored by a lease deadline), a scheduling aid and
never the truth: a slot whose drain was lost (a worker died between `finish` and sending, the broker dropped
the message) expires with its lease (ENGRAM_STALLED_TURN_SECONDS, renewed while the drain runs), and the
stalled-turn sweep, which finds the queued turns in Postgres, sends the session again through `admit`. An
expired lease of a drain that only waits long in the queue lets the tenant take one slot more for a while;
nothing is lost or run twice either way (drains are idempotent; the session lock keeps a session's turns in
order and each turn runs once).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import redis

from shared.infra.config import Settings
from shared.infra.db import Conn


class Admission(Enum):
    SEND = "send"  # the session took a slot: send its drain
    IN_FLIGHT = "in_flight"  # the session already holds a slot: its drain will find the new turn
    HELD = "held"  # the tenant's slots are taken: the turn waits in Postgres for one to be freed


@dataclass(frozen=True)
class FairnessLimits:
    max_sessions: int  # slots per tenant; 0 = no bound (every turn sends its drain)
    lease_seconds: float  # a slot not renewed this long is free again


def slots_key(tenant_id: int) -> str:
    return f"engram:fair:{tenant_id}"


# KEYS[1] the tenant's slots; ARGV: session, slots, lease (ms), renew_only (1: renew an existing slot, never
# take a new one). Returns the slots now held (>= 1) when it took one, 0 held one already (lease renewed), -1 no
# slot free.
# The server's clock, so that gateways and workers on several machines agree on the leases.
_ADMIT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    redis.call('ZADD', KEYS[1], now_ms + lease, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], lease)
    return 0
end
if ARGV[4] == '1' or redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    return -1
end
redis.call('ZADD', KEYS[1], now_ms + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease)
return redis.call('ZCARD', KEYS[1])
"""

# A tenant's first active session's drain goes at the queue's default priority, its others behind every
# tenant's first (kombu's Redis transport keeps each priority in a list of its own and a worker pops the
# default one first; with Redis 0 is the highest): a tenant with one busy session, the usual chat user,
# waits for a free worker, not behind another tenant's second and third sessions.
FIRST_SLOT_PRIORITY = 0
OTHER_SLOT_PRIORITY = 3


@dataclass(frozen=True)
class Ticket:
    admission: Admission
    priority: int = FIRST_SLOT_PRIORITY  # the message priority to send the drain with


def _ticket(result: int) -> Ticket:
    if result > 0:
        return Ticket(Admission.SEND, FIRST_SLOT_PRIORITY if result == 1 else OTHER_SLOT_PRIORITY)
    return Ticket(Admission.IN_FLIGHT if result == 0 else Admission.HELD)


def admit(client: redis.Redis, tenant_id: int, session_id: int, limits: FairnessLimits) -> Ticket:
    """Whether a drain of the session may be sent now (a newly stored turn, a sweep, a freed slot), and with
    which priority."""
    if limits.max_sessions <= 0:
        return Ticket(Admission.SEND)
    return _run(client, tenant_id, session_id, limits, renew_only=False)


def renew(client: redis.Redis, tenant_id: int, session_id: int, limits: FairnessLimits) -> None:
    """A running drain keeps its slot (a lease expired meanwhile is not taken again: the bound holds)."""
    if limits.max_sessions > 0:
        _run(client, tenant_id, session_id, limits, renew_only=True)


def _run(client: redis.Redis, tenant_id: int, session_id: int, limits: FairnessLimits, renew_only: bool) -> Ticket:
    lease_ms = max(1, int(limits.lease_seconds * 1000))
    args = [session_id, limits.max_sessions, lease_ms, 1 if renew_only else 0]
    result = client.register_script(_ADMIT)(keys=[slots_key(tenant_id)], args=args)
    return _ticket(int(result))


def waiting_sessions(conn: Conn, tenant_id: int, limit: int) -> list[int]:
    """The tenant's sessions with queued turns, the one whose oldest queued turn is oldest first."""
    rows = conn.execute(
        """SELECT session_id FROM turns WHERE tenant_id = %s AND status = 'queued'
           GROUP BY session_id ORDER BY min(id) LIMIT %s""",
        (tenant_id, limit),
    ).fetchall()
    return [int(row["session_id"]) for row in rows]


def finish(
    conn: Conn, client: redis.Redis, tenant_id: int, session_id: int, limits: FairnessLimits
) -> list[tuple[int, int]]:
    """A drain of the session ended (its turns done, or its share of them): free its slot and give the
    tenant's free slots to its sessions that waited longest (this one again if it has turns left and its
    turn has come). Returns the sessions whose drains the caller must send, each with its priority.

    The slot is freed before Postgres is read: a turn stored meanwhile either found the slot free (and sent
    its own drain) or is committed before the read and found here."""
    if limits.max_sessions <= 0:
        return []
    client.zrem(slots_key(tenant_id), session_id)
    # Slots held by other sessions are at most max_sessions - 1: this many candidates include every session
    # a free slot can go to.
    admitted = []
    for candidate in waiting_sessions(conn, tenant_id, 2 * limits.max_sessions):
        ticket = _run(client, tenant_id, candidate, limits, renew_only=False)
        if ticket.admission is Admission.SEND:
            admitted.append((candidate, ticket.priority))
        elif ticket.admission is Admission.HELD:
            break
    return admitted


def tenant_of_sessions(conn: Conn, session_ids: list[int]) -> dict[int, int]:
    """{session id: tenant id} (for senders that know only sessions: the sweeps, messages of older gateways)."""
    if not session_ids:
        return {}
    rows = conn.execute("SELECT id, tenant_id FROM sessions WHERE id = ANY(%s)", (session_ids,)).fetchall()
    return {int(row["id"]): int(row["tenant_id"]) for row in rows}


def limits(settings: Settings) -> FairnessLimits:
    """The tenant's slots (Settings.turn_slots_per_tenant), leased as long as a turn may stay untouched before the
    stalled-turn sweep looks at it (ENGRAM_STALLED_TURN_SECONDS)."""
    return FairnessLimits(max_sessions=settings.turn_slots_per_tenant, lease_seconds=settings.stalled_turn_seconds)
