"""Pure parts of message ingest."""

from __future__ import annotations

from shared.agent import _row_to_message


def test_an_ingested_tool_message_reaches_the_model_as_text() -> None:
    # No tool_call_id: it answers no call of ours, and providers refuse such a tool result.
    message = _row_to_message(
        {"role": "tool", "content": '{"weather": "sunny"}', "tool_calls": None, "tool_results": None, "name": "weather"}
    )
    assert message.role == "user" and message.content == '[weather result]\n{"weather": "sunny"}'
    own = _row_to_message(
        {
            "role": "tool",
            "content": "ok",
            "tool_calls": None,
            "tool_results": {"tool_call_id": "call_1", "name": "memory_store"},
            "name": None,
        }
    )
    assert own.role == "tool" and own.tool_call_id == "call_1"
