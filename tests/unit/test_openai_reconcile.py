"""Reconciling a resent OpenAI-style history with what engram already has, and closing tool calls a
caller never answered."""

from __future__ import annotations

from shared.agent import UNANSWERED_CALL, answer_unanswered_calls
from shared.llm.types import ChatMessage, ToolCall
from shared.turns.openai_compat import ClientCall, ClientMessage, default_session_key, new_messages


def user(text: str) -> ClientMessage:
    return ClientMessage("user", text)


def assistant(text: str, *calls: str) -> ClientMessage:
    return ClientMessage("assistant", text, tuple(ClientCall(c, "f", {}) for c in calls))


def test_the_whole_history_resent_adds_only_the_last_message() -> None:
    seen = [user("a"), assistant("A"), user("b"), assistant("B")]
    assert new_messages(seen, [*seen, user("c")]) == [user("c")]


def test_a_sliding_window_or_only_the_newest_message() -> None:
    seen = [user("a"), assistant("A"), user("b"), assistant("B")]
    assert new_messages(seen, [user("b"), assistant("B"), user("c")]) == [user("c")]
    assert new_messages(seen, [user("c")]) == [user("c")]


def test_a_repeated_message_after_a_reply_is_new() -> None:
    seen = [user("yes"), assistant("ok")]
    assert new_messages(seen, [user("yes")]) == [user("yes")]
    assert new_messages(seen, [user("yes"), assistant("ok"), user("yes")]) == [user("yes")]


def test_a_conversation_from_elsewhere_is_new_as_a_whole() -> None:
    sent = [user("x"), assistant("X"), user("y")]
    assert new_messages([], sent) == sent
    assert new_messages([user("a"), assistant("A")], sent) == sent


def test_tool_results_follow_the_call_that_ended_the_turn() -> None:
    seen = [user("weather?"), assistant("checking", "call_1")]
    result = ClientMessage("tool", "sunny", tool_call_id="call_1")
    assert new_messages(seen, [user("weather?"), assistant("checking", "call_1"), result]) == [result]
    # Assistant text compares without surrounding whitespace; call ids must match.
    assert new_messages(seen, [user("weather?"), assistant("checking \n", "call_1"), result]) == [result]
    assert new_messages(seen, [user("weather?"), assistant("checking", "call_2"), result])[0] == user("weather?")


def test_default_session_key_is_a_valid_key_per_model() -> None:
    assert default_session_key("gpt-4o") == "openai-gpt-4o"
    assert default_session_key("meta-llama/Llama 3") == "openai-meta-llama-Llama-3"
    assert len(default_session_key("m" * 500)) == 128


def test_unanswered_client_calls_get_an_error_result_before_the_next_message() -> None:
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    history = [
        ChatMessage("user", "weather?"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("user", "never mind"),
    ]
    closed = answer_unanswered_calls(history)
    assert [m.role for m in closed] == ["user", "assistant", "tool", "user"]
    assert closed[2].tool_call_id == "call_1" and closed[2].is_error and closed[2].content == UNANSWERED_CALL
    answered = [*history[:2], ChatMessage("tool", "sunny", tool_call_id="call_1"), history[2]]
    assert answer_unanswered_calls(answered) == answered
