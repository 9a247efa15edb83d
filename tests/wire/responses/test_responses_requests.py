"""Bodies the proxy writes in the Responses API: a rebuilt turn's instructions and input with
the summary placed, and summary requests and replies carried over the Responses API."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compact import format_compacted_summary
from proxy.compaction.summarizer import _shrink
from proxy.session.fingerprint import PrefixChain
from proxy.session.rebuild import Outgoing, rebuild
from proxy.session.state import SessionState
from proxy.wire.responses.bodies import (
    summary_item,
    summary_reply,
    summary_request,
    upstream_input,
)
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import X_ITEMS, items_to_messages

DEV = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA\u00e9"}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "x" * 400}
ANSWER = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}
ITEMS: list[Any] = [
    DEV,
    {"role": "user", "content": "first " * 50},
    REASONING,
    CALL,
    OUTPUT,
    ANSWER,
    {"role": "user", "content": "second"},
    {"type": "item_reference", "id": "msg_0"},
]


def test_without_a_summary_the_input_is_the_items() -> None:
    messages = items_to_messages(ITEMS)
    out = Outgoing(messages, messages[:1], None, messages[1:])
    instructions, items = upstream_input(out, "client instructions")
    assert instructions == "client instructions"
    assert all(a is b for a, b in zip(items, ITEMS, strict=True))


def rebuilt_with_summary() -> Outgoing:
    messages = items_to_messages(ITEMS)
    cut = 4  # the tail starts at the answer
    state = SessionState(
        summary="what happened", cut=cut, cut_hash=PrefixChain(messages).prefix(cut)
    )
    return rebuild(messages, state).outgoing()


@pytest.mark.parametrize(
    ("instructions", "expected_instructions", "summary_at"),
    [
        ("client instructions", "client instructions\n\n{summary}", None),
        (None, None, 1),
        ("", "", 1),
        ("  ", "  ", 1),
    ],
)
def test_the_summary_goes_after_the_clients_instructions(
    instructions: Any, expected_instructions: Any, summary_at: int | None
) -> None:
    out = rebuilt_with_summary()
    summary = format_compacted_summary("what happened")
    assert out.summary == summary
    sent_instructions, items = upstream_input(out, instructions)
    if isinstance(expected_instructions, str):
        expected_instructions = expected_instructions.format(summary=summary)
    assert sent_instructions == expected_instructions
    tail = ITEMS[5:]
    if summary_at is None:
        assert items == [DEV, *tail]
    else:
        assert items == [DEV, summary_item(summary), *tail]
    assert items[0] is DEV  # the client's own system item, verbatim


def test_summary_request_carries_the_items_verbatim() -> None:
    messages = items_to_messages(ITEMS)
    chat_body = {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Summarise."},
            *messages[1:7],
            {"role": "user", "content": "Now the summary."},
        ],
        "stream": False,
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "tool_choice": "none",
    }
    body = summary_request(chat_body, instructions="client instructions")
    assert body == {
        "model": "gpt-test",
        "input": [
            {
                "type": "message",
                "role": "system",
                "content": [{"type": "input_text", "text": "Summarise."}],
            },
            *ITEMS[1:8],
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Now the summary."}],
            },
        ],
        "store": False,
        "instructions": "client instructions",
        "stream": False,
        "tools": chat_body["tools"],
        "tool_choice": "none",
    }
    assert body["input"][2] is REASONING


def test_summary_request_for_another_model_leaves_reasoning_out() -> None:
    messages = items_to_messages(ITEMS)
    body = summary_request({"model": "other", "messages": messages[1:]}, keep_reasoning=False)
    assert body["input"] == [
        ITEMS[1],
        {k: v for k, v in CALL.items() if k != "id"},
        OUTPUT,
        {k: v for k, v in ANSWER.items() if k != "id"},
        ITEMS[6],
        ITEMS[7],  # a reference is nothing without its id
    ]
    assert "instructions" not in body and body["store"] is False


def test_text_the_summariser_shortened_is_sent_shortened() -> None:
    messages = items_to_messages(ITEMS)
    shrunk = [_shrink(m, 40) for m in messages[1:6]]
    assert [m is n for m, n in zip(shrunk, messages[1:6], strict=True)] == [
        False,  # the long user turn
        True,  # the assistant's call (no long text)
        False,  # the long tool output
        True,
        True,
    ]
    items = summary_request({"model": "m", "messages": shrunk})["input"]
    assert items[0] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": shrunk[0]["content"]}],
    }
    assert items[1:3] == [REASONING, CALL]
    assert items[3] == {**OUTPUT, "output": shrunk[2]["content"]}
    assert items[4:] == ITEMS[5:7]


def test_a_shortened_assistant_message_is_sent_as_new_items() -> None:
    long_answer = {**ANSWER, "content": [{"type": "output_text", "text": "y" * 300}]}
    messages = items_to_messages(
        [{"role": "user", "content": "q"}, REASONING, CALL, OUTPUT, long_answer]
    )
    shrunk = _shrink(messages[3], 40)
    assert X_ITEMS in shrunk
    items = summary_request({"model": "m", "messages": [shrunk]})["input"]
    assert items == [{"type": "message", "role": "assistant", "content": shrunk["content"]}]
    assert messages_to_items([messages[3]]) == [long_answer]  # only the summary request changes


@pytest.mark.parametrize(
    ("reply", "content", "usage"),
    [
        (
            {
                "id": "resp_1",
                "model": "gpt-test",
                "output": [REASONING, ANSWER, {**ANSWER, "content": "more"}],
                "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
            },
            "done\nmore",
            {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        ),
        (
            {"id": "resp_2", "output": [REASONING]},
            "",
            {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
        ),
        (
            {"output": "junk", "usage": 3},
            "",
            {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
        ),
    ],
)
def test_summary_reply(reply: dict[str, Any], content: str, usage: dict[str, Any]) -> None:
    completion = summary_reply(reply)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": content}
    assert completion["usage"] == usage


@pytest.mark.parametrize("store", [False, None, True])
def test_a_continuation_never_sends_back_reasoning_it_cannot_look_up(store: bool | None) -> None:
    """After a hidden extract round the proxy sends the round's output back. With `store:
    false` and no `include` the reasoning came without `encrypted_content`: the provider
    could not find it (404), so it is left out, with the ids that point at it."""
    from proxy.wire.base import Round
    from proxy.wire.responses.adapter import ResponsesWire

    bare = {"type": "reasoning", "id": "rs_9", "summary": []}
    call = {"type": "function_call", "id": "fc_9", "call_id": "x9", "name": "f", "arguments": "{}"}
    body: dict[str, Any] = {"model": "m", "input": [{"role": "user", "content": "hi"}]}
    if store is not None:
        body["store"] = store
    rnd = Round(message={}, usage=None, only_extract=True, raw={"output": [bare, call]})
    answer = {"role": "tool", "tool_call_id": "x9", "content": "42"}
    sent = ResponsesWire().continue_body(body, rnd, [answer])["input"]
    if store is False:
        assert sent[1:] == [
            {k: v for k, v in call.items() if k != "id"},
            {"type": "function_call_output", "call_id": "x9", "output": "42"},
        ]
    else:  # the provider holds the items: they go back as they came
        assert sent[1:3] == [bare, call]
    # Reasoning with its encrypted content always goes back byte for byte.
    rnd.raw = {"output": [REASONING, call]}
    assert ResponsesWire().continue_body(body, rnd, [answer])["input"][1:3] == [REASONING, call]
