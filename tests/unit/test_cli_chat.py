"""`engram chat` ends on /exit and /quit instead of sending them to the model as a message."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ops import chat_cli, cli


@pytest.mark.parametrize("command", ["/exit", "/quit", " /EXIT ", ""])
def test_quit_commands_end_the_chat_without_sending_them(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    sent: list[str] = []
    monkeypatch.setattr(chat_cli, "_connect_client", lambda _url, _key: object())
    monkeypatch.setattr(chat_cli, "_say", lambda _client, _session, _user, text: sent.append(text))
    result = CliRunner().invoke(cli.app, ["chat", "--user", "alice"], input=f"hello\n{command}\nnot sent\n")
    assert result.exit_code == 0, result.output
    assert sent == ["hello"]
    assert "/exit, /quit" in result.output  # the hint says how to leave
