"""Level 1: old tool results replaced in place by a placeholder, originals kept by key."""

from __future__ import annotations

import pytest

from proxy.compact import PLACEHOLDER_TEMPLATE, placeholder_for
from proxy.conversation import Conversation
from proxy.conversation_message import RawOpenAIMessage
from tests.support.core_helpers import add_tool_turn, agent_conversation

LONG = "result " * 100


def tools(conversation: Conversation) -> list[RawOpenAIMessage]:
    return [
        m for m in conversation.messages if isinstance(m, RawOpenAIMessage) and m.role == "tool"
    ]


def test_placeholder_text_is_byte_exact() -> None:
    assert placeholder_for("call_9") == (
        "[Compacted, ID: call_9. If this content is still needed, call "
        "extract_compacted_tool_result with this ID or re-run the tool.]"
    )
    assert PLACEHOLDER_TEMPLATE.format(key="k") == placeholder_for("k")


def test_old_tool_results_become_placeholders() -> None:
    conversation = Conversation()
    for i in range(3):
        add_tool_turn(conversation, f"c{i}", LONG)
    result = conversation.compact_toolcall(keep_max=1)
    assert result.reclaimed_count == 2
    assert [t.content for t in tools(conversation)] == [
        placeholder_for("c0"),
        placeholder_for("c1"),
        LONG,
    ]


def test_only_replaced_when_the_placeholder_is_shorter() -> None:
    conversation = Conversation()
    short = "x" * len(placeholder_for("a"))
    add_tool_turn(conversation, "a", short)
    add_tool_turn(conversation, "b", short + "y")
    assert conversation.compact_toolcall(keep_max=0).reclaimed_count == 1
    assert [t.content for t in tools(conversation)] == [short, placeholder_for("b")]


def test_keep_max_counts_only_tool_messages() -> None:
    conversation = agent_conversation(turns=4, calls_per_turn=1)
    conversation.compact_toolcall(keep_max=2)
    contents = [t.content for t in tools(conversation)]
    assert contents[:2] == [placeholder_for("call_0_0"), placeholder_for("call_1_0")]
    assert all(c.startswith(("2/0:", "3/0:")) for c in contents[2:])


def test_keep_max_zero_reclaims_every_tool_result() -> None:
    conversation = agent_conversation(turns=2)
    assert conversation.compact_toolcall(keep_max=0).reclaimed_count == 4


def test_negative_keep_max_is_rejected() -> None:
    with pytest.raises(ValueError):
        Conversation().compact_toolcall(keep_max=-1)


def test_replacement_is_in_place_and_keeps_other_fields() -> None:
    conversation = Conversation()
    message = conversation.append(
        RawOpenAIMessage({"role": "tool", "tool_call_id": "a", "name": "lookup", "content": LONG})
    )
    conversation.compact_toolcall(keep_max=0)
    assert conversation.messages[0] is message
    assert message.raw == {
        "role": "tool",
        "tool_call_id": "a",
        "name": "lookup",
        "content": placeholder_for("a"),
    }


def test_reclaiming_never_changes_the_callers_dict() -> None:
    param = {"role": "tool", "tool_call_id": "a", "content": LONG}
    conversation = Conversation([RawOpenAIMessage(param)])
    conversation.compact_toolcall(keep_max=0)
    assert param["content"] == LONG


def test_originals_are_returned_byte_identical() -> None:
    text = " ünïcode \r\n\ttrailing  " * 20
    parts = [{"type": "text", "text": "part " * 50}]
    conversation = Conversation()
    add_tool_turn(conversation, "s", text)
    conversation.append(RawOpenAIMessage({"role": "tool", "tool_call_id": "p", "content": parts}))
    conversation.compact_toolcall(keep_max=0)
    assert conversation.compacted_toolcall_result("s") == text
    assert conversation.compacted_toolcall_result("p") == parts


def test_unknown_key_has_no_original() -> None:
    assert Conversation().compacted_toolcall_result("nope") is None


def test_duplicate_tool_call_ids_are_both_retrievable() -> None:
    conversation = Conversation()
    add_tool_turn(conversation, "dup", "first " * 50)
    add_tool_turn(conversation, "dup", "second " * 50)
    conversation.compact_toolcall(keep_max=0)
    assert conversation.reclaimed_keys() == ["dup", "dup#2"]
    assert conversation.compacted_toolcall_result("dup") == "first " * 50
    assert conversation.compacted_toolcall_result("dup#2") == "second " * 50
    assert tools(conversation)[1].content == placeholder_for("dup#2")


def test_already_reclaimed_results_are_skipped() -> None:
    conversation = agent_conversation(turns=2)
    first = conversation.compact_toolcall(keep_max=1)
    again = conversation.compact_toolcall(keep_max=1)
    assert (first.reclaimed_count, again.reclaimed_count) == (3, 0)
    assert again.reclaimed_fraction == 0.0
    assert conversation.compaction_counter.toolcall_reclaimed == 3


def test_reclaimed_fraction_is_of_the_estimated_length() -> None:
    conversation = agent_conversation(turns=2)
    before = conversation.estimated_message_length()
    result = conversation.compact_toolcall(keep_max=0)
    after = conversation.estimated_message_length()
    assert result.reclaimed_fraction == pytest.approx((before - after) / before)
    assert 0 < result.reclaimed_fraction < 1


def test_empty_conversation_reclaims_nothing() -> None:
    result = Conversation().compact_toolcall()
    assert (result.reclaimed_count, result.reclaimed_fraction) == (0, 0.0)


def test_compact_toolcall_does_not_count_rounds() -> None:
    conversation = agent_conversation(turns=2)
    conversation.compact_toolcall(keep_max=0)
    assert conversation.compaction_counter.toolcall_rounds == 0


def test_reclaim_by_key_replaces_just_those_results() -> None:
    conversation = agent_conversation(turns=2)
    assert conversation.reclaim(["call_1_0", "unknown"]) == 1
    assert [t.key for t in tools(conversation) if t.content == placeholder_for(t.key or "")] == [
        "call_1_0"
    ]
    assert conversation.compaction_counter.toolcall_reclaimed == 0


def test_reclaim_by_key_keeps_the_only_if_shorter_rule() -> None:
    conversation = Conversation()
    add_tool_turn(conversation, "a", "short")
    assert conversation.reclaim(["a"]) == 0
    assert tools(conversation)[0].content == "short"


def test_result_converts_to_a_dict() -> None:
    result = agent_conversation().compact_toolcall(keep_max=0)
    assert set(result.to_dict()) == {"reclaimed_count", "reclaimed_fraction"}
