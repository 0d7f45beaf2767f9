"""The console works offline and ships with engram: its scripts and styles come from the gateway (vendored,
licence kept), and `engram up`'s banner says where it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ops.gateway import create_app
from ops.stack import Stack
from shared.infra.config import Settings

ASSET = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]+)\"""")
VENDORED = ("htmx.min.js", "uPlot.iife.min.js", "uPlot.min.css", "charts.js", "console.css")


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())  # no lifespan: the sign-in page and the static files need no database


def test_the_sign_in_page_loads_every_asset_from_the_gateway(client: TestClient) -> None:
    page = client.get("/console/sign-in")
    assert page.status_code == 200 and 'name="api_key"' in page.text and 'type="submit"' in page.text
    urls = ASSET.findall(page.text)
    assert "/console/static/htmx.min.js" in urls and "/console/static/console.css" in urls
    for url in urls:
        assert url.startswith("/console/static/"), url
        assert client.get(url).status_code == 200, url
    for name in VENDORED:
        assert client.get(f"/console/static/{name}").content, name
    assert "cdn" not in page.text.lower()


def test_the_vendored_libraries_keep_their_licences() -> None:
    static = Path(__file__).parents[2] / "api" / "console" / "static"
    assert (static / "htmx.min.js").read_text().startswith("/*! htmx.org")
    assert "Zero-Clause BSD" in (static / "htmx.LICENSE").read_text()
    assert (static / "uPlot.iife.min.js").read_text().startswith("/*! https://github.com/leeoniya/uPlot")
    assert "MIT License" in (static / "uPlot.LICENSE").read_text()


def test_engram_up_prints_the_console_url(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, host="127.0.0.1", port=8123)
    banner = Stack(settings)._banner("egm_dev", "postgresql://x", "redis://x", "secret")
    assert "console   http://127.0.0.1:8123/console" in banner
