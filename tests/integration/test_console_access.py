"""The console for everyone, in a real browser: every page's controls are named, its text is readable against
its background (WCAG AA contrast), it fits a phone's width, a keyboard alone signs in and moves between pages
with the focus shown; the session cookie is Secure under HTTPS; a failing browser test leaves what it saw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec

from api.console.session import CSRF_FIELD, KEY_COOKIE, NONCE_COOKIE
from tests.integration.test_console import (  # noqa: F401  (browser, console, keep_failures: fixtures)
    Console,
    browser,
    console,
    keep_failures,
    memory_id,
    sign_in,
)
from tests.support import browser as browser_support
from tests.support.browser import until

pytestmark = pytest.mark.integration

PHONE = (390, 844)

# Text below WCAG 2.1 AA contrast against the background it is drawn on (4.5:1, 3:1 for large text); the
# background is the nearest ancestor's opaque one. Chart drawings (SVG) are checked by their own colours' legend.
_LOW_CONTRAST = """
const channel = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
const luminance = c => 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2]);
const rgba = s => { const m = s.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
  const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(parseFloat); return p.length === 3 ? [...p, 1] : p; };
const background = el => { for (let e = el; e; e = e.parentElement) {
  const c = rgba(getComputedStyle(e).backgroundColor); if (c && c[3] > 0.5) return c; } return [255, 255, 255, 1]; };
const low = [];
for (const el of document.querySelectorAll("body *")) {
  if (el.closest("svg") || ![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
  const style = getComputedStyle(el), box = el.getBoundingClientRect();
  if (style.visibility === "hidden" || !box.width || !box.height) continue;
  const fg = rgba(style.color), bg = background(el);
  const drawn = [0, 1, 2].map(i => fg[i] * fg[3] + bg[i] * (1 - fg[3]));
  const [hi, lo] = [luminance(drawn), luminance(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05), size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && parseInt(style.fontWeight) >= 700);
  if (ratio < (large ? 3 : 4.5)) low.push(`${el.tagName} "${el.textContent.trim().slice(0, 40)}" ${ratio.toFixed(2)}`);
}
return low;
"""

# Controls a screen reader could not name: no label, aria-label(ledby), title, or text of their own.
_UNNAMED = """
const unnamed = [];
for (const el of document.querySelectorAll("input, select, textarea, button, a[href], img")) {
  const style = getComputedStyle(el);
  if (el.type === "hidden" || style.display === "none" || style.visibility === "hidden") continue;
  let name = el.getAttribute("aria-label") || el.getAttribute("title") || "";
  const by = el.getAttribute("aria-labelledby");
  if (!name && by) name = by.split(/\\s+/).map(id => document.getElementById(id)?.textContent || "").join(" ");
  if (!name && el.labels) name = [...el.labels].map(label => label.textContent).join(" ");
  if (!name && el.tagName === "IMG") name = el.getAttribute("alt") || "";
  if (!name && ["BUTTON", "A"].includes(el.tagName)) name = el.textContent;
  if (!name && ["submit", "button"].includes(el.type)) name = el.value;
  if (!name.trim()) unnamed.push(el.outerHTML.slice(0, 120));
}
return unnamed;
"""


def _pages(stack: Console) -> list[str]:
    memory = memory_id("favourite-tea")
    user = f"{stack.url}/console/users/alice"
    return [
        f"{stack.url}/console/users",
        f"{user}/memories",
        f"{user}/memories?q=tea",
        f"{user}/memories/{memory}",
        f"{user}/memories/new",
        f"{user}/sessions",
        f"{user}/sessions/trip-1",
        f"{user}/sessions/trip-1/context",
        f"{user}/entities",
        f"{user}/reflections",
        f"{user}/erase",
        f"{stack.url}/console/operations",
        f"{stack.url}/console/keys",
        f"{stack.url}/console/charts",
    ]


def _loaded(driver: WebDriver, url: str) -> None:
    driver.get(url)
    until(driver, ec.presence_of_element_located((By.TAG_NAME, "main")))
    if "/console/sign-in" not in url:
        assert "/console/sign-in" not in driver.current_url, f"{url}: sent to sign in"


def _audit(driver: WebDriver, page: str) -> dict[str, Any]:
    """The loaded page's unnamed controls and low-contrast text, by page and check; {} when it has none."""
    found = {
        check: driver.execute_script(script)
        for check, script in (("unnamed", _UNNAMED), ("low contrast", _LOW_CONTRAST))
    }
    return {f"{page}: {check}": items for check, items in found.items() if items}


def test_every_page_names_its_controls_reads_clearly_and_fits_a_phone(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
) -> None:
    browser.delete_all_cookies()
    _loaded(browser, f"{console.url}/console/sign-in")
    problems = _audit(browser, "sign-in")
    sign_in(browser, console, console.admin)
    pages = _pages(console)
    for url in pages:
        _loaded(browser, url)
        problems.update(_audit(browser, url))
    browser.set_window_size(*PHONE)
    try:
        for url in pages:
            _loaded(browser, url)
            if not browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"):
                problems[f"{url}: wider than a phone"] = browser.execute_script(
                    "return document.documentElement.scrollWidth"
                )
    finally:
        browser.set_window_size(1280, 900)
    assert problems == {}


def _tab_to(driver: WebDriver, matches: str, most: int = 60) -> dict[str, Any]:
    """Press Tab until the focused element satisfies the JS condition `matches` (on `el`); what has the focus."""
    for _ in range(most):
        driver.switch_to.active_element.send_keys(Keys.TAB)
        focused: dict[str, Any] | None = driver.execute_script(
            f"""const el = document.activeElement; if (!({matches})) return null;
                const style = getComputedStyle(el);
                return {{id: el.id, href: el.getAttribute("href"), outline: style.outlineStyle,
                         outlineWidth: parseFloat(style.outlineWidth), shadow: style.boxShadow}};"""
        )
        if focused is not None:
            return focused
    raise AssertionError(f"Tab never reached {matches}")


def _focus_shown(focused: dict[str, Any]) -> bool:
    return (focused["outline"] != "none" and focused["outlineWidth"] > 0) or focused["shadow"] != "none"


def test_a_keyboard_alone_signs_in_and_moves_between_pages(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
) -> None:
    browser.delete_all_cookies()
    _loaded(browser, f"{console.url}/console/sign-in")
    browser.find_element(By.TAG_NAME, "body").click()
    field = _tab_to(browser, 'el.id === "api_key"')
    assert _focus_shown(field), field
    browser.switch_to.active_element.send_keys(console.admin, Keys.ENTER)
    until(browser, ec.url_contains("/console/users"))
    # From the users list to alice's memories, then into a memory, by Tab and Enter.
    link = _tab_to(browser, 'el.tagName === "A" && /\\/users\\/alice\\/memories$/.test(el.getAttribute("href"))')
    assert _focus_shown(link), link
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    until(browser, ec.url_contains("/console/users/alice/memories"))
    search = _tab_to(browser, 'el.tagName === "INPUT" && el.name === "q"')
    assert _focus_shown(search), search
    browser.switch_to.active_element.send_keys("jasmine", Keys.ENTER)
    until(browser, ec.url_contains("q=jasmine"))
    memory = _tab_to(browser, f'el.tagName === "A" && /\\/memories\\/{memory_id("favourite-tea")}$/.test(el.href)')
    assert _focus_shown(memory), memory
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    until(browser, ec.url_contains(f"/memories/{memory_id('favourite-tea')}"))
    assert "Loves jasmine tea" in browser.find_element(By.TAG_NAME, "main").text


def test_the_session_cookie_is_secure_behind_https_and_only_then(console: Console) -> None:  # noqa: F811
    def cookies(response: httpx.Response) -> dict[str, str]:
        """Each cookie the response sets, by name: its whole Set-Cookie line, lowercased."""
        lines = response.headers.get_list("set-cookie")
        return {line.split("=", 1)[0]: line.lower() for line in lines}

    def signed_in(headers: dict[str, str]) -> dict[str, str]:
        with httpx.Client(base_url=console.url, timeout=30) as client:
            form = client.get("/console/sign-in", headers=headers)
            nonce = form.cookies[NONCE_COOKIE]
            answer = client.post(
                "/console/sign-in",
                data={"api_key": console.admin, CSRF_FIELD: nonce},
                headers={**headers, "Cookie": f"{NONCE_COOKIE}={nonce}"},
            )
        assert answer.status_code == 303, answer.text
        return cookies(answer)

    # A TLS-terminating proxy on this host says the request came over HTTPS (uvicorn trusts it from 127.0.0.1).
    over_https = signed_in({"X-Forwarded-Proto": "https"})
    assert "; secure" in over_https[KEY_COOKIE] and "; secure" in over_https[NONCE_COOKIE]
    assert "httponly" in over_https[KEY_COOKIE] and "samesite=strict" in over_https[KEY_COOKIE]
    assert "; secure" not in signed_in({})[KEY_COOKIE]


def test_a_failed_browser_test_leaves_its_screenshot_and_page(
    browser: WebDriver,  # noqa: F811
    console: Console,  # noqa: F811
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    _loaded(browser, f"{console.url}/console/sign-in")
    failed = request.node
    failed.stash[browser_support.FAILED] = True  # as pytest_runtest_makereport marks a failed call
    try:
        saved = browser_support.save_failure(failed, browser, tmp_path)
    finally:
        failed.stash[browser_support.FAILED] = False
    assert saved is not None
    assert (saved / "page.png").read_bytes().startswith(b"\x89PNG")
    assert 'id="api_key"' in (saved / "page.html").read_text(encoding="utf-8")
    # A test that passed leaves nothing.
    assert browser_support.save_failure(failed, browser, tmp_path / "passed") is None
