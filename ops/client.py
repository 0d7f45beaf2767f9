"""The Python client (clients/python) plus what the CLI and the benchmarks need beyond the memory API: chat
turns, their Server-Sent Events (httpx-sse, a server dependency the client distribution does without), a
session's transcript and context view, and the tenant's agent profile. Answers stay plain JSON (dicts) here;
refusals raise the client's `EngramAPIError`, read by its one error parser."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import engramhq_client
import httpx
from engramhq_client import EngramAPIError
from engramhq_client.core import checked
from httpx_sse import connect_sse

__all__ = ["EngramAPIError", "EngramClient", "TurnEvent", "checked"]


@dataclass
class TurnEvent:
    event: str
    data: dict[str, Any]


class EngramClient(engramhq_client.EngramClient):
    def submit_turn(
        self, session_key: str, user_id: str, text: str, idempotency_key: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        body = {"user_id": user_id, "text": text} | ({"name": name} if name is not None else {})
        return _json(self.http.post(f"/v1/sessions/{session_key}/turns", json=body, headers=headers))

    def update_agent_profile(self, **fields: Any) -> dict[str, Any]:
        """Change the tenant's agent (name, personality, …): an admin key's call."""
        return _json(self.http.patch("/v1/agent-profile", json=fields))

    def get_turn(self, turn_id: int, wait: float = 0) -> dict[str, Any]:
        return _json(self.http.get(f"/v1/turns/{turn_id}", params={"wait": wait}, timeout=wait + 30))

    def events(self, turn_id: int, timeout: float = 300) -> Iterator[TurnEvent]:
        with connect_sse(self.http, "GET", f"/v1/turns/{turn_id}/events", timeout=timeout) as source:
            if source.response.status_code >= 400:
                source.response.read()
                checked(source.response)
            for sse in source.iter_sse():
                if not sse.data:
                    continue
                yield TurnEvent(sse.event, json.loads(sse.data))
                if sse.event in ("done", "error"):
                    return

    def session_context(self, session_key: str, user_id: str) -> dict[str, Any]:
        """What the model sees on the session's next request (`engram context`)."""
        return _json(self.http.get(f"/v1/sessions/{session_key}/context", params={"user_id": user_id}))

    def messages(self, session_key: str, user_id: str) -> dict[str, Any]:
        return _json(self.http.get(f"/v1/sessions/{session_key}/messages", params={"user_id": user_id}))


def _json(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = checked(response).json()
    return body
