"""Smoke test of the core API: build, reclaim, summarise, save and load."""

from proxy.compact import NOTHING_TO_CONDENSE, SUCCESS
from proxy.conversation import Conversation


def test_build_reclaim_summarise_round_trip() -> None:
    conversation = Conversation()
    conversation.add_user_message("hi")
    for _ in range(3):
        call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        conversation.add_agent_message({"role": "assistant", "tool_calls": [call]})
        conversation.add_tool_result("a", "x" * 500)
    assert conversation.compact_toolcall(1).reclaimed_count == 2
    assert conversation.compact(lambda _: "summary", 2).status is SUCCESS
    assert conversation.compact(lambda _: "summary", 10).status is NOTHING_TO_CONDENSE
    assert Conversation.loads(conversation.dumps()).dumps() == conversation.dumps()
