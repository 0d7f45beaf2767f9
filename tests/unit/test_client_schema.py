"""The clients (clients/python, clients/typescript) read what the gateway serves: every response model of the
Python client has the fields, types and required fields of the OpenAPI component of its name, every request
it builds is an operation of the schema, and the TypeScript client's schema snapshot is the current one."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engramhq_client import core, models
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "clients" / "typescript" / "openapi.json"
REF = "#/components/schemas/{model}"
# What only documents a schema; the shape is the rest.
PROSE = {"title", "description", "examples", "default"}


@pytest.fixture(scope="module")
def served() -> str:
    """`/openapi.json` as the gateway builds it, in a process of its own (building the gateway configures
    logging and settings for the whole process, which the other unit tests must not inherit)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "ops.api_doc", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def components(served: str) -> dict[str, Any]:
    schemas: dict[str, Any] = json.loads(served)["components"]["schemas"]
    return schemas


def shape(schema: Any) -> Any:
    """A JSON schema without its prose, with FastAPI's `-Output` suffix taken off component names."""
    if isinstance(schema, dict):
        return {
            key: re.sub(r"-Output$", "", value) if key == "$ref" else shape(value)
            for key, value in schema.items()
            if key not in PROSE
        }
    if isinstance(schema, list):
        return [shape(item) for item in schema]
    return schema


def client_models() -> list[type[BaseModel]]:
    return [
        value
        for value in vars(models).values()
        if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == models.__name__
    ]


def component(components: dict[str, Any], name: str) -> dict[str, Any]:
    found = components.get(name) or components.get(f"{name}-Output")
    assert found is not None, f"the gateway's schema has no component {name}"
    return found


def test_the_client_has_response_models() -> None:
    names = {model.__name__ for model in client_models()}
    assert {"ContextOut", "IngestAccepted", "MemoryOut", "MemoryStatusOut", "SearchResultOut"} <= names


@pytest.mark.parametrize("model", client_models(), ids=lambda model: model.__name__)
def test_each_client_model_matches_its_component(model: type[BaseModel], components: dict[str, Any]) -> None:
    theirs = component(components, model.__name__)
    ours = model.model_json_schema(mode="serialization", ref_template=REF)
    assert set(ours["properties"]) == set(theirs["properties"]), "fields differ"
    assert set(ours.get("required", [])) == set(theirs.get("required", [])), "required fields differ"
    for name, prop in ours["properties"].items():
        assert shape(prop) == shape(theirs["properties"][name]), f"{model.__name__}.{name} has another type"


def test_every_request_the_client_builds_is_an_operation_of_the_schema(served: str) -> None:
    paths: dict[str, Any] = json.loads(served)["paths"]
    operations = {
        (method.upper(), re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"))
        for path, item in paths.items()
        for method in item
    }
    calls = [
        core.ingest("u", "s", [{"role": "user", "content": "hi"}]),
        core.memory_status("u", "s"),
        core.context("u", query="q", max_tokens=100),
        core.search("u", "q"),
        core.add_memory("u", "k", "v"),
        core.memories("u"),
        core.get_memory("u", 1),
        core.update_memory("u", 1, value="v"),
        core.delete_memory("u", 1),
        core.export("u"),
    ]
    built = {
        name
        for name, value in vars(core).items()
        if inspect.isfunction(value) and str(value.__annotations__.get("return")).startswith("Call[")
    }
    assert len(calls) == len(built), f"a builder is missing here: {sorted(built)}"
    for call in calls:
        assert any(method == call.method and pattern.match(call.path) for method, pattern in operations), call


def test_the_typescript_clients_schema_snapshot_is_current(served: str) -> None:
    assert SNAPSHOT.read_text() == served, (
        "regenerate: python -m ops.api_doc --json > clients/typescript/openapi.json, then in clients/typescript "
        "npm run generate"
    )
