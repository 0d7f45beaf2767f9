"""Form input checked by the API's own request models, so a form accepts exactly what the REST API does; each
problem is reported next to its field."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shared.text import printable

Model = TypeVar("Model", bound=BaseModel)


def split_tags(text: str) -> list[str]:
    return [tag.strip() for tag in text.split(",") if tag.strip()]


def check(model: type[Model], values: dict[str, Any]) -> tuple[Model | None, dict[str, str]]:
    """The model, or the first problem with each field ({field: sentence})."""
    try:
        return model.model_validate(values), {}
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for issue in exc.errors():
            field = str(issue["loc"][0]) if issue["loc"] else "form"
            errors.setdefault(field, printable(str(issue["msg"])))
        return None, errors
