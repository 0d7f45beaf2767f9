"""Sending tasks by name, so the gateway never imports task modules (or their dependencies)."""

from __future__ import annotations

from workers.app import app


def enqueue_drain(session_id: int) -> None:
    app.send_task("engram.turns.drain", kwargs={"session_id": session_id}, queue="turns")


def enqueue_embed_memory(memory_id: int) -> None:
    app.send_task("engram.embeddings.embed_memory", kwargs={"memory_id": memory_id}, queue="embeddings")
