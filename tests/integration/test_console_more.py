"""More of the web console in a real browser: the memory list's orders and date window, the users' memory counts,
bulk delete, export, users by last activity, entities and reflections, the operations page's channels, live workers
and unserved queues, and a bad filter said beside its field. The browser, gateway, worker and data come from
test_console's fixtures (a module of its own, so its own data)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from psycopg.types.json import Jsonb
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from shared.access.auth import ensure_tenant
from shared.channels.connections import upsert_connection
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.redis_client import get_redis
from shared.infra.worker_heartbeats import KEY_PREFIX, WorkerBeat, live_workers, record
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, store_memory
from shared.queueing.queues import QUEUES
from shared.turns.accept import ensure_session, ensure_user, find_user_id
from tests.conftest import CeleryStack
from tests.integration.test_console import (  # noqa: F401  (browser, console, keep_failures: fixtures)
    Console,
    browser,
    console,
    keep_failures,
    memory_id,
    sign_in,
    text,
)
from tests.support.browser import screenshot, until

pytestmark = pytest.mark.integration

BOT_TOKEN = "123456:telegram-bot-token-never-shown"


def _scope(user: str) -> Scope:
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        return Scope(tenant_id, find_user_id(conn, tenant_id, user) or 0)


def _link_entity(scope: Scope, memory: int, name: str, entity_type: str, *, mentions: int) -> None:
    """An entity of the user's named `name`, linked to `memory`."""
    with db.connection() as conn:
        entity = conn.execute(
            """INSERT INTO entities (tenant_id, user_id, canonical_name, normalized_name, entity_type, mention_count)
               VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
            (scope.tenant_id, scope.user_id, name, name.lower(), entity_type, mentions),
        ).fetchone()
        assert entity is not None
        conn.execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES (%s, %s)", (memory, entity["id"]))


def _changed_on(key: str, when: datetime) -> None:
    """Set when a memory was created and last changed (the list's order and window read these)."""
    with db.connection() as conn:
        conn.execute(
            "UPDATE memories SET updated_at = %s, created_at = %s WHERE key = %s AND valid_until IS NULL",
            (when, when, key),
        )


def _store(user: str, key: str, value: str, **extra: Any) -> int:
    with db.connection() as conn:
        return int(store_memory(conn, _scope(user), MemoryInput(key=key, value=value, **extra), "api").memory["id"])


def _keys_listed(driver: WebDriver) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .card strong")]


def _post_pairs(driver: WebDriver, path: str, pairs: list[tuple[str, str]]) -> int:
    """A same-origin POST from the page's own script with repeated fields (several ids); its status."""
    status: Any = driver.execute_async_script(
        """const [path, pairs, done] = arguments;
           fetch(path, {method: "POST", body: new URLSearchParams(pairs), redirect: "manual"})
             .then(r => done(r.status), e => done(String(e)));""",
        path,
        [list(pair) for pair in pairs],
    )
    return int(status)


def _token(driver: WebDriver) -> str:
    token = driver.find_element(By.CSS_SELECTOR, ".sign-out input[name=csrf_token]").get_attribute("value")
    assert token
    return token


def _active(key: str) -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT count(*) AS n FROM memories WHERE key = %s AND valid_until IS NULL", (key,))
        return int(row.fetchone()["n"]) == 1


def test_the_memory_list_orders_and_filters_by_date(browser: WebDriver, console: Console) -> None:  # noqa: F811
    _changed_on("bike", datetime(2026, 1, 10, 9, tzinfo=UTC))
    _changed_on("favourite-tea", datetime(2026, 2, 10, 9, tzinfo=UTC))
    _changed_on("next-trip", datetime(2026, 3, 10, 9, tzinfo=UTC))
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/memories")
    assert _keys_listed(browser)[:3] == ["next-trip", "favourite-tea", "bike"]

    Select(browser.find_element(By.ID, "sort")).select_by_visible_text("Least recently changed first")
    until(browser, lambda b: _keys_listed(b)[:1] == ["bike"])
    assert "sort=oldest" in browser.current_url  # htmx keeps the URL in step: the order is linkable
    assert _keys_listed(browser)[:3] == ["bike", "favourite-tea", "next-trip"]

    browser.get(f"{console.url}/console/users/alice/memories?date=created&from=2026-02-01&to=2026-02-10")
    assert _keys_listed(browser) == ["favourite-tea"]  # the last day counts whole
    assert browser.find_element(By.ID, "from").get_attribute("value") == "2026-02-01"
    screenshot(browser, "memories-window")

    browser.get(f"{console.url}/console/users/alice/memories?from=2026-03-01&to=2026-02-01")
    assert "starts (2026-03-01) after it ends (2026-02-01)" in text(browser)


def test_the_memory_list_orders_by_creation(browser: WebDriver, console: Console) -> None:  # noqa: F811
    # Created in one order, changed in another: the creation orders must not follow the changes.
    for key, created, changed in (
        ("bike", datetime(2026, 1, 10, 9, tzinfo=UTC), datetime(2026, 3, 20, 9, tzinfo=UTC)),
        ("favourite-tea", datetime(2026, 2, 10, 9, tzinfo=UTC), datetime(2026, 3, 10, 9, tzinfo=UTC)),
        ("next-trip", datetime(2026, 3, 1, 9, tzinfo=UTC), datetime(2026, 3, 5, 9, tzinfo=UTC)),
    ):
        with db.connection() as conn:
            conn.execute(
                "UPDATE memories SET created_at = %s, updated_at = %s WHERE key = %s AND valid_until IS NULL",
                (created, changed, key),
            )
    sign_in(browser, console, console.admin)
    window = "date=created&from=2026-01-01&to=2026-03-31"
    browser.get(f"{console.url}/console/users/alice/memories?{window}")
    assert _keys_listed(browser) == ["bike", "favourite-tea", "next-trip"]  # recently changed first

    Select(browser.find_element(By.ID, "sort")).select_by_visible_text("Newest created first")
    until(browser, lambda b: _keys_listed(b) == ["next-trip", "favourite-tea", "bike"])
    assert "sort=created" in browser.current_url  # linkable, as every order
    assert "created 2026-03-01" in browser.find_element(By.CSS_SELECTOR, "#results .card .muted").text

    browser.get(f"{console.url}/console/users/alice/memories?sort=created_oldest")
    assert _keys_listed(browser)[:3] == ["bike", "favourite-tea", "next-trip"]  # the rest were created today
    selected = Select(browser.find_element(By.ID, "sort")).first_selected_option.text
    assert selected == "Oldest created first"


def test_a_bad_filter_is_said_beside_its_field_and_correcting_it_clears_the_message(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
) -> None:
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/memories?kind=factt&from=yesterday")
    kind_error = browser.find_element(By.ID, "kind-error")
    assert kind_error.is_displayed() and "unknown kind 'factt'; kinds are" in kind_error.text
    kind = browser.find_element(By.ID, "kind")
    assert kind.get_attribute("aria-invalid") == "true" and kind.get_attribute("aria-describedby") == "kind-error"
    from_error = browser.find_element(By.ID, "from-error")
    assert from_error.text == "expected a date such as 2026-03-01 (it was 'yesterday')"
    assert "Cannot show this page" not in text(browser)
    assert {"favourite-tea", "bike"} <= set(_keys_listed(browser))  # listed as without the bad filters

    # A corrected field (the list's own htmx request) takes its message away with the bad value.
    Select(browser.find_element(By.ID, "kind")).select_by_value("fact")
    until(browser, lambda b: not b.find_element(By.ID, "kind-error").is_displayed())
    assert not browser.find_element(By.ID, "from-error").is_displayed()
    assert "kind=fact" in browser.current_url and "yesterday" not in browser.current_url

    browser.get(f"{console.url}/console/users/alice/sessions?page=0")
    assert "page: expected a page number from 1 to 400 (it was '0')" in browser.find_element(By.ID, "page-error").text
    assert "trip-1" in text(browser)  # the first page, shown
    with httpx.Client(base_url=console.url, headers={"Authorization": f"Bearer {console.admin}"}) as api:
        answer = api.get("/v1/users/alice/memories", params={"limit": "many"})
    assert answer.status_code == 422 and answer.json()["code"] == "validation_error"


def test_bulk_delete_removes_the_selection_or_nothing(browser: WebDriver, console: Console) -> None:  # noqa: F811
    for key in ("old-1", "old-2", "old-3"):
        _store("alice", key, f"An outdated note called {key}")
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users/alice/memories?q=outdated")
    for key in ("old-1", "old-2"):
        browser.find_element(By.ID, f"pick-{memory_id(key)}").click()
    label = browser.find_element(By.CSS_SELECTOR, f"label[for=pick-{memory_id('old-1')}]")
    assert label.get_attribute("textContent") == "Select old-1"  # each checkbox is named for screen readers
    browser.find_element(By.ID, "bulk-delete").click()
    until(browser, lambda b: "deleted=2" in b.current_url)
    assert "Deleted 2 memories." in text(browser)
    assert not _active("old-1") and not _active("old-2") and _active("old-3")

    token = _token(browser)
    bob_city = memory_id("city")
    old3 = str(memory_id("old-3"))
    path = "/console/users/alice/memories/bulk-delete"
    # Bad input deletes nothing: a malformed id, no selection, another user's memory among alice's.
    assert _post_pairs(browser, path, [("csrf_token", token), ("ids", old3), ("ids", "x")]) == 422
    assert _post_pairs(browser, path, [("csrf_token", token)]) == 400
    assert _post_pairs(browser, path, [("csrf_token", token), ("ids", old3), ("ids", str(bob_city))]) == 409
    assert _post_pairs(browser, path, [("ids", old3)]) == 403  # no CSRF token
    assert _active("old-3") and _active("city")

    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/alice/memories")
    assert not browser.find_elements(By.ID, "bulk-delete") and not browser.find_elements(By.ID, f"pick-{old3}")
    assert _post_pairs(browser, path, [("csrf_token", _token(browser)), ("ids", old3)]) == 403
    assert _active("old-3")


def _counts_listed(driver: WebDriver) -> dict[str, str]:
    """Each user's memory count as the users page shows it."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    return {
        r.find_element(By.TAG_NAME, "th").find_element(By.TAG_NAME, "a").text: r.find_element(By.TAG_NAME, "td").text
        for r in rows
    }


def test_the_users_page_counts_active_memories_exactly(browser: WebDriver, console: Console) -> None:  # noqa: F811
    first = _store("bob", "draft-1", "A first draft")
    _store("bob", "draft-2", "A second draft")
    with db.connection() as conn:
        conn.execute("UPDATE memories SET valid_until = now() WHERE id = %s", (first,))  # deleted: not counted
        counted = conn.execute(
            """SELECT u.external_id, count(*) FILTER (WHERE m.valid_until IS NULL) AS active, count(*) AS every
               FROM users u JOIN memories m ON m.user_id = u.id
               WHERE u.external_id IN ('alice', 'bob') GROUP BY u.external_id"""
        ).fetchall()
    expected = {row["external_id"]: str(row["active"]) for row in counted}
    assert all(row["every"] > row["active"] for row in counted if row["external_id"] == "bob")
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users")
    listed = _counts_listed(browser)
    assert {user: listed[user] for user in expected} == expected


def test_export_downloads_the_users_memories_as_json(browser: WebDriver, console: Console) -> None:  # noqa: F811
    sign_in(browser, console, console.reader)  # reading is enough
    browser.get(f"{console.url}/console/users/alice/memories")
    link = browser.find_element(By.ID, "export")
    assert link.get_attribute("download") is not None
    answer: Any = browser.execute_async_script(
        """const [path, done] = arguments;
           fetch(path).then(async r => done({status: r.status, type: r.headers.get("content-type"),
                                             disposition: r.headers.get("content-disposition"), body: await r.json()}),
                            e => done(String(e)));""",
        link.get_attribute("href"),
    )
    assert answer["status"] == 200 and answer["type"].startswith("application/json")
    assert answer["disposition"] == 'attachment; filename="engram-alice.json"'
    keys = {m["key"] for m in answer["body"]["memories"]}
    assert {"favourite-tea", "bike", "next-trip"} <= keys and "city" not in keys  # bob's stays bob's
    assert answer["body"]["user"]["external_id"] == "alice"


def test_users_ordered_by_last_activity(browser: WebDriver, console: Console) -> None:  # noqa: F811
    _store("bob", "latest", "Just told us something new")  # bob is now the most recently active
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users")

    def first_user(b: WebDriver) -> str:
        return str(b.find_element(By.CSS_SELECTOR, "#results tbody th a").text)

    assert first_user(browser) == "alice"
    Select(browser.find_element(By.ID, "sort")).select_by_visible_text("Most recently active first")
    until(browser, lambda b: first_user(b) == "bob")
    assert "sort=active" in browser.current_url


def test_entities_and_weekly_reflections(browser: WebDriver, console: Console) -> None:  # noqa: F811
    scope = _scope("alice")
    _link_entity(scope, memory_id("next-trip"), "Lisbon", "place", mentions=3)
    for week, day, text_ in (("2026-w10", 2, "Planned a spring trip."), ("2026-w11", 9, "Booked the flights.")):
        _store(
            "alice",
            f"week-{week}",
            text_,
            namespace="reflections",
            kind="reflection",
            tags=["weekly"],
            event_time=datetime(2026, 3, day, tzinfo=UTC),
        )
    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/alice/entities")
    card = browser.find_element(By.CSS_SELECTOR, "#entities .entity").text
    assert "Lisbon" in card and "3 mentions" in card and "next-trip" in card and "Travelling to Lisbon in May" in card
    screenshot(browser, "entities")

    browser.find_element(By.LINK_TEXT, "Reflections").click()
    until(browser, lambda b: "/reflections" in b.current_url)
    weeks = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#reflections .card-title a")]
    assert weeks == ["week-2026-w11", "week-2026-w10"]  # newest week first
    assert "Booked the flights." in text(browser)
    screenshot(browser, "reflections")


def test_operations_shows_channels_and_deliveries(browser: WebDriver, console: Console) -> None:  # noqa: F811
    scope = _scope("alice")
    with db.connection() as conn:
        connection, _created = upsert_connection(
            conn, scope.tenant_id, "telegram", "console-bot", {"bot_token": BOT_TOKEN}, bot_username="console_bot"
        )
        conn.execute(
            """INSERT INTO channel_deliveries (tenant_id, connection_id, user_id, target, text, status, attempts,
                                               last_error)
               VALUES (%s, %s, %s, %s, 'A reply the page must not show', 'failed', 5, 'HTTP 400: chat not found')""",
            (scope.tenant_id, connection.id, scope.user_id, Jsonb({"chat_id": 42})),
        )
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/operations")
    connections = browser.find_element(By.ID, "connections").text
    assert "console-bot" in connections and "console_bot" in connections and "bot_token" in connections
    deliveries = browser.find_element(By.ID, "deliveries").text
    assert "failed" in deliveries and "chat not found" in deliveries and "alice" in deliveries
    html = browser.page_source
    assert BOT_TOKEN not in html and "A reply the page must not show" not in html


def test_operations_lists_the_live_worker_and_its_queues(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
    celery_stack: CeleryStack,
) -> None:
    assert celery_stack.worker is not None
    name = f"{celery_stack.worker.name}@"
    sign_in(browser, console, console.admin)

    def worker_listed(b: WebDriver) -> bool:
        # The tests' key cleanup removed the heartbeat: the worker writes it again within an interval.
        b.get(f"{console.url}/console/operations")
        return any(name in row.text for row in b.find_elements(By.CSS_SELECTOR, "#workers tbody tr"))

    until(browser, worker_listed)
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr") if name in r.text)
    assert all(queue in row.text for queue in QUEUES)
    assert re.search(r"\d+ s ago", row.text)
    # Every queue has a consumer: no "no worker" warning.
    assert not browser.find_elements(By.ID, "unserved")
    assert "no worker" not in browser.find_element(By.ID, "queues").text


@pytest.fixture
def partial_worker(celery_stack: CeleryStack, no_shared_workers: None) -> Iterator[WorkerBeat]:
    """The only live worker is one that consumes every queue but the last: the shared worker is stopped (it
    rewrote its heartbeat every interval) and every heartbeat left is removed before this one is written, long
    lived, so the page reads exactly this. The shared worker is started again afterwards, for later tests."""
    client = get_redis()
    try:
        for stale in client.scan_iter(f"{KEY_PREFIX}*"):
            client.delete(stale)
        now = time.time()
        beat = WorkerBeat(hostname="partial@console-test", pid=4242, queues=QUEUES[:-1], started_at=now, last_seen=now)
        record(client, beat, interval_seconds=600)
        assert [b.hostname for b in live_workers(client)] == [beat.hostname]
        yield beat
    finally:
        client.delete(f"{KEY_PREFIX}partial@console-test")
        celery_stack.ensure("anthropic")


def test_operations_warns_of_a_queue_no_live_worker_consumes(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
    partial_worker: WorkerBeat,
) -> None:
    unserved = QUEUES[-1]
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/operations")
    assert browser.find_element(By.ID, "unserved").text == f"No worker consumes {unserved}."
    queues = browser.find_element(By.ID, "queues")
    warned = [
        d.find_element(By.XPATH, "preceding-sibling::dt[1]").text
        for d in queues.find_elements(By.TAG_NAME, "dd")
        if "no worker" in d.text
    ]
    assert warned == [unserved]  # beside that queue alone
    (row,) = browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr")
    assert partial_worker.hostname in row.text and unserved not in row.text


def _users_listed(driver: WebDriver) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results tbody th a")]


def _search_users(driver: WebDriver, words: str) -> None:
    """Type into the users' search field as a person does (htmx asks for the list once typing stops)."""
    field = driver.find_element(By.ID, "q")
    field.clear()
    field.send_keys(words)


def test_searching_users_narrows_the_list_by_id_or_name_and_says_when_none_match(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
) -> None:
    with db.connection() as conn:
        conn.execute("UPDATE users SET display_name = 'Roberto Bianchi' WHERE external_id = 'bob'")
    sign_in(browser, console, console.admin)
    browser.get(f"{console.url}/console/users")
    assert {"alice", "bob"} <= set(_users_listed(browser))

    _search_users(browser, "LIC")  # a part of an id, in any case
    until(browser, lambda b: _users_listed(b) == ["alice"])
    assert "q=LIC" in browser.current_url  # the search is linkable

    _search_users(browser, "bianch")  # a part of a display name
    until(browser, lambda b: _users_listed(b) == ["bob"])
    assert "Roberto Bianchi" in browser.find_element(By.ID, "results").text

    _search_users(browser, "nobody-like-this")
    until(browser, lambda b: "No users match “nobody-like-this”." in b.find_element(By.ID, "results").text)
    assert _users_listed(browser) == []


@pytest.fixture(scope="module")
def work_memories(console: Console) -> dict[str, int]:  # noqa: F811
    """alice's memories to filter by namespace (`work` and what is under it, not `workshop`) and by tag, one of
    them linked to an entity and decayed once, and a profile fact the nightly decay never touches."""
    ids = {
        "desk": _store("alice", "desk", "Works at a standing desk", namespace="work", tags=["office"]),
        "laptop": _store("alice", "laptop", "Carries a light laptop", namespace="work/gear", tags=["gear"]),
        "bench": _store("alice", "bench", "Keeps a workbench in the garage", namespace="workshop", tags=["office"]),
        "full-name": _store("alice", "full-name", "Alice Martins", namespace="profile"),
    }
    _link_entity(_scope("alice"), ids["desk"], "Acme", "organization", mentions=2)
    with db.connection() as conn:
        conn.execute(
            "UPDATE memories SET decayed_at = '2026-03-04 04:00+00', confidence = 0.8 WHERE id = %s", (ids["desk"],)
        )
    return ids


def test_the_namespace_and_tag_filters_list_only_matching_memories_and_stay_in_the_url(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
    work_memories: dict[str, int],
) -> None:
    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/alice/memories")
    browser.find_element(By.ID, "namespace").send_keys("work", Keys.ENTER)
    until(browser, lambda b: "namespace=work" in b.current_url)
    assert sorted(_keys_listed(browser)) == ["desk", "laptop"]  # work and under it; not workshop

    browser.find_element(By.ID, "tag").send_keys("office", Keys.ENTER)
    until(browser, lambda b: "tag=office" in b.current_url)
    assert _keys_listed(browser) == ["desk"]  # both filters at once
    assert browser.find_element(By.ID, "namespace").get_attribute("value") == "work"

    browser.get(f"{console.url}/console/users/alice/memories?tag=office")  # the link alone: the same list
    assert sorted(_keys_listed(browser)) == ["bench", "desk"]
    assert browser.find_element(By.ID, "tag").get_attribute("value") == "office"
    # A search keeps to the filters too.
    browser.get(f"{console.url}/console/users/alice/memories?q=desk+laptop+workbench&namespace=work")
    assert sorted(_keys_listed(browser)) == ["desk", "laptop"]


def _embedded(key: str) -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT embedded_at FROM memories WHERE key = %s AND valid_until IS NULL", (key,)).fetchone()
    return row is not None and row["embedded_at"] is not None


def test_a_search_worded_unlike_the_memory_finds_it_by_meaning(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
) -> None:
    # The console has one search, full-text and semantic together: a question sharing no word with the memory
    # ("Loves jasmine tea in the morning") is answered by its meaning alone, once the memory has its vector.
    until(browser, lambda _: _embedded("favourite-tea"))
    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/alice/memories")
    question = "what hot drink does she have at breakfast"
    browser.find_element(By.ID, "q").send_keys(question)
    until(browser, lambda b: parse_qs(urlparse(b.current_url).query).get("q") == [question])
    until(browser, lambda b: _keys_listed(b)[:1] == ["favourite-tea"])
    assert "score" in browser.find_element(By.CSS_SELECTOR, "#results .card .muted").text


def test_a_memory_page_shows_its_entities_and_how_it_decays_or_why_it_never_does(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
    work_memories: dict[str, int],
) -> None:
    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/alice/memories/{work_memories['desk']}")
    assert browser.find_element(By.ID, "entities").text == "Acme (organization)"
    assert browser.find_element(By.ID, "decay").text == "0.01 a day, last decayed 2026-03-04 04:00 UTC"
    assert "0.80" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text  # the confidence decay left

    # A profile fact keeps its default decay rate, but the nightly decay passes the profile by.
    browser.get(f"{console.url}/console/users/alice/memories/{work_memories['full-name']}")
    assert browser.find_element(By.ID, "decay").text == "protected, never decays: part of the user's profile"


SUMMARY = "Erin is planning a week in Lisbon in May; the flights are booked, the hotel is not."
TASK = "Book a hotel in Alfama"
LONG_RESULT = "\n".join(f"Hotel note {i}: a room near the castle, breakfast included, {i * 7} euros" for i in range(90))


def _compacted_session() -> None:
    """erin's session `long-1` as a compaction leaves it: its first turn folded into the summary (its messages
    marked compacted), the task it found pinned, the recovery note due on the next request; then the turns
    after it, the first of which called memory_search and got a long result back."""
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        user_id = ensure_user(conn, tenant_id, "erin")
        session_id = ensure_session(conn, tenant_id, user_id, "long-1")
        call = {"id": "call-1", "name": "memory_search", "arguments": {"query": "hotel"}}
        turns: list[list[tuple[str, str, Any, Any]]] = [
            [("user", "Help me plan a week in Lisbon", None, None), ("assistant", "Gladly: when?", None, None)],
            [
                ("user", "What did I note about hotels?", None, None),
                ("assistant", "", Jsonb([call]), None),
                ("tool", LONG_RESULT, None, Jsonb({"tool_call_id": "call-1", "name": "memory_search"})),
                ("assistant", "You noted ninety hotels near the castle.", None, None),
            ],
            *[
                [("user", f"And day {day}?", None, None), ("assistant", f"Day {day}: Belém.", None, None)]
                for day in (2, 3, 4)
            ],
        ]
        for number, said in enumerate(turns):
            turn_id = conn.execute(
                """INSERT INTO turns (tenant_id, user_id, session_id, status, finished_at)
                   VALUES (%s, %s, %s, 'done', now()) RETURNING id""",
                (tenant_id, user_id, session_id),
            ).fetchone()["id"]
            for role, content, calls, results in said:
                conn.execute(
                    """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content,
                                                     tool_calls, tool_results, is_compacted)
                       VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                    (tenant_id, user_id, session_id, turn_id, role, content, calls, results, number == 0),
                )
        conn.execute(
            """UPDATE sessions SET summary = %s, active_task = %s, compaction_count = 1, recovery_pending = true,
                                   compacted_at = '2026-03-04 10:00+00'
               WHERE id = %s""",
            (SUMMARY, TASK, session_id),
        )


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 4,000-token context window for the gateway (in this process) from its next request: a long tool result
    is then worth pruning."""
    monkeypatch.setenv("ENGRAM_CONTEXT_WINDOW_TOKENS", "4000")
    get_settings.cache_clear()
    yield
    monkeypatch.delenv("ENGRAM_CONTEXT_WINDOW_TOKENS")
    get_settings.cache_clear()


def _section_tokens(driver: WebDriver, part: str) -> dict[str, int]:
    """Each section of the context page's `part` (static or dynamic) with the tokens its summary line says."""
    found = {}
    for line in driver.find_elements(By.XPATH, f"//section[h2[@id='{part}-heading']]//details/summary"):
        said = re.fullmatch(r"(\S+) · (\d+) tokens", line.text)
        assert said, line.text
        found[said[1]] = int(said[2])
    return found


def test_a_compacted_session_shows_its_summary_and_the_next_request_its_steering_and_pruning(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
    small_window: None,
) -> None:
    _compacted_session()
    sign_in(browser, console, console.reader)
    browser.get(f"{console.url}/console/users/erin/sessions/long-1")
    assert browser.find_element(By.ID, "summary").text == SUMMARY
    assert "1, last 2026-03-04 10:00 UTC" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    folded = browser.find_elements(By.CSS_SELECTOR, "#transcript .msg.compacted")
    assert [m.find_element(By.TAG_NAME, "p").text for m in folded] == ["Help me plan a week in Lisbon", "Gladly: when?"]
    assert all("compacted" in m.find_element(By.CSS_SELECTOR, ".muted").text for m in folded)
    live = browser.find_elements(By.CSS_SELECTOR, "#transcript .msg:not(.compacted)")
    assert len(live) == 10

    browser.find_element(By.ID, "context-link").click()
    steering = until(browser, lambda b: b.find_element(By.ID, "steering"))
    reasons = [s.text for s in steering.find_elements(By.CSS_SELECTOR, "details summary")]
    assert "compaction_recovery · the conversation was just compacted (end)" in reasons
    assert "objective_nudge · a task is active and this turn has not used a tool yet (end)" in reasons
    dynamic = _section_tokens(browser, "dynamic")
    assert dynamic["summary"] > 0 and dynamic["active_task"] > 0
    totals = browser.find_element(By.ID, "token-totals").text
    assert f"Dynamic sections\n{sum(dynamic.values())} tokens" in totals
    assert f"Static prefix\n{sum(_section_tokens(browser, 'static').values())} tokens" in totals
    summary = browser.find_element(By.XPATH, "//section[h2[@id='dynamic-heading']]//details[.//strong[.='summary']]")
    summary.find_element(By.TAG_NAME, "summary").click()
    assert SUMMARY in summary.text  # what the model reads in place of the folded turn

    # What was pruned, as the inspection API reports it: the old long result, trimmed to its head and tail.
    with httpx.Client(base_url=console.url, headers={"Authorization": f"Bearer {console.admin}"}) as api:
        view = api.get("/v1/sessions/long-1/context", params={"user_id": "erin"}).json()
    pruning = browser.find_element(By.ID, "pruning").text
    assert view["pruning"]["budget_tokens"] == 4000 - get_settings().max_output_tokens
    assert pruning == f"{view['pruning']['summary']} (stages: soft_trim)"
    assert "trimmed 1 long tool result(s) to head and tail" in pruning
