"""A real browser for the console's tests: Debian's chromium driven through its own chromedriver (installed by
ops/test.sh with apt-get), headless, never a driver downloaded at run time.

Loaded as a pytest plugin (tests/conftest.py): a failing test that used the `browser` fixture leaves a
screenshot and the page's HTML in ENGRAM_CONSOLE_FAILURES (default: the test's temporary directory), and
`screenshot()` saves the documentation's pictures when ENGRAM_CONSOLE_SCREENSHOTS names a directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:  # selenium loads only when a test starts a browser
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
FAILED = pytest.StashKey[bool]()  # set on a test whose call failed
WAIT_S = 20
T = TypeVar("T")


def until(driver: WebDriver, condition: Callable[[WebDriver], T], timeout: float = WAIT_S) -> T:
    """Wait for `condition`, read again when the page changed under the read. A form's submit or an htmx swap can
    replace an element between finding it and reading its text: chromedriver then answers either a stale
    reference or a plain "unknown error: … Node with given id does not belong to the document"; both are read
    again, and a condition that never holds still ends in a TimeoutException."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (StaleElementReferenceException, WebDriverException)
    return WebDriverWait(driver, timeout, ignored_exceptions=ignored).until(condition)


def missing() -> str | None:
    """Why there is no browser to test with, or None."""
    for path in (CHROMEDRIVER, CHROMIUM):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: `apt-get install -y chromium chromium-driver` (ops/test.sh does it)"
    return None


def start_browser(width: int = 1280, height: int = 900) -> WebDriver:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium Manager runs (and may go online) only for what it is not given: the driver and the browser
    # are both named here, and it is told to stay offline anyway.
    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for chromium's sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def screenshot(driver: WebDriver, name: str) -> None:
    """Save the page as docs picture `name`.png when ENGRAM_CONSOLE_SCREENSHOTS is set."""
    target = os.environ.get("ENGRAM_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(target) / f"{name}.png"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True


def save_failure(item: pytest.Item, driver: WebDriver, tmp_dir: Path) -> Path | None:
    """A failed test's screenshot and HTML, for whoever reads the failure."""
    if not item.stash.get(FAILED, False):
        return None
    target = Path(os.environ.get("ENGRAM_CONSOLE_FAILURES") or tmp_dir) / item.name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    driver.save_screenshot(str(target / "page.png"))
    (target / "page.html").write_text(driver.page_source)
    print(f"\nconsole test failed: screenshot and HTML in {target}")
    return target
