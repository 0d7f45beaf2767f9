"""Rate limits (token buckets in Redis) and the monthly token budget, through the real gateway."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.infra.config import get_settings
from tests.conftest import CeleryStack, Gateway, wait_turn


@contextmanager
def limits(**env: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(f"ENGRAM_RATE_LIMIT_{name.upper()}", value)
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()


# Refill rates are slow on purpose: a bucket must not refill between the requests that empty it,
# however slow the machine is.
@pytest.fixture
def tight_key_limit(clean_state: Any) -> Iterator[None]:
    with limits(key_per_second="0.2", key_burst="3", tenant_per_second="0"):
        yield


@pytest.fixture
def tight_tenant_limit(clean_state: Any) -> Iterator[None]:
    with limits(key_per_second="0", tenant_per_second="0.01", tenant_burst="5"):
        yield


def new_key(admin: httpx.Client) -> str:
    response = admin.post("/v1/admin/keys", json={"scopes": ["memory:read"]})
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


def statuses(gateway: Gateway, key: str, n: int) -> list[httpx.Response]:
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}) as http:
        return [http.get("/v1/users/alice/memories") for _ in range(n)]


def test_a_key_over_its_rate_gets_429_with_retry_after_then_is_served_again(
    gateway: Gateway, api: httpx.Client, tight_key_limit: None
) -> None:
    key = new_key(api)
    first = statuses(gateway, key, 4)
    assert [r.status_code for r in first[:3]] == [404, 404, 404]  # authorised (no such user yet)
    refused = first[3]
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert "API key" in refused.json()["detail"] and int(refused.headers["Retry-After"]) >= 1
    # The bucket refills one token in 5 s: poll until the key is served again (bounded), as a client honouring
    # Retry-After would.
    deadline = time.monotonic() + 15
    while (response := statuses(gateway, key, 1)[0]).status_code == 429:
        assert time.monotonic() < deadline, "the key was never served again"
        time.sleep(0.2)
    assert response.status_code == 404


def test_the_tenant_bucket_is_shared_by_its_keys(gateway: Gateway, api: httpx.Client, tight_tenant_limit: None) -> None:
    keys = [new_key(api), new_key(api)]  # the admin key spends two tenant tokens
    served = statuses(gateway, keys[0], 3)  # three more: the tenant bucket (5) is empty now
    assert [r.status_code for r in served] == [404, 404, 404]
    other = statuses(gateway, keys[1], 1)[0]  # a fresh key, but the same tenant
    assert other.status_code == 429 and "tenant" in other.json()["detail"]


def test_a_spent_monthly_budget_refuses_new_turns(api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    assert api.patch("/v1/admin/tenant", json={"monthly_token_budget": 50}).json()["tokens_used_this_month"] == 0
    fake_llm.script(FakeReply(text="This reply costs tokens."), match="spend the budget")
    accepted = api.post("/v1/sessions/s-budget/turns", json={"user_id": "alice", "text": "spend the budget"})
    assert wait_turn(api, accepted.json()["turn_id"])["status"] == "done"
    tenant = api.get("/v1/admin/tenant").json()
    assert tenant["tokens_used_this_month"] >= 50, tenant

    turns_before = len(api.get("/v1/sessions/s-budget/messages", params={"user_id": "alice"}).json()["messages"])
    refused = api.post("/v1/sessions/s-budget/turns", json={"user_id": "alice", "text": "one more"})
    assert refused.status_code == 429 and refused.json()["code"] == "token_budget_exceeded"
    assert "budget is used up" in refused.json()["detail"] and int(refused.headers["Retry-After"]) >= 1
    after = api.get("/v1/sessions/s-budget/messages", params={"user_id": "alice"}).json()["messages"]
    assert len(after) == turns_before  # nothing written

    assert api.patch("/v1/admin/tenant", json={"monthly_token_budget": None}).status_code == 200
    assert api.post("/v1/sessions/s-budget/turns", json={"user_id": "alice", "text": "one more"}).status_code == 202
    assert api.patch("/v1/admin/tenant", json={"monthly_token_budget": 0}).status_code == 422


def _subquery_loops(plan: dict[str, Any]) -> list[int]:
    """Actual loops of every node that reads llm_calls in an EXPLAIN ANALYZE JSON plan."""
    loops = [plan["Actual Loops"]] if plan.get("Relation Name") == "llm_calls" else []
    for child in plan.get("Plans", []):
        loops += _subquery_loops(child)
    return loops


def test_the_budget_check_reads_the_months_calls_only_when_the_tenant_has_a_budget(clean_state: Any) -> None:
    """It runs on every accepted turn: without a budget its cost must not grow with the month's traffic."""
    from shared.access.auth import ensure_tenant
    from shared.access.quotas import BUDGET_AND_USAGE_SQL, budget_used, set_budget, turn_refusal
    from shared.infra import db

    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "default")
        conn.execute(
            """INSERT INTO llm_calls (tenant_id, purpose, provider, model, input_tokens, output_tokens)
               SELECT %s, 'chat', 'anthropic', 'm', 10, 5 FROM generate_series(1, 50)""",
            (tenant_id,),
        )

        def loops() -> list[int]:
            row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + BUDGET_AND_USAGE_SQL, (tenant_id,)).fetchone()
            assert row is not None
            return _subquery_loops(next(iter(row.values()))[0]["Plan"])

        assert loops() == [0]  # planned, never executed
        assert turn_refusal(conn, tenant_id) is None and budget_used(conn, tenant_id) is None
        set_budget(conn, tenant_id, 700)
        assert loops() == [1]
        assert budget_used(conn, tenant_id) == 750 / 700
        assert turn_refusal(conn, tenant_id) is not None


def _script_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("eval", "evalsha"))


def test_all_of_a_requests_buckets_take_one_round_trip_and_stop_at_the_first_empty_one(clean_state: Any) -> None:
    from shared.access.ratelimit import request_limits, take
    from shared.infra.redis_client import get_redis

    client = get_redis()
    limits = request_limits(7, 70, key_rate=0.01, key_burst=5, tenant_rate=0.01, tenant_burst=2)
    before = _script_calls(client)
    assert take(client, limits) is None and take(client, limits) is None
    refusal = take(client, limits)  # the key bucket still had tokens; the tenant's is empty
    assert _script_calls(client) - before == 3  # one script call per request, not one per bucket
    assert refusal is not None and refusal.limit.name == "tenant" and refusal.retry_after_s >= 1
    # As with one check per bucket: the key's token for the refused request is spent, and a limit switched
    # off (rate 0) is not consulted at all.
    assert float(client.hget("engram:ratelimit:key:70", "tokens")) == pytest.approx(2, abs=0.01)
    off = request_limits(7, 71, key_rate=0, key_burst=5, tenant_rate=0, tenant_burst=2)
    assert take(client, off) is None and _script_calls(client) - before == 3
