"""The web console in a real browser (Debian's chromium through Selenium) against a real gateway, Postgres,
Redis and a Celery worker: one browser and one set of data for the whole module."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select

from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import ensure_tenant
from shared.access.keys import create_api_key
from shared.infra import db
from shared.infra.config import get_settings
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, add_sources, store_memory
from shared.turns.accept import ensure_session, ensure_user, find_user_id
from tests.conftest import CeleryStack, Gateway, clear_engram_keys, make_key, truncate_all, wait_turn
from tests.support.browser import WAIT_S, missing, save_failure, screenshot, start_browser, until
from tests.support.services import TestServices

pytestmark = pytest.mark.integration


@dataclass
class Console:
    url: str
    admin: str  # every default scope
    reader: str  # memory:read and chat: sees, cannot change
    bound: str  # bound to alice
    stranger: str  # another tenant's admin


def _key(tenant_id: int, scopes: list[str], user: str | None = None) -> str:
    with db.connection() as conn:
        return create_api_key(conn, tenant_id, scopes=scopes, user_external_id=user).key


@pytest.fixture(scope="module")
def console(services: TestServices, gateway: Gateway, celery_stack: CeleryStack, fake_llm_server: FakeLLM) -> Console:
    truncate_all()
    clear_engram_keys()
    fake_llm_server.reset()
    celery_stack.ensure("anthropic")
    admin = make_key("tenant-a")
    stranger = make_key("tenant-b")
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
    console = Console(
        url=gateway.url,
        admin=admin,
        reader=_key(tenant_id, ["memory:read", "chat"]),
        bound=_key(tenant_id, ["memory:read", "memory:write", "chat"], user="alice"),
        stranger=stranger,
    )
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as api:
        for user, key, value in (
            ("alice", "favourite-tea", "Loves jasmine tea in the morning"),
            ("alice", "bike", "Rides a red bicycle to work"),
            ("bob", "city", "Lives in Porto"),
        ):
            api.post(f"/v1/users/{user}/memories", json={"key": key, "value": value}).raise_for_status()
        # The model looks up the time in Lisbon before it answers: the turn has a tool call and its result.
        fake_llm_server.script(
            FakeReply(tool_calls=[("current_time", {"timezone": "Europe/Lisbon"})]),
            FakeReply(text="Lisbon in spring is lovely."),
            match="trip to Lisbon",
        )
        accepted = api.post(
            "/v1/sessions/trip-1/turns", json={"user_id": "alice", "text": "I am planning a trip to Lisbon in May"}
        )
        accepted.raise_for_status()
        assert wait_turn(api, accepted.json()["turn_id"])["status"] == "done"
    with db.connection() as conn:
        scope = Scope(tenant_id, find_user_id(conn, tenant_id, "alice") or 0)
        message = conn.execute(
            "SELECT id FROM session_messages WHERE user_id = %s AND role = 'user'", (scope.user_id,)
        ).fetchone()
        learned = store_memory(conn, scope, MemoryInput(key="next-trip", value="Travelling to Lisbon in May"), "api")
        add_sources(conn, scope, learned.memory, [message["id"]])
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {stranger}"}) as api:
        api.post("/v1/users/carol/memories", json={"key": "pet", "value": "Has a cat"}).raise_for_status()
    return console


@pytest.fixture(scope="module")
def browser(console: Console) -> Iterator[WebDriver]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    driver = start_browser()
    yield driver
    driver.quit()


@pytest.fixture(autouse=True)
def keep_failures(request: pytest.FixtureRequest, browser: WebDriver, tmp_path: Path) -> Iterator[None]:
    yield
    save_failure(request.node, browser, tmp_path)


def sign_in(browser: WebDriver, console: Console, key: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{console.url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(key)
    browser.find_element(By.ID, "sign-in").click()
    until(browser, ec.url_contains("/console/users"))


def shown(browser: WebDriver, element_id: str) -> WebElement:
    """The element once the page the last click sent for has it: a form's POST is answered with a new page, and
    a click returns before that page is loaded."""
    found: WebElement = until(browser, ec.presence_of_element_located((By.ID, element_id)))
    return found


def text(browser: WebDriver) -> str:
    return browser.find_element(By.TAG_NAME, "main").text


def memory_id(key: str) -> int:
    with db.connection() as conn:
        row = conn.execute("SELECT id FROM memories WHERE key = %s AND valid_until IS NULL", (key,)).fetchone()
    return int(row["id"])


def cookies_of(browser: WebDriver) -> dict[str, str]:
    return {c["name"]: c["value"] for c in browser.get_cookies()}


def post_from_page(browser: WebDriver, path: str, fields: dict[str, str]) -> int:
    """A same-origin POST from the page's own script (carries the cookies); its status."""
    status: Any = browser.execute_async_script(
        """const [path, fields, done] = arguments;
           fetch(path, {method: "POST", body: new URLSearchParams(fields), redirect: "manual"})
             .then(r => done(r.status), e => done(String(e)));""",
        path,
        fields,
    )
    return int(status)


def test_sign_in_with_a_key_shows_the_users_and_sign_out_ends_it(browser: WebDriver, console: Console) -> None:
    browser.get(f"{console.url}/console/users")
    until(browser, ec.url_contains("/console/sign-in"))
    screenshot(browser, "sign-in")
    browser.find_element(By.ID, "api_key").send_keys("egm_not-a-key")
    browser.find_element(By.ID, "sign-in").click()
    assert "not valid" in shown(browser, "api_key-error").text

    sign_in(browser, console, console.admin)
    page = text(browser)
    assert "alice" in page and "bob" in page and "carol" not in page  # carol is another tenant's
    cookie = next(c for c in browser.get_cookies() if c["name"] == "engram_console_key")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    screenshot(browser, "users")

    browser.set_window_size(390, 844)  # a phone: one column, nothing wider than the screen
    try:
        browser.get(f"{console.url}/console/users/alice/memories")
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        screenshot(browser, "memories-phone")
    finally:
        browser.set_window_size(1280, 900)

    browser.find_element(By.CSS_SELECTOR, ".sign-out button").click()
    until(browser, ec.url_contains("/console/sign-in"))
    browser.get(f"{console.url}/console/users")
    assert "/console/sign-in" in browser.current_url


def test_the_search_url_shows_the_matching_memory_and_not_the_others(browser: WebDriver, console: Console) -> None:
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/memories?q=jasmine")
    results = browser.find_element(By.ID, "results").text
    assert "favourite-tea" in results and "bike" not in results
    screenshot(browser, "memories-search")

    browser.get(f"{console.url}/console/users/alice/memories?kind=fact")
    listed = browser.find_element(By.ID, "results").text
    assert "favourite-tea" in listed and "bike" in listed and "city" not in listed  # city is bob's


def test_a_memory_page_shows_its_history_and_source_message(browser: WebDriver, console: Console) -> None:
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/memories/{memory_id('next-trip')}")
    assert "Travelling to Lisbon in May" in browser.find_element(By.ID, "memory-value").text
    sources = browser.find_element(By.ID, "sources")
    assert "I am planning a trip to Lisbon in May" in sources.text
    assert "add" in browser.find_element(By.ID, "history").text
    screenshot(browser, "memory")

    sources.find_element(By.LINK_TEXT, "trip-1").click()  # into the transcript, at that message
    highlighted = until(browser, ec.presence_of_element_located((By.CSS_SELECTOR, ".highlight")))
    assert "planning a trip to Lisbon" in highlighted.text


def test_a_session_transcript_and_what_the_model_sees_next(browser: WebDriver, console: Console) -> None:
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/sessions")
    browser.find_element(By.LINK_TEXT, "trip-1").click()
    transcript = until(browser, ec.presence_of_element_located((By.ID, "transcript"))).text
    assert "Lisbon in spring is lovely." in transcript and "I am planning a trip to Lisbon in May" in transcript
    turn = browser.find_element(By.CSS_SELECTOR, ".turn").text
    assert "done" in turn and "cache read" in turn and "output" in turn and " ms" in turn
    # The turn's tool call, named where it was made, its arguments a click away; then the result it got.
    call = browser.find_element(By.CSS_SELECTOR, "#transcript details.tool-calls")
    assert call.find_element(By.TAG_NAME, "summary").text == "Tool calls: current_time"
    assert "Europe/Lisbon" not in call.text  # folded until opened
    call.find_element(By.TAG_NAME, "summary").click()
    assert '"timezone": "Europe/Lisbon"' in call.find_element(By.TAG_NAME, "pre").text
    result = browser.find_element(By.XPATH, "//details[contains(@class, 'tool-result')]/..")
    assert "Result of current_time" in result.text and "Europe/Lisbon" in result.text  # the time it told
    screenshot(browser, "transcript")

    browser.find_element(By.ID, "context-link").click()
    totals = until(browser, ec.presence_of_element_located((By.ID, "token-totals"))).text
    assert "Static prefix" in totals and "tokens" in totals
    assert "tokens" in browser.find_element(By.CSS_SELECTOR, "details.section summary").text
    screenshot(browser, "context")


def test_create_edit_and_delete_a_memory_in_the_browser(browser: WebDriver, console: Console) -> None:
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/memories/new")
    browser.find_element(By.ID, "key").send_keys("garden")
    browser.find_element(By.CSS_SELECTOR, "#memory-form button").click()  # no value: refused, nothing written
    assert shown(browser, "value-error").text
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE key = 'garden'").fetchone()["n"] == 0

    browser.find_element(By.ID, "value").send_keys("Grows tomatoes on the balcony")
    browser.find_element(By.ID, "tags").send_keys("home, plants")
    browser.find_element(By.CSS_SELECTOR, "#memory-form button").click()
    value = until(browser, ec.presence_of_element_located((By.ID, "memory-value")))
    assert value.text == "Grows tomatoes on the balcony"

    field = browser.find_element(By.CSS_SELECTOR, "#edit-form textarea")
    field.clear()
    field.send_keys("Grows basil on the balcony")
    browser.find_element(By.CSS_SELECTOR, "#edit-form button").click()
    until(browser, ec.text_to_be_present_in_element((By.ID, "memory-value"), "basil"))
    history = browser.find_element(By.ID, "history").text
    assert "supersede" in history and "Grows tomatoes on the balcony" in history
    screenshot(browser, "memory-edited")

    edited_url = browser.current_url
    browser.find_element(By.ID, "replaces-link").click()  # the version the edit replaced
    restore = until(browser, ec.presence_of_element_located((By.ID, "restore-form")))
    assert "not active" in text(browser)
    restore.find_element(By.TAG_NAME, "button").click()
    until(browser, ec.text_to_be_present_in_element((By.ID, "memory-value"), "tomatoes"))
    assert browser.current_url != edited_url
    assert browser.find_element(By.ID, "history").text.count("supersede") == 2

    browser.find_element(By.CSS_SELECTOR, "#delete-form button").click()
    until(browser, ec.url_matches(r"/console/users/alice/memories$"))
    assert "garden" not in browser.find_element(By.ID, "results").text
    with db.connection() as conn:
        assert (
            conn.execute("SELECT count(*) AS n FROM memories WHERE key = 'garden' AND valid_until IS NULL").fetchone()[
                "n"
            ]
            == 0
        )


def test_a_read_only_key_sees_no_edit_controls_and_its_posts_are_refused(browser: WebDriver, console: Console) -> None:
    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/alice/memories")
    assert "favourite-tea" in text(browser)
    assert not browser.find_elements(By.ID, "new-memory")
    browser.get(f"{console.url}/console/users/alice/memories/{memory_id('bike')}")
    assert not browser.find_elements(By.ID, "edit-form") and not browser.find_elements(By.ID, "delete-form")

    token = browser.find_element(By.CSS_SELECTOR, ".sign-out input[name=csrf_token]").get_attribute("value")
    assert token
    # Not an admin: no operations or keys in the menu, and their pages refuse it (no run-now, no key controls).
    menu = browser.find_element(By.CSS_SELECTOR, "header nav").text
    assert "Operations" not in menu and "API keys" not in menu
    for admin_page in ("/console/operations", "/console/keys"):
        browser.get(f"{console.url}{admin_page}")
        assert "lacks the scope 'admin'" in text(browser), admin_page
        assert not browser.find_elements(By.ID, "run-form") and not browser.find_elements(By.ID, "key-form")

    def keys_state() -> list[dict[str, Any]]:
        with db.connection() as conn:
            return conn.execute("SELECT id, key_hash, revoked_at FROM api_keys ORDER BY id").fetchall()

    keys_before = keys_state()
    some_key = keys_before[0]["id"]
    writes = {
        "/console/users/alice/memories": {"key": "sneaky", "value": "Should not be stored"},
        f"/console/users/alice/memories/{memory_id('bike')}": {"value": "Changed"},
        f"/console/users/alice/memories/{memory_id('bike')}/delete": {},
        f"/console/users/alice/memories/{memory_id('bike')}/restore": {},
        "/console/operations/run": {"job": "decay", "user_id": "alice"},
        "/console/users/alice/erase": {"confirm": "alice"},
        "/console/keys": {"name": "sneaky-key", "scopes": "admin"},
        f"/console/keys/{some_key}/rotate": {},
        f"/console/keys/{some_key}/revoke": {},
    }
    for path, fields in writes.items():
        assert post_from_page(browser, path, {**fields, "csrf_token": token}) == 403, path
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE key = 'sneaky'").fetchone()["n"] == 0
        bike = conn.execute("SELECT value FROM memories WHERE key = 'bike' AND valid_until IS NULL").fetchone()
    assert bike["value"] == "Rides a red bicycle to work"
    assert keys_state() == keys_before  # no key made, rotated or revoked


def test_a_post_without_the_csrf_token_is_refused_even_with_the_cookie(browser: WebDriver, console: Console) -> None:
    sign_in(browser, console, console.admin)
    assert post_from_page(browser, "/console/users/alice/memories", {"key": "forged", "value": "Forged"}) == 403
    # What another site's form would send if the browser attached the cookie: the cookie, no token.
    with httpx.Client(base_url=console.url, cookies=cookies_of(browser)) as client:
        refused = client.post("/console/users/alice/memories", data={"key": "forged", "value": "Forged"})
        assert refused.status_code == 403 and "security token" in refused.text
        wrong = client.post(
            "/console/users/alice/memories", data={"key": "forged", "value": "Forged", "csrf_token": "0" * 64}
        )
        assert wrong.status_code == 403
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE key = 'forged'").fetchone()["n"] == 0


def test_a_user_bound_key_sees_only_its_user_and_another_tenant_sees_nothing(
    browser: WebDriver, console: Console
) -> None:
    sign_in(browser, console, console.bound)
    users = browser.find_element(By.ID, "results").text
    assert "alice" in users and "bob" not in users
    browser.get(f"{console.url}/console/users/bob/memories")
    assert "bound to user 'alice'" in text(browser) and "city" not in text(browser)

    sign_in(browser, console, console.stranger)
    assert "alice" not in browser.find_element(By.ID, "results").text and "carol" in text(browser)
    for path in (
        "/console/users/alice/memories",
        f"/console/users/alice/memories/{memory_id('bike')}",
        "/console/users/alice/sessions/trip-1",
    ):
        browser.get(f"{console.url}{path}")
        assert "no user 'alice'" in text(browser) or "no session" in text(browser), path
        assert "bicycle" not in text(browser) and "Lisbon" not in text(browser)


def test_operations_lists_the_jobs_and_runs_one_now(browser: WebDriver, console: Console) -> None:
    with db.connection() as conn:  # a finished all-users run with known counts
        conn.execute(
            """INSERT INTO job_runs (job, period, scope, status, as_of, counts, changed, started_at, finished_at)
               VALUES ('consolidation', 'known-counts', 'all', 'done', now(), '{"merged": 3, "scanned": 17}', 3,
                       now() - interval '1 hour', now() - interval '1 hour')"""
        )
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/operations")
    jobs = browser.find_element(By.ID, "jobs").text
    assert "decay" in jobs and "0 4 * * *" in jobs and "reflection" in jobs
    assert "turns" in browser.find_element(By.ID, "queues").text
    Select(browser.find_element(By.ID, "job")).select_by_value("decay")
    browser.find_element(By.ID, "run-user").clear()
    browser.find_element(By.ID, "run-user").send_keys("alice")
    browser.find_element(By.CSS_SELECTOR, "#run-form button").click()
    assert "Queued a run of decay" in until(browser, ec.presence_of_element_located((By.CSS_SELECTOR, ".notice"))).text

    def run_listed(driver: WebDriver) -> bool:
        driver.refresh()
        runs = driver.find_elements(By.ID, "runs")
        return bool(runs) and "alice" in runs[0].text and "done" in runs[0].text

    until(browser, run_listed, 60)
    known = browser.find_element(By.XPATH, "//table[@id='runs']//tr[td[contains(., 'known-counts')]]")
    assert [li.text for li in known.find_elements(By.CSS_SELECTOR, "ul.counts li")] == ["merged: 3", "scanned: 17"]
    with db.connection() as conn:  # the user's run shows the counts it stored
        counts = conn.execute(
            "SELECT counts FROM job_runs WHERE job = 'decay' AND scope LIKE 'user:%' ORDER BY started_at DESC LIMIT 1"
        ).fetchone()["counts"]
    alice = browser.find_element(
        By.XPATH, "//table[@id='runs']//tr[td[contains(., 'alice')] and td[contains(., 'decay')]]"
    )
    assert all(f"{key}: {value}" in alice.text for key, value in counts.items())
    # The whole page in the picture: the runs, queues, workers and channels are below the jobs.
    chrome = int(browser.execute_script("return window.outerHeight - window.innerHeight"))
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1280, min(height + chrome, 4000))
    try:
        screenshot(browser, "operations")
    finally:
        browser.set_window_size(1280, 900)


@pytest.fixture
def priced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A known price for one model, read by the gateway (in this process) on its next request."""
    monkeypatch.setenv(
        "ENGRAM_LLM_PRICES", json.dumps({"console-priced": {"input": 2, "output": 10, "cache_read": 0.5}})
    )
    get_settings.cache_clear()
    yield
    monkeypatch.delenv("ENGRAM_LLM_PRICES")
    get_settings.cache_clear()


def test_charts_draw_from_postgres(browser: WebDriver, console: Console, priced: None) -> None:
    # Three reflection calls three days ago (no other call is that old): two of a priced model, one unpriced.
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        conn.execute(
            """INSERT INTO llm_calls (tenant_id, purpose, provider, model, input_tokens, output_tokens,
                                      cache_read_tokens, created_at)
               VALUES (%(t)s, 'reflection', 'anthropic', 'console-priced', 1000, 200, 4000, now() - interval '3 days'),
                      (%(t)s, 'reflection', 'anthropic', 'console-priced', 1000, 200, 4000, now() - interval '3 days'),
                      (%(t)s, 'reflection', 'anthropic', 'console-unpriced', 500, 50, 0, now() - interval '3 days')""",
            {"t": tenant_id},
        )
        day = conn.execute(
            "SELECT extract(epoch FROM date_trunc('day', now() - interval '3 days'))::bigint AS t"
        ).fetchone()["t"]
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/charts")
    for name in ("cache", "llm-calls", "llm-tokens", "llm-cost", "turns", "memories"):
        until(
            browser,
            ec.presence_of_element_located((By.CSS_SELECTOR, f'[data-chart="{name}"][data-drawn="true"] canvas')),
        )
    assert "console-unpriced" in browser.find_element(By.CSS_SELECTOR, '[data-chart="llm-cost"] .chart-note').text
    screenshot(browser, "charts")
    with httpx.Client(base_url=console.url, cookies=cookies_of(browser)) as client:
        turns = client.get("/console/api/charts/turns").json()
        memories = client.get("/console/api/charts/memories").json()
        calls = client.get("/console/api/charts/llm-calls").json()
    # The turn's hour, not the last one: the run may cross an hour boundary after the turn.
    assert sum(turns["turns"]) == 1 and turns["p50_ms"][turns["turns"].index(1)] > 0
    assert sum(memories["sources"]["api"]) >= 3
    assert sum(calls["purposes"]["chat"]["calls"]) >= 1
    reflection, at = calls["purposes"]["reflection"], calls["t"].index(day)
    assert reflection["calls"][at] == 3
    assert reflection["tokens"][at] == 2 * 1200 + 550
    # 2 x (1000 x $2 + 200 x $10 + 4000 x $0.5) per million tokens; the unpriced model adds nothing.
    assert reflection["cost_usd"][at] == pytest.approx(0.012)
    assert calls["unpriced_models"] and "console-unpriced" in calls["unpriced_models"]


def test_an_admin_creates_a_bound_read_only_key_sees_its_secret_once_rotates_and_revokes_it(
    browser: WebDriver, console: Console
) -> None:
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/keys")
    browser.find_element(By.ID, "key-name").send_keys("alice-reader")
    for box in browser.find_elements(By.CSS_SELECTOR, "#key-form input[name=scopes]"):
        if box.is_selected() != (box.get_attribute("value") == "memory:read"):
            box.click()
    browser.find_element(By.ID, "key-user").send_keys("alice")
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    secret = until(browser, ec.presence_of_element_located((By.ID, "new-secret"))).text
    assert secret.startswith("egm_")
    screenshot(browser, "keys")
    row = browser.find_element(By.XPATH, "//table[@id='keys']//tr[th[contains(., 'alice-reader')]]")
    assert "memory:read" in row.text and "alice" in row.text

    with httpx.Client(base_url=console.url, headers={"Authorization": f"Bearer {secret}"}) as api:
        assert api.get("/v1/users/alice/memories").status_code == 200
        assert api.get("/v1/users/bob/memories").status_code == 403
        browser.get(f"{console.url}/console/keys")  # a reload: the secret is not shown again
        assert secret not in browser.page_source

        # Rotating issues a new secret, shown once, with the same scopes and user; the old one stops working.
        browser.find_element(
            By.XPATH, "//tr[th[contains(., 'alice-reader')]]//form[contains(@action, '/rotate')]//button"
        ).click()
        rotated = until(browser, ec.presence_of_element_located((By.ID, "new-secret"))).text
        assert rotated.startswith("egm_") and rotated != secret
        assert api.get("/v1/users/alice/memories").status_code == 401
        api.headers["Authorization"] = f"Bearer {rotated}"
        assert api.get("/v1/users/alice/memories").status_code == 200
        assert api.get("/v1/users/bob/memories").status_code == 403
        row = browser.find_element(By.XPATH, "//table[@id='keys']//tr[th[contains(., 'alice-reader')]]")
        assert "memory:read" in row.text and "alice" in row.text

        browser.get(f"{console.url}/console/keys")
        listed = browser.find_element(By.ID, "keys")
        browser.find_element(
            By.XPATH, "//tr[th[contains(., 'alice-reader')]]//form[contains(@action, '/revoke')]//button"
        ).click()
        # The revoke redirects back to this same URL: wait for the page it loads, not for the URL.
        until(browser, ec.staleness_of(listed))
        keys = until(browser, ec.presence_of_element_located((By.ID, "keys")))
        assert "alice-reader" not in keys.text
        assert api.get("/v1/users/alice/memories").status_code == 401

    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/keys")
    assert "lacks the scope 'admin'" in text(browser)


def test_a_bad_key_request_shows_its_error_beside_the_field_and_writes_nothing(
    browser: WebDriver, console: Console
) -> None:
    def keys_stored() -> int:
        with db.connection() as conn:
            return int(conn.execute("SELECT count(*) AS n FROM api_keys").fetchone()["n"])

    before = keys_stored()
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/keys")
    browser.find_element(By.ID, "key-name").send_keys("no-scopes")
    for box in browser.find_elements(By.CSS_SELECTOR, "#key-form input[name=scopes]"):
        if box.is_selected():
            box.click()
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    error = until(browser, ec.presence_of_element_located((By.ID, "key-scopes-error")))
    assert "at least one scope" in error.text
    assert browser.find_element(By.CSS_SELECTOR, "#key-form fieldset").get_attribute("aria-describedby") == (
        "key-scopes-error"
    )
    assert not browser.find_elements(By.ID, "key-user-error")
    assert browser.find_element(By.ID, "key-name").get_attribute("value") == "no-scopes"  # kept for the retry

    browser.find_element(By.CSS_SELECTOR, "#key-form input[name=scopes][value='memory:read']").click()
    browser.find_element(By.ID, "key-user").send_keys("not a user id!")
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    error = until(browser, ec.presence_of_element_located((By.ID, "key-user-error")))
    assert "user id must be" in error.text
    assert browser.find_element(By.ID, "key-user").get_attribute("aria-describedby") == "key-user-error"
    assert not browser.find_elements(By.ID, "key-scopes-error")
    assert keys_stored() == before


def test_erasing_a_user_needs_their_id_typed(browser: WebDriver, console: Console) -> None:
    with httpx.Client(base_url=console.url, headers={"Authorization": f"Bearer {console.admin}"}) as api:
        api.post("/v1/users/dora/memories", json={"key": "pet", "value": "Has a parrot"}).raise_for_status()
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/dora/memories")
    browser.find_element(By.ID, "erase-link").click()
    until(browser, ec.presence_of_element_located((By.ID, "confirm"))).send_keys("dor")
    browser.find_element(By.CSS_SELECTOR, "#erase-form button").click()
    assert "exactly" in shown(browser, "confirm-error").text  # nothing erased
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM users WHERE external_id = 'dora'").fetchone()["n"] == 1

    browser.find_element(By.ID, "confirm").send_keys("dora")
    browser.find_element(By.CSS_SELECTOR, "#erase-form button").click()
    notice = until(browser, ec.presence_of_element_located((By.CSS_SELECTOR, ".notice")))
    assert "Erased dora" in notice.text and "dora" not in browser.find_element(By.ID, "results").text
    browser.get(f"{console.url}/console/users/dora/memories")
    assert "no user 'dora'" in text(browser)


def test_the_lag_chart_shows_extraction_and_embedding_lag_from_postgres(browser: WebDriver, console: Console) -> None:
    # Rows at noon five days ago (nothing else is that old): a message, two memories learned from it 30 s and
    # 90 s later and embedded 4 s and 8 s after that, and the message's unit embedded 2 s after it was stored.
    # Each is written with its embedding already recorded, so the running workers never claim them.
    deadline = time.monotonic() + WAIT_S
    with db.connection() as conn:
        while (
            embedded := conn.execute("SELECT id FROM memory_chunks WHERE embedding IS NOT NULL LIMIT 1").fetchone()
        ) is None:
            assert time.monotonic() < deadline, "no chunk was embedded"
            time.sleep(0.2)
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        user_id = ensure_user(conn, tenant_id, "lagtester")
        session_id = ensure_session(conn, tenant_id, user_id, "lag-1")
        noon = conn.execute(
            "SELECT date_trunc('day', now()) - interval '5 days' + interval '12 hours' AS at"
        ).fetchone()["at"]
        message = conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, created_at)
               VALUES (%s, %s, %s, 'user', 'I moved to Oslo', %s) RETURNING id""",
            (tenant_id, user_id, session_id, noon),
        ).fetchone()["id"]
        conn.execute(
            """UPDATE memory_chunks SET embedding = (SELECT embedding FROM memory_chunks WHERE id = %s),
                      created_at = %s, embedded_at = %s + interval '2 seconds'
               WHERE message_id = %s""",
            (embedded["id"], noon, noon, message),
        )
        for key, learned, embedded in (("city", 30, 4), ("country", 90, 8)):
            conn.execute(
                """INSERT INTO memories (tenant_id, user_id, namespace, key, value, source, source_message_ids,
                                         created_at, updated_at, embedded_at)
                   VALUES (%(t)s, %(u)s, 'tacit/facts', %(k)s, 'Oslo', 'extraction', ARRAY[%(m)s]::bigint[],
                           %(at)s + make_interval(secs => %(l)s), %(at)s + make_interval(secs => %(l)s),
                           %(at)s + make_interval(secs => %(l)s + %(e)s))""",
                {"t": tenant_id, "u": user_id, "k": key, "m": message, "at": noon, "l": learned, "e": embedded},
            )
        day = conn.execute(
            "SELECT extract(epoch FROM date_trunc('day', %s::timestamptz))::bigint AS t", (noon,)
        ).fetchone()["t"]
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/charts")
    until(browser, ec.presence_of_element_located((By.CSS_SELECTOR, '[data-chart="lag"][data-drawn="true"] canvas')))
    legend = browser.find_element(By.CSS_SELECTOR, '[data-chart="lag"] .u-legend').text
    assert "extraction p95 s" in legend and "message embedding p50 s" in legend
    with httpx.Client(base_url=console.url, cookies=cookies_of(browser)) as client:
        lag = client.get("/console/api/charts/lag").json()
    at = lag["t"].index(day)
    extraction, memory, unit = (lag["kinds"][k] for k in ("extraction", "memory_embedding", "message_embedding"))
    assert extraction["n"][at] == 2 and extraction["p50_s"][at] == 60 and extraction["p95_s"][at] == 87
    assert memory["n"][at] == 2 and memory["p50_s"][at] == 6 and memory["p95_s"][at] == pytest.approx(7.8)
    assert unit["n"][at] == 1 and unit["p50_s"][at] == 2
