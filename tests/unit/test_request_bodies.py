"""Every JSON request body the gateway serves, and every object inside one, is validated strictly: a value of
another JSON type than the schema's is refused, not coerced (`0.0` read as false, `"5"` as 5). The bodies are
found from the served OpenAPI schema, so a body added later is checked without being listed here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import api.schemas
from api.schemas.memories import SearchIn
from api.schemas.openai import ChatCompletionIn
from api.schemas.profiles import AgentProfilePatch
from ops.gateway import create_app


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"].rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _subclasses(cls: type[BaseModel]) -> Iterator[type[BaseModel]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _request_components() -> dict[str, type[BaseModel]]:
    """Each schema component a request body uses (directly or inside another), with the model it is built from."""
    spec = create_app().openapi()
    components = spec["components"]["schemas"]
    bodies = [op["requestBody"] for path in spec["paths"].values() for op in path.values() if "requestBody" in op]
    names: set[str] = set()
    todo = [name for body in bodies for name in _refs(body)]
    while todo:
        name = todo.pop()
        if name not in names:
            names.add(name)
            todo.extend(_refs(components[name]))
    # FastAPI names a component after its model, or module__path__Model when two models share a name.
    models: dict[str, list[type[BaseModel]]] = {}
    for model in _subclasses(BaseModel):
        if model.__module__.startswith("api."):
            models.setdefault(model.__name__, []).append(model)
            models.setdefault(f"{model.__module__}.{model.__name__}".replace(".", "__"), []).append(model)
    found: dict[str, type[BaseModel]] = {}
    for name in names:
        candidates = {model for model in models.get(name, []) if model.model_json_schema().get("title") is not None}
        assert len(candidates) == 1, f"component {name}: models {candidates}"
        found[name] = candidates.pop()
    return found


REQUEST_COMPONENTS = _request_components()


def test_the_request_bodies_are_found() -> None:
    # A walk that found nothing would make the next test pass for nothing.
    assert {"TurnIn", "IngestMessageIn", "SearchFiltersIn", "RuleItem", "ChatCompletionIn", "StreamOptions"} <= set(
        REQUEST_COMPONENTS
    )


@pytest.mark.parametrize("name", sorted(REQUEST_COMPONENTS))
def test_every_request_body_is_strict(name: str) -> None:
    model = REQUEST_COMPONENTS[name]
    assert model.model_config.get("strict") is True, f"{model.__module__}.{model.__name__} coerces values"


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (AgentProfilePatch, {"tool_notes": {"sections": [{"title": "t", "items": [{"text": "x", "enabled": 0.0}]}]}}),
        (SearchIn, {"query": "tea", "limit": "5"}),
        (SearchIn, {"query": "tea", "filters": {"include_transcripts": 1}}),
        (ChatCompletionIn, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": "false"}),
        (ChatCompletionIn, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 1.0}),
    ],
)
def test_a_value_of_another_json_type_is_refused(model: type[BaseModel], body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(body)


def test_times_and_numbers_still_parse_from_json() -> None:
    search = SearchIn.model_validate({"query": "tea", "filters": {"since": "2023-05-08T00:00:00Z"}})
    assert search.filters.since is not None and search.filters.since.year == 2023
    memory = api.schemas.MemoryIn.model_validate({"key": "k", "value": "v", "confidence": 1})
    assert memory.confidence == 1.0  # a JSON integer is a valid number
    chat = ChatCompletionIn.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": 0.5}
    )
    assert chat.n == 1  # a field engram does not use is still ignored on the OpenAI-compatible endpoint
