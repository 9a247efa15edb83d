"""The saved form: round trips, the 1.3.0 shape, migration of older saves, clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.conversation import FORMAT_VERSION, Conversation
from proxy.conversation_message import ConversationFormatError, RawOpenAIMessage, SystemPrompt
from tests.support.core_helpers import add_tool_turn, agent_conversation

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def rich_conversation() -> Conversation:
    conversation = agent_conversation(turns=3)
    conversation.set_system_message_content("prompt")
    conversation.add_user_message("look", images=[PNG])
    conversation.set_response_schema({"type": "object"})
    conversation.add_agent_message({"role": "assistant", "content": "ok", "reasoning_content": "r"})
    add_tool_turn(conversation, "call_0_0", "duplicate id " * 30)
    conversation.compact_toolcall(keep_max=2)
    conversation.total_tokens = 4321
    conversation.compaction_counter.toolcall_rounds = 1
    return conversation


def test_dumps_loads_round_trip() -> None:
    conversation = rich_conversation()
    restored = Conversation.loads(conversation.dumps())
    assert restored.dumps() == conversation.dumps()
    assert restored.completion_params() == conversation.completion_params()
    assert restored.total_tokens == 4321
    assert restored.compaction_counter == conversation.compaction_counter


def test_round_trip_keeps_keys_and_originals() -> None:
    conversation = rich_conversation()
    restored = Conversation.loads(conversation.dumps())
    assert restored.reclaimed_keys() == conversation.reclaimed_keys()
    for key in conversation.reclaimed_keys():
        assert restored.compacted_toolcall_result(key) == conversation.compacted_toolcall_result(
            key
        )
    assert [getattr(m, "key", None) for m in restored.messages] == [
        getattr(m, "key", None) for m in conversation.messages
    ]


def test_dump_and_load_a_path(tmp_path: Path) -> None:
    conversation = rich_conversation()
    path = tmp_path / "session.json"
    conversation.dump(path)
    assert Conversation.load(path).dumps() == conversation.dumps()


def test_saved_shape() -> None:
    saved = json.loads(rich_conversation().dumps())
    assert saved["version"] == FORMAT_VERSION
    assert saved["tokens_used"] == 4321
    assert {m["kind"] for m in saved["messages"]} == {"system", "user", "raw"}
    assert set(saved["compaction_counter"]) == {
        "summary_rounds",
        "toolcall_rounds",
        "toolcall_reclaimed",
    }
    assert "call_0_0" in saved["compacted_originals"]


def test_a_1_3_0_save_without_keys_loads_and_assigns_keys() -> None:
    saved = {
        "version": "1.3.0",
        "tokens_used": 10,
        "messages": [
            {"kind": "system", "content": "s", "is_compressed": False, "persist_sections": {}},
            {"kind": "user", "content": "u"},
            {"kind": "raw", "raw": {"role": "tool", "tool_call_id": "a", "content": "1"}},
            {"kind": "raw", "raw": {"role": "tool", "tool_call_id": "a", "content": "2"}},
        ],
    }
    conversation = Conversation.loads(json.dumps(saved))
    assert [getattr(m, "key", None) for m in conversation.messages] == [None, None, "a", "a#2"]
    assert conversation.total_tokens == 10


def test_an_old_save_of_bare_openai_dicts_is_migrated() -> None:
    saved = {
        "tokens_used": 77,
        "messages": [
            {"role": "system", "content": "You are old."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function"}]},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ],
    }
    conversation = Conversation.loads(json.dumps(saved))
    system = conversation.messages[0]
    assert isinstance(system, SystemPrompt) and system.content == "You are old."
    assert all(isinstance(m, RawOpenAIMessage) for m in conversation.messages[1:])
    assert conversation.completion_params() == saved["messages"]
    assert conversation.total_tokens == 77
    assert conversation.messages[-1].key == "a"  # type: ignore[union-attr]


def test_an_old_save_without_a_system_message_is_migrated() -> None:
    saved = {"messages": [{"role": "user", "content": "hi"}]}
    conversation = Conversation.loads(json.dumps(saved))
    assert conversation.completion_params() == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "must be JSON"),
        ("[]", "'messages' list"),
        ('{"messages": {}}', "'messages' list"),
        ('{"messages": [{"kind": "user", "content": "u"}, {"role": "user"}]}', "all be"),
        ('{"messages": [42]}', "all be"),
        ('{"messages": [{"kind": "raw"}]}', "'raw' object"),
        ('{"messages": [{"kind": "mystery"}]}', "unknown saved message kind"),
        ('{"version": "2.0.0", "messages": []}', "newer"),
        ('{"version": 3, "messages": []}', "unreadable"),
        ('{"messages": [], "tokens_used": "many"}', "tokens_used"),
        ('{"messages": [], "compacted_originals": []}', "compacted_originals"),
        ('{"messages": [], "compaction_counter": {"summary_rounds": "x"}}', "integers"),
        ('{"messages": [], "compaction_counter": []}', "must be an object"),
    ],
)
def test_unreadable_saves_raise_a_clear_format_error(text: str, problem: str) -> None:
    with pytest.raises(ConversationFormatError, match=problem) as caught:
        Conversation.loads(text)
    assert isinstance(caught.value, ValueError)


def test_format_error_is_never_a_bare_key_error() -> None:
    saves: list[Any] = [{}, {"messages": [{}]}, {"messages": [{"kind": "raw", "key": "a"}]}]
    for saved in saves:
        with pytest.raises(ConversationFormatError):
            Conversation.loads(json.dumps(saved))
