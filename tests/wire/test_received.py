"""The prefix hash of Responses and Messages sessions reads the wire items each neutral message
was made from (`Wire.as_received`): a resent history is trusted as before, a changed item
anywhere in it is not."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.session.rebuild import Rebuild, cover, rebuild
from proxy.session.state import SessionState
from proxy.wire.base import Wire
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.messages.adapter import MessagesWire
from proxy.wire.responses.adapter import ResponsesWire
from tests.wire.messages.messages_cases import SIG, session, tool_result, tool_use

RESPONSES: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be terse."},
    {"role": "user", "content": "list the files"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-opaque"},
    {"type": "function_call", "call_id": "c1", "name": "exec", "arguments": '{"cmd":"ls"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "a.py\nb.py"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "2"}]},
    {"role": "user", "content": "read a.py"},
]
RESPONSES_NEXT: list[dict[str, Any]] = [
    {"type": "function_call", "call_id": "c2", "name": "exec", "arguments": '{"cmd":"cat a"}'},
    {"type": "function_call_output", "call_id": "c2", "output": "print(1)"},
]
MESSAGES_NEXT: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Now c.", "signature": SIG},
            tool_use("toolu_9", file_path="/c.py"),
        ],
    },
    {"role": "user", "content": [tool_result("toolu_9", "C" * 50)]},
]


def body_of(wire: Wire, items: list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(wire, ResponsesWire):
        return {"model": "gpt-5", "input": copy.deepcopy(items), "store": False}
    return {"model": "claude", "system": "You code.", "messages": copy.deepcopy(items)}


def turn(wire: Wire, items: list[dict[str, Any]], state: SessionState | None) -> Rebuild:
    """One request's rebuild, as `proxy.turn.session_turn.Turn.load` makes it (a fresh parse each
    time)."""
    neutral = wire.messages(body_of(wire, items))
    return rebuild(neutral, state, None, wire.as_received(neutral))


def next_turn(
    wire: Wire, first: list[dict[str, Any]], sent: list[dict[str, Any]]
) -> tuple[Rebuild, Rebuild, int]:
    """The rebuild of `sent` after a turn that covered `first`, the rebuild of `sent` with no
    state, and how many messages the first turn covered."""
    before = turn(wire, first, None)
    cover(before)
    return turn(wire, sent, before.state), turn(wire, sent, None), before.state.prefix_len


CASES = [
    pytest.param(ResponsesWire(), RESPONSES, RESPONSES_NEXT, id="responses"),
    pytest.param(MessagesWire(), session(), MESSAGES_NEXT, id="messages"),
]


@pytest.mark.parametrize(("wire", "first", "more"), CASES)
def test_a_resent_history_is_trusted(
    wire: Wire, first: list[dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    after, fresh, n = next_turn(wire, first, [*first, *more])
    assert after.reset_reason is None and after.new_from == n
    assert after.chain._digests[:n] == [None] * n  # the prefix was not hashed again
    assert after.chain.prefix(len(after.messages)) == fresh.chain.prefix(len(fresh.messages))
    # The items are what is hashed, at half the bytes of the neutral messages carrying them.
    assert wire.as_received(after.messages) != after.messages


@pytest.mark.parametrize(("wire", "first", "more"), CASES)
def test_a_changed_item_in_the_prefix_is_not_trusted(
    wire: Wire, first: list[dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    changed = copy.deepcopy(first)
    for item in changed:  # an opaque blob the neutral messages keep only as an item
        if item.get("type") == "reasoning":
            item["encrypted_content"] = "gAAAA-other"
        for block in item.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "thinking":
                block["signature"] = "other"
    after, fresh, n = next_turn(wire, first, [*changed, *more])
    assert after.chain._digests[:n] != [None] * n  # hashed afresh, not trusted
    assert after.chain.prefix(len(after.messages)) == fresh.chain.prefix(len(fresh.messages))


def test_chat_messages_are_hashed_as_they_are() -> None:
    messages = [{"role": "user", "content": "hi", "x_items": ["not the adapter's"]}]
    assert ChatWire().as_received(messages) is messages
