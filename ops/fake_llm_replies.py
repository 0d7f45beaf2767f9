"""The fake LLM's replies: the scripted reply record, the texts of a request that replies match and echo,
and what a reply becomes in each wire format (OpenAI and Anthropic JSON bodies, their streamed chunks and
events, error bodies) and the fake embeddings.

Apart from the server (fake_llm.py, which tests and benchmarks import these names from) because all of it
is pure: a reply and a request in, a body out; the server holds the script, the caches and the HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ops.fake_cache import PromptUsage, canonical, content_text, estimate_tokens

WireFormat = Literal["openai", "anthropic"]
Json = dict[str, Any]
# engram's dynamic tail (shared/context/tail.py): whole, or at the end of a text.
_TAIL = re.compile(r"\s*<turn-context>.*?</turn-context>\s*\Z", re.DOTALL)


@dataclass
class FakeReply:
    """One scripted reply, consumed by the next request of either format that it matches.

    `match` ties the reply to one conversation: only a request with a user message containing this
    text may take it. A worker still finishing another test's turn then cannot consume it (the
    "next request wins" rule alone made end-to-end tests flaky). Unmatched replies go to any request.
    """

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay_s: float = 0.0  # before the response starts (time to first byte)
    status: int = 200  # anything else returns an error body in the provider's format
    error_body: dict[str, Any] | None = None  # replaces the generated error body
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"retry-after": "0.2"}
    chunk_delay_s: float = 0.0  # between streamed events
    # Streaming only: drop the connection after this many text deltas, to simulate a broken stream.
    fail_after_deltas: int | None = None
    match: str | None = None
    # In-process servers only: the response waits until this event is set (at most fake_llm.HOLD_LIMIT_S), so a test
    # can act while the caller is known to be inside its model call.
    hold: threading.Event | None = None

    def matches(self, body: Json) -> bool:
        return self.match is None or any(self.match in text for text in user_texts(body))


@dataclass(frozen=True)
class RecordedRequest:
    format: WireFormat
    path: str
    headers: dict[str, str]
    body: Json
    received_at: float = 0.0  # the server's clock (monotonic unless one is given), for cache replays


# ---------------------------------------------------------------------------------------------------
# Text and token helpers


def split_deltas(text: str) -> list[str]:
    """Split into word-sized fragments that keep their whitespace, so joining them restores `text`."""
    parts = re.findall(r"\s*\S+\s*", text)
    return parts if parts else ([text] if text else [])


def last_user_text(body: Json) -> str:
    """The latest user-side text: a user message, or a tool result (either wire format)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") in ("user", "tool"):
            text = _content_text(message.get("content"))
            if text:
                return text
    return ""


def user_texts(body: Json) -> list[str]:
    """The text of every user message (tool results excluded), either wire format."""
    texts = []
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = [block for block in content if isinstance(block, dict) and block.get("type") != "tool_result"]
        texts.append(_content_text(content))
    return texts


def engram_tail(body: Json) -> str:
    """engram's dynamic tail in a request (either wire format), or "" if it has none."""
    messages = body.get("messages") or []
    found = _TAIL.search(content_text(messages[-1].get("content"))) if messages else None
    return found.group(0).strip() if found else ""


def echo_reply(body: Json) -> FakeReply:
    return FakeReply(text=f"echo: {last_user_text(body)}")


def _content_text(content: Any) -> str:
    """A message's text without engram's dynamic tail (its own text block, or the end of a text)."""
    if isinstance(content, list):
        return "".join(_TAIL.sub("", content_text([block])) for block in content)
    return _TAIL.sub("", content_text(content))


def _output_tokens(reply: FakeReply) -> int:
    tokens = estimate_tokens(reply.text) if reply.text else 0
    tokens += sum(estimate_tokens(name + canonical(args)) for name, args in reply.tool_calls)
    return max(tokens, 1)


# ---------------------------------------------------------------------------------------------------
# Wire formats


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(fmt: WireFormat, status: int) -> Json:
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = f"fake {kind} (status {status})"
    if fmt == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _openai_usage(prompt: PromptUsage, output_tokens: int) -> Json:
    return {
        "prompt_tokens": prompt.prompt_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": prompt.prompt_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": prompt.cache_read_tokens},
    }


def _anthropic_usage(prompt: PromptUsage, output_tokens: int) -> Json:
    return {
        "input_tokens": prompt.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": prompt.cache_write_tokens,
        "cache_read_input_tokens": prompt.cache_read_tokens,
    }


@dataclass(frozen=True)
class BoundReply:
    """A scripted reply bound to the request it answers."""

    reply: FakeReply
    model: str
    serial: int
    prompt: PromptUsage

    @property
    def output_tokens(self) -> int:
        return _output_tokens(self.reply)

    def call_id(self, fmt: WireFormat, index: int) -> str:
        return f"toolu_fake_{self.serial}_{index}" if fmt == "anthropic" else f"call_fake_{self.serial}_{index}"


def openai_json(r: BoundReply) -> Json:
    message: Json = {"role": "assistant", "content": r.reply.text or None}
    if r.reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": r.call_id("openai", i),
                "type": "function",
                "function": {"name": name, "arguments": canonical(args)},
            }
            for i, (name, args) in enumerate(r.reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-fake-{r.serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": r.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(r.reply)}],
        "usage": _openai_usage(r.prompt, r.output_tokens),
    }


def openai_chunks(r: BoundReply, include_usage: bool) -> Iterator[Json | None]:
    """Streamed chunks; None marks a point where a text delta was sent (for fail_after_deltas)."""

    def chunk(delta: Json, finish: str | None = None) -> Json:
        out: Json = {
            "id": f"chatcmpl-fake-{r.serial}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": r.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    yield chunk({"role": "assistant", "content": ""})
    for piece in split_deltas(r.reply.text):
        yield chunk({"content": piece})
        yield None
    for i, (name, args) in enumerate(r.reply.tool_calls):
        head = {"index": i, "id": r.call_id("openai", i), "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        for fragment in _json_fragments(args):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]})
    yield chunk({}, _openai_finish(r.reply))
    if include_usage:
        last = chunk({})
        last["choices"] = []
        last["usage"] = _openai_usage(r.prompt, r.output_tokens)
        yield last


def _openai_finish(reply: FakeReply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def anthropic_json(r: BoundReply) -> Json:
    content: list[Json] = [{"type": "text", "text": r.reply.text}] if r.reply.text else []
    content.extend(
        {"type": "tool_use", "id": r.call_id("anthropic", i), "name": name, "input": args}
        for i, (name, args) in enumerate(r.reply.tool_calls)
    )
    return {
        "id": f"msg_fake_{r.serial}",
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": content,
        "stop_reason": _anthropic_stop(r.reply),
        "stop_sequence": None,
        "usage": _anthropic_usage(r.prompt, r.output_tokens),
    }


def anthropic_events(r: BoundReply) -> Iterator[tuple[str, Json] | None]:
    """(event, data) pairs; None marks a point where a text delta was sent (for fail_after_deltas)."""
    start = anthropic_json(r)
    start.update(content=[], stop_reason=None, usage={**start["usage"], "output_tokens": 1})
    yield "message_start", {"type": "message_start", "message": start}
    index = 0
    if r.reply.text:
        yield "content_block_start", _block_start(index, {"type": "text", "text": ""})
        yield "ping", {"type": "ping"}
        for piece in split_deltas(r.reply.text):
            yield "content_block_delta", _block_delta(index, {"type": "text_delta", "text": piece})
            yield None
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    for i, (name, args) in enumerate(r.reply.tool_calls):
        block = {"type": "tool_use", "id": r.call_id("anthropic", i), "name": name, "input": {}}
        yield "content_block_start", _block_start(index, block)
        for fragment in _json_fragments(args):
            yield "content_block_delta", _block_delta(index, {"type": "input_json_delta", "partial_json": fragment})
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    delta = {"stop_reason": _anthropic_stop(r.reply), "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": r.output_tokens}}
    yield "message_stop", {"type": "message_stop"}


def _block_start(index: int, block: Json) -> Json:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _block_delta(index: int, delta: Json) -> Json:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _anthropic_stop(reply: FakeReply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _json_fragments(args: dict[str, Any]) -> list[str]:
    # Split the arguments' JSON in three so clients must concatenate fragments before parsing.
    raw = canonical(args)
    step = max(len(raw) // 3, 1)
    return [raw[i : i + step] for i in range(0, len(raw), step)]


# ---------------------------------------------------------------------------------------------------
# Embeddings

DEFAULT_EMBEDDING_DIMENSIONS = 64
# Real models answer with their native size when `dimensions` is not given; so does the fake.
NATIVE_EMBEDDING_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def fake_embedding(text: str, dimensions: int = DEFAULT_EMBEDDING_DIMENSIONS) -> list[float]:
    """Hashed bag of words, L2-normalised: each lower-cased word adds ±1 to one hashed bucket."""
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()) or [text]:
        digest = hashlib.sha256(word.encode()).digest()
        bucket = int.from_bytes(digest[:4], "big") % dimensions
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = sum(x * x for x in vector) ** 0.5
    if norm == 0.0:  # the words cancelled out; any fixed unit vector keeps the output valid
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]


def embedding_inputs(body: Json) -> list[str] | str:
    """The texts to embed, or an error message in OpenAI's wording."""
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return "'input' must be a string or a non-empty array of strings (the fake does not take token ids)"
    if any(t == "" for t in texts):
        return "'$.input' is invalid: empty strings cannot be embedded"
    return texts


def openai_embeddings_json(body: Json, texts: list[str]) -> Json:
    model = str(body.get("model", "fake-embedding"))
    dimensions = int(body.get("dimensions") or NATIVE_EMBEDDING_DIMENSIONS.get(model, DEFAULT_EMBEDDING_DIMENSIONS))
    data: list[Json] = []
    for index, text in enumerate(texts):
        vector = fake_embedding(text, dimensions)
        encoded: Any = vector
        if body.get("encoding_format") == "base64":  # the SDK's default: little-endian float32
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(estimate_tokens(text) for text in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
