"""docs/api/reference.md is exactly what `python -m ops.api_doc` generates from the gateway's OpenAPI schema."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ops.api_doc import render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api" / "reference.md"


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    """The schema and the page as the command makes them, in a process of their own: building the gateway
    configures logging and settings for the whole process, which the other unit tests must not inherit."""
    code = (
        "import json; from ops.api_doc import openapi, render; schema = openapi(); "
        "print(json.dumps({'schema': schema, 'page': render(schema)}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_api_reference_is_generated_and_current(generated: dict[str, Any]) -> None:
    assert PAGE.read_text() == generated["page"], "regenerate: python -m ops.api_doc > docs/api/reference.md"


def test_every_operation_and_schema_is_on_the_page(generated: dict[str, Any]) -> None:
    schema = generated["schema"]
    page = PAGE.read_text()
    for path, item in schema["paths"].items():
        for method in item:
            if method in {"get", "post", "put", "patch", "delete"}:
                assert f"### `{method.upper()} {path}`" in page
    for name in schema["components"]["schemas"]:
        assert f"### `{name}` {{#schema-" in page


def test_every_schema_link_has_its_anchor() -> None:
    page = PAGE.read_text()
    anchors = set(re.findall(r"\{#(schema-[a-z0-9-]+)\}", page))
    assert set(re.findall(r"\]\(#(schema-[a-z0-9-]+)\)", page)) <= anchors


def test_a_small_schema_renders_its_operation_parameters_and_fields() -> None:
    schema = {
        "paths": {
            "/v1/things/{thing_id}": {
                "get": {
                    "tags": ["things"],
                    "summary": "Read Thing",
                    "description": "One thing | with a pipe.",
                    "parameters": [
                        {
                            "name": "thing_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer", "minimum": 1},
                        }
                    ],
                    "responses": {
                        "200": {
                            "description": "OK",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ThingOut"}}},
                        }
                    },
                }
            }
        },
        "components": {
            "schemas": {
                "ThingOut": {
                    "properties": {
                        "name": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "Its name"}
                    },
                    "required": [],
                }
            }
        },
    }
    page = render(schema)
    assert "## Things" in page
    assert "### `GET /v1/things/{thing_id}`" in page
    assert "| `thing_id` | path | integer; ≥ 1 | yes |  |" in page
    assert "| 200 | OK | [`ThingOut`](#schema-thingout) (`application/json`) |" in page
    assert "| `name` | string, nullable | no | Its name |" in page
