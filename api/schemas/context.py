"""Bodies of `POST /v1/users/{id}/context`: the user's context for another agent's prompt."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, Field

from api.schemas.common import ID_PATTERN, RequestBody, Timestamp
from shared.text import SAFE_TEXT

MAX_CONTEXT_TOKENS = 100_000

# The names shared.context.packed.SECTIONS uses (a unit test keeps them equal; importing it here would load
# the search and model code into every importer of the schemas, the Python client included).
SectionName = Literal[
    "profile", "active_task", "summary", "relevant_memories", "transcript", "what_you_know", "reflection"
]

SECTION_COUNT = len(get_args(SectionName))


class ContextIn(RequestBody):
    query: Annotated[str, Field(max_length=2000), SAFE_TEXT] | None = Field(
        None, description="What the next answer is about: picks the relevant memories and transcript snippets"
    )
    session_key: str | None = Field(
        None, pattern=ID_PATTERN, description="The conversation: adds its active task and summary"
    )
    max_tokens: int = Field(
        1000, ge=1, le=MAX_CONTEXT_TOKENS, description="Budget for the whole `context` text; `tokens` never exceeds it"
    )
    sections: list[SectionName] | None = Field(
        None, min_length=1, max_length=SECTION_COUNT, description="Only these sections (default: all)"
    )
    as_of: Timestamp | None = Field(
        None,
        description='When the query is asked (default now): the times it names ("last May", "two weeks ago") '
        "are read against it, and what was said then ranks first",
    )


class ContextSourceOut(BaseModel):
    session_key: str | None = Field(
        None, description="The conversation an excerpt is from, or the one a memory was learned in"
    )
    said_at: datetime | None = Field(description="When an excerpt was said, or since when a memory holds")
    speaker: str | None = Field(None, description="Who said an excerpt, or the first message a memory was learned from")
    message_ids: list[int] = Field(description="An excerpt's message, or the messages a memory was learned from")


class ContextItemOut(BaseModel):
    id: str = Field(description="memory:<id>, message:<id>, profile:<field> or session:<id>:task|summary")
    kind: str
    text: str
    score: float | None = Field(None, description="Search score, for items found by the query")
    source: ContextSourceOut | None = Field(None, description="Where it came from, for found memories and excerpts")


class ContextSectionOut(BaseModel):
    name: SectionName
    tokens: int = Field(description="Tokens of the section on its own")
    items: list[ContextItemOut] = Field(description="Best first")


class ContextOut(BaseModel):
    context: str = Field(description="The fenced block to put in a prompt (empty when nothing fits or is known)")
    tokens: int = Field(description="Tokens of `context` by `tokenizer`; at most max_tokens")
    max_tokens: int
    tokenizer: str = Field(description="How tokens were counted, e.g. o200k_base")
    sections: list[ContextSectionOut]
    dropped_items: int = Field(description="Candidate items that did not fit the budget")
