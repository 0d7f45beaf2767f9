"""The jobs seen from outside: GET /v1/admin/jobs (admin scope) and the job metrics on /metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from shared.access.keys import create_api_key
from shared.infra import db
from shared.infra.config import get_settings
from shared.maintenance import jobs
from tests.conftest import Gateway

pytestmark = pytest.mark.integration


def _key(scopes: list[str]) -> str:
    with db.connection() as conn:
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'tenant-a'").fetchone()["id"]
        return create_api_key(conn, tenant_id, scopes=scopes).key


def test_admin_jobs_lists_every_job_with_schedule_last_and_next_run(api: httpx.Client, gateway: Gateway) -> None:
    api.post("/v1/users/alice/memories", json={"key": "bike", "value": "Owns a red bicycle"}).raise_for_status()
    as_of = datetime.now(UTC) + timedelta(days=400)
    jobs.run("decay", get_settings(), as_of=as_of)

    response = api.get("/v1/admin/jobs")
    assert response.status_code == 200
    listed = {job["name"]: job for job in response.json()}
    assert set(listed) == {"decay", "consolidation", "enrichment", "reflection", "cache-eviction"}
    assert listed["decay"]["schedule"] == "0 4 * * *" and listed["reflection"]["schedule"] == "0 3 * * 0"
    assert listed["enrichment"]["schedule"] == "0 2 * * *" and listed["consolidation"]["schedule"] == "0 3 * * *"
    assert all(job["enabled"] and job["timezone"] == "UTC" for job in listed.values())
    next_decay = datetime.fromisoformat(listed["decay"]["next_run"])
    assert (next_decay.hour, next_decay.minute) == (4, 0) and next_decay > datetime.now(UTC)
    assert datetime.fromisoformat(listed["reflection"]["next_run"]).isoweekday() == 7  # Sunday
    last = listed["decay"]["last_run"]
    assert last["status"] == "done" and last["period"] == as_of.date().isoformat() and last["changed"] == 1
    assert last["counts"]["deleted"] == 1 and last["duration_seconds"] >= 0 and last["error"] is None
    assert listed["reflection"]["last_run"] is None

    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {_key(['memory:read'])}"}) as reader:
        refused = reader.get("/v1/admin/jobs")
    assert refused.status_code == 403 and refused.json()["code"] == "missing_scope"

    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {_key(['metrics'])}"}) as scraper:
        metrics = scraper.get("/metrics").text
    assert 'engram_job_runs_total{job="decay",status="done"} 1.0' in metrics
    assert 'engram_job_last_changed{job="decay"} 1.0' in metrics
    assert 'engram_job_last_count{count="deleted",job="decay"} 1.0' in metrics
    assert 'engram_job_last_duration_seconds{job="decay"}' in metrics
