"""Conversation building methods: system prompt, user/agent/tool messages, pops, clear."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from proxy.conversation import Conversation
from proxy.conversation_message import RawOpenAIMessage, SystemPrompt, UserMessage
from tests.support.core_helpers import add_tool_turn, assistant_calling


def test_set_system_message_content_inserts_at_index_zero() -> None:
    conversation = Conversation()
    conversation.add_user_message("hi")
    conversation.set_system_message_content("Be brief.")
    assert conversation.completion_params()[0] == {"role": "system", "content": "Be brief."}


def test_set_system_message_content_replaces_and_keeps_sections() -> None:
    conversation = Conversation()
    conversation.set_persistent_section("agents", "AGENTS.md")
    conversation.set_system_message_content("old")
    conversation.set_system_message_content("new", is_compressed=True)
    system = conversation.messages[0]
    assert isinstance(system, SystemPrompt)
    assert (system.content, system.is_compressed) == ("new", True)
    assert system.persist_sections == {"agents": "AGENTS.md"}
    assert len(conversation.messages) == 1


def test_set_persistent_section_writes_and_empty_deletes() -> None:
    conversation = Conversation()
    conversation.set_persistent_section("a", "one")
    conversation.set_persistent_section("b", "two")
    conversation.set_persistent_section("a", "")
    assert conversation.completion_params() == [{"role": "system", "content": "two"}]


def test_deleting_a_section_without_a_system_prompt_does_nothing() -> None:
    conversation = Conversation()
    conversation.set_persistent_section("a", "")
    assert conversation.messages == []


def test_add_user_message_with_images_makes_parts() -> None:
    conversation = Conversation()
    conversation.add_user_message("see", images=["https://x.test/i.png"])
    assert conversation.completion_params()[0]["content"][1]["type"] == "image_url"


def test_set_response_schema_attaches_a_dict_to_the_last_user_message() -> None:
    conversation = Conversation()
    message = conversation.add_user_message("Give JSON.")
    conversation.set_response_schema({"type": "object"})
    assert message.response_schema == {"type": "object"}


def test_set_response_schema_accepts_a_pydantic_model() -> None:
    class Answer(pydantic.BaseModel):
        value: int

    conversation = Conversation()
    message = conversation.add_user_message("Give JSON.")
    conversation.set_response_schema(Answer)
    assert message.response_schema == Answer.model_json_schema()


def test_set_response_schema_raises_when_last_message_is_not_user() -> None:
    conversation = Conversation()
    conversation.add_user_message("hi")
    conversation.add_agent_message({"role": "assistant", "content": "hello"})
    with pytest.raises(ValueError, match="last message to be a user message"):
        conversation.set_response_schema({"type": "object"})


def test_set_response_schema_raises_on_an_empty_conversation() -> None:
    with pytest.raises(ValueError):
        Conversation().set_response_schema({"type": "object"})


def test_set_response_schema_on_a_raw_user_message_keeps_its_fields() -> None:
    conversation = Conversation()
    conversation.append(RawOpenAIMessage({"role": "user", "content": "hi", "name": "ana"}))
    conversation.set_response_schema({"type": "object"})
    last = conversation.messages[-1]
    assert isinstance(last, UserMessage) and last.response_schema == {"type": "object"}
    assert last.completion_param()["name"] == "ana"


def test_add_agent_message_drops_empty_tool_calls() -> None:
    conversation = Conversation()
    message = conversation.add_agent_message(
        {"role": "assistant", "content": "x", "tool_calls": []}
    )
    assert "tool_calls" not in message.completion_param()


def test_add_agent_message_keeps_real_tool_calls_and_reasoning() -> None:
    conversation = Conversation()
    param = assistant_calling("a", reasoning_content="thinking\n")
    assert conversation.add_agent_message(param).completion_param() == param


def test_add_agent_message_accepts_sdk_objects() -> None:
    class SdkMessage:
        def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
            return {"role": "assistant", "content": "hi"}

    assert Conversation().add_agent_message(SdkMessage()).raw == {
        "role": "assistant",
        "content": "hi",
    }


def test_add_tool_result_stores_a_tool_message() -> None:
    conversation = Conversation()
    message = conversation.add_tool_result("call_1", "42")
    assert message.completion_param() == {"role": "tool", "tool_call_id": "call_1", "content": "42"}


def test_add_tool_result_uses_value_str() -> None:
    class Result:
        def value_str(self) -> str:
            return "rendered"

    assert Conversation().add_tool_result("a", Result()).content == "rendered"


def test_add_tool_result_reports_a_serialisation_failure() -> None:
    class Broken:
        def value_str(self) -> str:
            raise RuntimeError("boom")

    content = Conversation().add_tool_result("a", Broken()).content
    assert content == "[Error] Failed to serialize tool result: RuntimeError: boom"


def test_add_tool_result_reports_an_unserialisable_object() -> None:
    content = Conversation().add_tool_result("a", object()).content
    assert content.startswith("[Error] Failed to serialize")


def test_append_keeps_the_object_and_its_preset_key() -> None:
    conversation = Conversation()
    message = RawOpenAIMessage({"role": "tool", "tool_call_id": "a", "content": "x"}, key="a#7")
    assert conversation.append(message) is message
    assert conversation.messages[-1] is message and message.key == "a#7"


def test_repeated_tool_call_ids_get_distinct_keys() -> None:
    conversation = Conversation()
    keys = [conversation.add_tool_result("a", "x").key for _ in range(3)]
    appended = conversation.append(RawOpenAIMessage({"role": "tool", "tool_call_id": "a"}))
    assert [*keys, appended.key] == ["a", "a#2", "a#3", "a#4"]


def test_keys_avoid_ids_of_stored_originals() -> None:
    conversation = Conversation()
    add_tool_turn(conversation, "a", "x" * 500)
    conversation.compact_toolcall(keep_max=0)
    del conversation.messages[:]
    assert conversation.add_tool_result("a", "y").key == "a#2"


def test_non_tool_messages_get_no_key() -> None:
    message = Conversation().add_agent_message({"role": "assistant", "content": "x"})
    assert message.key is None


def test_pop_last_message_if_user_pops_a_user_message() -> None:
    conversation = Conversation()
    message = conversation.add_user_message("hi")
    assert conversation.pop_last_message_if_user() is message
    assert conversation.messages == []


def test_pop_last_message_if_user_leaves_other_messages() -> None:
    conversation = Conversation()
    conversation.add_user_message("hi")
    conversation.add_agent_message({"role": "assistant", "content": "hello"})
    assert conversation.pop_last_message_if_user() is None
    assert len(conversation.messages) == 2


def _retry_conversation() -> Conversation:
    conversation = Conversation()
    conversation.add_user_message("first")
    conversation.add_agent_message({"role": "assistant", "content": "one"})
    conversation.add_user_message("second")
    add_tool_turn(conversation, "a", "r")
    conversation.add_agent_message({"role": "assistant", "content": "two"})
    return conversation


def test_pop_from_last_user_message_inclusive_pops_the_user_message_too() -> None:
    conversation = _retry_conversation()
    popped = conversation.pop_from_last_user_message(inclusive=True)
    assert [m.role for m in popped] == ["user", "assistant", "tool", "assistant"]
    assert [m.role for m in conversation.messages] == ["user", "assistant"]


def test_pop_from_last_user_message_exclusive_keeps_the_user_message() -> None:
    conversation = _retry_conversation()
    popped = conversation.pop_from_last_user_message(inclusive=False)
    assert [m.role for m in popped] == ["assistant", "tool", "assistant"]
    assert conversation.completion_params()[-1] == {"role": "user", "content": "second"}


def test_pop_from_last_user_message_without_user_pops_nothing() -> None:
    conversation = Conversation()
    conversation.add_agent_message({"role": "assistant", "content": "x"})
    assert conversation.pop_from_last_user_message() == []
    assert len(conversation.messages) == 1


def test_clear_keeps_only_the_system_message_and_resets_state() -> None:
    conversation = _retry_conversation()
    conversation.set_system_message_content("sys")
    add_tool_turn(conversation, "b", "x" * 500)
    conversation.compact_toolcall(keep_max=0)
    conversation.total_tokens = 1234
    conversation.compaction_counter.summary_rounds = 3
    conversation.compaction_counter.toolcall_rounds = 2
    conversation.clear()
    assert conversation.completion_params() == [{"role": "system", "content": "sys"}]
    assert conversation.total_tokens is None
    assert conversation.compaction_counter.to_dict() == {
        "summary_rounds": 0,
        "toolcall_rounds": 0,
        "toolcall_reclaimed": 0,
    }
    assert conversation.reclaimed_keys() == []
    assert conversation.compacted_toolcall_result("b") is None


def test_estimated_message_length_sums_text_fields() -> None:
    conversation = Conversation()
    conversation.set_system_message_content("12345")
    conversation.add_user_message("abc")
    conversation.add_agent_message({"role": "assistant", "content": "de", "reasoning": "fgh"})
    conversation.add_agent_message(assistant_calling("a"))
    assert conversation.estimated_message_length() == 13


def test_to_history_gives_role_and_text_records() -> None:
    conversation = Conversation()
    conversation.add_user_message("hi", images=["https://x.test/i.png"])
    conversation.add_agent_message(assistant_calling("a"))
    assert conversation.to_history() == [
        {"role": "user", "content": "hi\n[image]"},
        {"role": "assistant", "content": "[tool call] lookup({})"},
    ]


def test_to_history_truncates_long_text() -> None:
    conversation = Conversation()
    conversation.add_user_message("x" * 2000)
    assert len(conversation.to_history(truncate=True)[0]["content"]) == 1003
    assert len(conversation.to_history()[0]["content"]) == 2000


def test_content_to_text_is_available_on_the_class() -> None:
    assert Conversation.content_to_text([{"type": "text", "text": "a"}]) == "a"


def test_constructor_appends_messages_with_keys() -> None:
    tool = RawOpenAIMessage({"role": "tool", "tool_call_id": "a", "content": "x"})
    conversation = Conversation([tool, RawOpenAIMessage({"role": "tool", "tool_call_id": "a"})])
    assert [m.key for m in conversation.messages if isinstance(m, RawOpenAIMessage)] == ["a", "a#2"]
