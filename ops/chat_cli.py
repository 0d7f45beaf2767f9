"""`engram chat`, `engram demo` and `engram context`: the commands that talk to a running gateway as a
user would, through the HTTP client."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from ops.cli_support import KeyOpt, UrlOpt, client_args, fail, load_settings

if TYPE_CHECKING:  # the HTTP client loads only when one of these commands runs
    from ops.client import EngramClient


def _say(client: EngramClient, session: str, user: str, text: str) -> None:
    from ops.client import EngramAPIError

    try:
        turn = client.submit_turn(session, user, text)
        typer.echo("engram> ", nl=False)
        for event in client.events(turn["turn_id"]):
            if event.event == "delta":
                typer.echo(event.data["text"], nl=False)
            elif event.event == "reset":
                typer.echo("\n(retrying) engram> ", nl=False)
            elif event.event == "tool_call":
                typer.secho(f"[{event.data['name']}…] ", nl=False, dim=True)
            elif event.event == "error":
                typer.secho(f"\nturn failed: {event.data.get('error')}", fg=typer.colors.RED)
        typer.echo("")
    except EngramAPIError as exc:
        typer.secho(f"request refused: {exc}", fg=typer.colors.RED, err=True)


def _connect_client(url: str | None, api_key: str | None) -> EngramClient:
    import httpx

    from ops.client import EngramClient

    settings = load_settings()
    base, key = client_args(settings, url, api_key)
    client = EngramClient(base, key)
    try:
        client.http.get("/healthz").raise_for_status()
    except httpx.HTTPError:
        fail(f"cannot reach engram at {base}: is `engram up` running?")
    return client


# Typed alone on a line, these end `engram chat` instead of being sent as a message.
QUIT_COMMANDS = frozenset({"/exit", "/quit"})


def chat(
    user: Annotated[str, typer.Option(help="Your user id")],
    session: Annotated[str | None, typer.Option(help="Session key (default: cli-<user>)")] = None,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Chat interactively with the running gateway (/exit, /quit, an empty line or Ctrl-D quits)."""
    client = _connect_client(url, api_key)
    session_key = session or f"cli-{user}"
    typer.echo(f"chatting as {user} in session {session_key}; /exit, /quit, an empty line or Ctrl-D quits")
    while True:
        try:
            text = input("you> ")
        except (EOFError, KeyboardInterrupt):
            typer.echo("")
            break
        if not text.strip() or text.strip().lower() in QUIT_COMMANDS:
            break
        _say(client, session_key, user, text)


DEMO_SCRIPT = (
    "Hi! My name is Alice and I live in Lisbon.",
    "What time is it?",
    "I prefer green tea over coffee, and call me Ali.",
    "What do you remember about me?",
)


def demo(
    user: Annotated[str, typer.Option(help="User id for the demo")] = "demo-alice",
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Run a short scripted conversation against the running gateway and print each reply."""
    client = _connect_client(url, api_key)
    session_key = f"demo-{int(time.time())}"
    typer.echo(f"demo: session {session_key} as user {user}")
    for index, text in enumerate(DEMO_SCRIPT):
        if index == len(DEMO_SCRIPT) - 1:
            _wait_for_memories(client, user, session_key)
        typer.echo(f"you> {text}")
        _say(client, session_key, user, text)


def _wait_for_memories(client: EngramClient, user: str, session_key: str, timeout: float = 60) -> None:
    """Extraction runs in the background a few seconds after the last turn: wait until the session's memory
    status says it is done (every message mined, every memory embedded), then count everything the user has
    stored, in every namespace (a name and a city are `entity/default`, not `tacit`)."""
    typer.secho("(waiting for background memory extraction…)", dim=True)
    status_url = f"/v1/users/{user}/sessions/{session_key}/memory-status"
    deadline = time.monotonic() + timeout
    status: dict[str, object] = {}
    while time.monotonic() < deadline:
        response = client.http.get(status_url)
        if response.status_code == 200:
            status = response.json()
            if status.get("idle"):
                break
        time.sleep(0.5)  # the status endpoint is polled (it has no long-poll); the condition is the real one
    else:
        typer.secho(f"(extraction not finished after {timeout:.0f}s; continuing)", dim=True)
    stored = client.http.get(f"/v1/users/{user}/memories", params={"limit": 500})
    if stored.status_code != 200:
        return
    total, created = len(stored.json()), status.get("memories_created", 0)
    earlier = f", {created} of them from this conversation" if created != total else ""
    typer.secho(f"({total} memories stored for {user}{earlier})", dim=True)


def context(
    user: Annotated[str, typer.Argument(help="User id")],
    session: Annotated[str, typer.Argument(help="Session key")],
    full: Annotated[bool, typer.Option(help="Print every section's text")] = False,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show what the model would see on the session's next request."""
    from ops.client import EngramAPIError

    client = _connect_client(url, api_key)
    try:
        view = client.session_context(session, user)
    except EngramAPIError as exc:
        fail(str(exc))
    if not view.get("session_exists", True):
        typer.secho(
            f"{user} has no session {session!r} yet: this is what its first request would contain "
            f"(plus the first message); chat with `engram chat --user {user} --session {session}`",
            dim=True,
        )
    typer.echo(f"{view['model']}  persona: {view['persona_source']}  tokenizer: {view['tokenizer']}")
    for part in ("static", "dynamic"):
        typer.secho(f"\n{part} ({view['tokens'][part]} tokens)", bold=True)
        for section in view[part]:
            typer.echo(f"  {section['tokens']:>6}  {section['name']}")
            if full:
                typer.echo("        " + section["text"].replace("\n", "\n        "))
    typer.secho(f"\nmessages: {view['messages']} ({view['tokens']['messages']} tokens)", bold=True)
    typer.echo(f"pruning: {view['pruning']['summary'] or 'none'}")
    typer.secho("steering:", bold=True)
    for item in view["steering"] or [{"name": "none", "reason": "no generator fired"}]:
        typer.echo(f"  {item['name']}: {item['reason']}")
    if view["integrity_problems"]:
        typer.secho("integrity problems: " + "; ".join(view["integrity_problems"]), fg=typer.colors.RED)
