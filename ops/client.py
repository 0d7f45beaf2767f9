"""A small HTTP client for the engram API, used by `engram chat`, `engram demo` and benchmarks."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import connect_sse


class EngramAPIError(RuntimeError):
    pass


@dataclass
class TurnEvent:
    event: str
    data: dict[str, Any]


class EngramClient:
    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )

    def close(self) -> None:
        self.http.close()

    def _check(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise EngramAPIError(f"{response.status_code}: {detail}")
        return response.json()

    def submit_turn(
        self, session_key: str, user_id: str, text: str, idempotency_key: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        body = {"user_id": user_id, "text": text} | ({"name": name} if name is not None else {})
        return self._check(self.http.post(f"/v1/sessions/{session_key}/turns", json=body, headers=headers))

    def update_agent_profile(self, **fields: Any) -> dict[str, Any]:
        """Change the tenant's agent (name, personality, …): an admin key's call."""
        return self._check(self.http.patch("/v1/agent-profile", json=fields))

    def get_turn(self, turn_id: int, wait: float = 0) -> dict[str, Any]:
        return self._check(self.http.get(f"/v1/turns/{turn_id}", params={"wait": wait}, timeout=wait + 30))

    def events(self, turn_id: int, timeout: float = 300) -> Iterator[TurnEvent]:
        with connect_sse(self.http, "GET", f"/v1/turns/{turn_id}/events", timeout=timeout) as source:
            if source.response.status_code >= 400:
                source.response.read()
                self._check(source.response)
            for sse in source.iter_sse():
                if not sse.data:
                    continue
                yield TurnEvent(sse.event, json.loads(sse.data))
                if sse.event in ("done", "error"):
                    return

    def context(self, session_key: str, user_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/v1/sessions/{session_key}/context", params={"user_id": user_id}))

    def messages(self, session_key: str, user_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/v1/sessions/{session_key}/messages", params={"user_id": user_id}))
