"""`engram import FILE`: conversations from a JSON/JSONL file (an engram export round-trips) into the
running gateway through the message ingest API, safe to run again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ops.cli_support import client_args, fail, load_settings
from ops.import_file import ImportFileError, ImportPlan, read_import_file


def _send(plan: ImportPlan, url: str, key: str, batch_size: int, memories: bool) -> tuple[int, int, int, int]:
    """(messages written, messages already there, memories written, memories refused)."""
    import httpx
    from engramhq_client import EngramAPIError, EngramClient

    written = known = memories_written = memories_refused = 0
    with EngramClient(url, key, timeout=120) as client:
        try:
            client.http.get("/healthz").raise_for_status()
        except httpx.HTTPError:
            fail(f"cannot reach engram at {url}: is `engram up` running?")
        try:
            with typer.progressbar(length=max(plan.message_count, 1), label="messages") as bar:
                for conversation in plan.conversations:
                    for start in range(0, len(conversation.messages), batch_size):
                        batch = conversation.messages[start : start + batch_size]
                        result = client.ingest(conversation.user_id, conversation.session_key, batch)
                        written, known = written + result.new_messages, known + len(batch) - result.new_messages
                        bar.update(len(batch))
            if memories:
                for user_id, bodies in plan.memories.items():
                    for body in bodies:
                        fields = {k: v for k, v in body.items() if k not in ("key", "value")}
                        try:
                            outcome = client.add_memory(user_id, body["key"], body["value"], **fields)
                        except EngramAPIError as exc:
                            if exc.status_code != 422:
                                raise
                            # One memory the write rules refuse (limits, injection patterns) loses no other.
                            typer.secho(f"memory {body['key']!r} refused: {exc.detail}", err=True, dim=True)
                            memories_refused += 1
                            continue
                        memories_written += outcome.action in ("added", "superseded")
        except (EngramAPIError, httpx.HTTPError) as exc:
            fail(
                f"the import stopped ({exc}); what was sent before is stored, and running the same import again "
                "skips it"
            )
    return written, known, memories_written, memories_refused


def import_command(
    file: Annotated[Path, typer.Argument(help="JSON or JSONL: an engram export, or messages")],
    user: Annotated[
        str | None, typer.Option(help="User id for messages that name none (or: import an export as)")
    ] = None,
    session: Annotated[str | None, typer.Option(help="Session key for messages that name none")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Messages per request")] = 100,
    memories: Annotated[bool, typer.Option(help="Also import an export's active memories")] = True,
    url: Annotated[str | None, typer.Option(help="Gateway URL (default http://ENGRAM_HOST:ENGRAM_PORT)")] = None,
    api_key: Annotated[str | None, typer.Option(help="API key (default ENGRAM_API_KEY or the dev key)")] = None,
) -> None:
    """Import conversations into engram (the memory pipeline mines them as if they were chat turns).

    Safe to run again: every message carries an idempotency key, so nothing is stored twice."""
    settings = load_settings()
    try:
        plan = read_import_file(file, user=user, session=session)
    except ImportFileError as exc:
        fail(str(exc))
    if batch_size > settings.ingest_max_messages:
        batch_size = settings.ingest_max_messages
    base, key = client_args(settings, url, api_key)
    typer.echo(
        f"{file}: {plan.message_count} message(s) in {len(plan.conversations)} session(s)"
        + (f", {plan.memory_count} memories" if plan.memory_count and memories else "")
    )
    written, known, memories_written, refused = _send(plan, base, key, batch_size, memories)
    typer.echo(
        f"imported {written} new message(s), {known} already there"
        + (f"; {memories_written} new memories" if plan.memory_count and memories else "")
        + (f", {refused} refused" if refused else "")
    )
