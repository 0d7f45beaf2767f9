"""/docs and /redoc work without network: every script, stylesheet and icon they load comes from the gateway."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from ops.gateway import create_app

ASSET = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]+)\"""")


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())  # no lifespan: these routes need no database, broker or model


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_their_assets_from_the_gateway(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    urls = ASSET.findall(response.text)
    assert any(url.endswith(".js") for url in urls), urls
    if page == "/docs":
        assert any(url.endswith(".css") for url in urls), urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from another host"
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.content, url
    assert "cdn" not in response.text.lower()
    # The spec the page renders is the gateway's own.
    assert "/openapi.json" in response.text
    assert client.get("/openapi.json").status_code == 200


def test_swagger_ui_is_served_in_a_version_that_renders_openapi_3_1(client: TestClient) -> None:
    # FastAPI writes OpenAPI 3.1, which Swagger UI reads from 5.0 on (4.x shows "no valid version field").
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = client.get("/docs-assets/swagger-ui-bundle.js").text
    version = re.search(r'PACKAGE_VERSION:"(\d+)\.', bundle)
    assert version is not None and int(version.group(1)) >= 5


def test_docs_routes_stay_out_of_the_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not any(path.startswith(("/docs", "/redoc")) for path in paths)


def test_the_docs_site_draws_its_diagram_without_a_cdn() -> None:
    """Material would fetch mermaid.js from unpkg for a mermaid block: the site shows the README's diagram as an
    SVG rendered from the same source, which must not drift from the README's."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = re.search(r"```mermaid\n(.*?)```", (root / "README.md").read_text(), re.S)
    assert readme is not None
    assert (root / "docs/assets/architecture.mmd").read_text() == readme.group(1)
    assert (root / "docs/assets/architecture.svg").read_text().startswith("<svg")
    assert "assets/architecture.svg" in (root / "docs/index.md").read_text()
    assert not [page for page in (root / "docs").rglob("*.md") if "```mermaid" in page.read_text()]
    assert "name: mermaid" not in (root / "mkdocs.yml").read_text()
