"""Sending tasks by name, so the gateway never imports task modules (or their dependencies)."""

from __future__ import annotations

from workers.app import app


def enqueue_drain(session_id: int) -> None:
    app.send_task("engram.turns.drain", kwargs={"session_id": session_id}, queue="turns")


def enqueue_embed_memory(memory_id: int) -> None:
    app.send_task("engram.embeddings.embed_memory", kwargs={"memory_id": memory_id}, queue="embeddings")


def enqueue_extraction(session_id: int, token: str, countdown: float) -> None:
    app.send_task(
        "engram.extraction.extract",
        kwargs={"session_id": session_id, "token": token},
        queue="extraction",
        countdown=countdown,
    )


def enqueue_synthesis(tenant_id: int, user_id: int) -> None:
    app.send_task(
        "engram.extraction.synthesize", kwargs={"tenant_id": tenant_id, "user_id": user_id}, queue="extraction"
    )


def enqueue_flush(session_id: int) -> None:
    app.send_task("engram.flush.flush", kwargs={"session_id": session_id}, queue="flush")


def enqueue_compaction(session_id: int) -> None:
    app.send_task("engram.compaction.compact", kwargs={"session_id": session_id}, queue="compaction")


def enqueue_transcript_indexing(session_id: int) -> None:
    app.send_task("engram.embeddings.index_transcript", kwargs={"session_id": session_id}, queue="embeddings")
