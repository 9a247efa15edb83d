"""Anthropic Messages <-> neutral messages: mapping, round trip, compaction, repairs."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.compact import placeholder_for
from proxy.conversation_message import message_chars
from proxy.session.extract_tool import answer, split_calls
from proxy.session.history import UnrecognisedHistory, validate
from proxy.session.rebuild import apply_compaction, rebuild, record_turn
from proxy.session.state import add_hidden
from proxy.wire.messages.from_neutral import CONTINUED, from_neutral
from proxy.wire.messages.to_neutral import X_GROUP, X_ITEMS, reply_to_neutral, to_neutral

from .messages_cases import (
    SIG,
    SYSTEM_BLOCKS,
    anthropic_errors,
    requests,
    session,
    tool_result,
    tool_use,
)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def public(msg: dict[str, Any]) -> dict[str, Any]:
    """A neutral message without its private keys: what the core reasons about."""
    return {k: v for k, v in msg.items() if not k.startswith("x_")}


# -- to_neutral -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ("Be terse.", {"role": "system", "content": "Be terse."}),
        (SYSTEM_BLOCKS, {"role": "system", "content": "You are Claude Code.\nTools: Read, Bash."}),
        ([], {"role": "system", "content": ""}),
    ],
)
def test_the_system_becomes_one_leading_system_message(system: Any, expected: Any) -> None:
    first = to_neutral(system, [{"role": "user", "content": "hi"}])[0]
    assert {k: v for k, v in first.items() if k in ("role", "content")} == expected
    assert first["x_system"] is True
    originals = first[X_ITEMS]
    assert originals == ([system] if isinstance(system, str) else system)
    assert all(a is b for a, b in zip(originals, system, strict=False)) or isinstance(system, str)


def test_no_system_gives_no_system_message() -> None:
    assert [m["role"] for m in to_neutral(None, [{"role": "user", "content": "hi"}])] == ["user"]


def test_a_session_maps_turn_by_turn() -> None:
    msgs = session()
    neutral = to_neutral(SYSTEM_BLOCKS, msgs)
    assert [(m["role"], m.get("tool_call_id")) for m in neutral] == [
        ("system", None),
        ("user", None),
        ("assistant", None),
        ("tool", "toolu_1"),
        ("tool", "toolu_2"),
        ("user", None),  # the reminder text after the two results
        ("user", None),  # the mid-conversation system message, at its place
        ("assistant", None),
        ("tool", "toolu_3"),
        ("assistant", None),
        ("user", None),
    ]
    first_reply = neutral[2]
    assert public(first_reply) == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "Read", "arguments": '{"file_path":"/a.py"}'},
            },
            {
                "id": "toolu_2",
                "type": "function",
                "function": {"name": "Read", "arguments": '{"file_path":"/b.py"}'},
            },
        ],
        "reasoning_content": "Read both files.",
    }
    assert first_reply[X_ITEMS] == [msgs[1]] and first_reply[X_ITEMS][0] is msgs[1]
    # One tool message per tool_result, each holding its block, grouped by message.
    assert neutral[3]["content"] == "A" * 300 and neutral[3][X_ITEMS][0] is msgs[2]["content"][0]
    assert neutral[4]["content"] == [{"type": "text", "text": "B" * 300}]
    assert {neutral[i][X_GROUP] for i in (3, 4, 5)} == {2}
    assert neutral[5]["content"] == [
        {"type": "text", "text": "<system-reminder>be brief</system-reminder>"}
    ]
    assert neutral[6]["content"] == "The user switched to plan mode."
    assert neutral[6][X_ITEMS] == [msgs[3]]
    # Server tool calls are not the client's calls: only tool_use becomes tool_calls.
    assert [c["id"] for c in neutral[7]["tool_calls"]] == ["toolu_3"]
    assert neutral[7]["content"] is None
    assert neutral[10]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }


def test_neutral_messages_are_a_history_the_core_accepts() -> None:
    neutral = to_neutral(SYSTEM_BLOCKS, session())
    assert validate(neutral) is neutral
    rb = rebuild(neutral, None)
    assert rb.system_count == 1
    assert rb.upstream_messages() == neutral  # nothing compacted: sent as they came


def test_thinking_and_images_are_sized_as_text() -> None:
    neutral = to_neutral(None, session())
    assert message_chars(neutral[1]) >= len("Reading.Read both files.")
    image_message = neutral[-1]
    assert message_chars(image_message) < 40  # "[image]", not the base64 bytes


@pytest.mark.parametrize(
    ("system", "messages"),
    [
        (None, "not a list"),
        (None, ["not a dict"]),
        (None, [{"role": "wizard", "content": "x"}]),
        (None, [{"role": "user", "content": 42}]),
        (None, [{"role": "user", "content": [{"text": "no type"}]}]),
        (None, [{"role": "user", "content": ["bare string block"]}]),
        (None, [{"role": "user", "content": [tool_result("toolu_x")]}]),
        (
            None,
            [
                {"role": "assistant", "content": [tool_use("toolu_1")]},
                {"role": "user", "content": "meanwhile"},
                {"role": "user", "content": [tool_result("toolu_1")]},
            ],
        ),
        (
            None,
            [
                {"role": "assistant", "content": [tool_use("toolu_1")]},
                {"role": "user", "content": [tool_result("toolu_2")]},
            ],
        ),
        (None, [{"role": "assistant", "content": [{"type": "tool_use", "name": "x"}]}]),
        (42, [{"role": "user", "content": "x"}]),
        ([1, 2], [{"role": "user", "content": "x"}]),
    ],
)
def test_histories_the_core_cannot_reason_about_go_up_unchanged(system: Any, messages: Any) -> None:
    with pytest.raises(UnrecognisedHistory):
        to_neutral(system, messages)


# -- the round trip -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "messages"),
    [
        (SYSTEM_BLOCKS, session()),
        ("plain", [{"role": "user", "content": "hi"}]),
        (None, [{"role": "user", "content": [], "extra_key": 1}]),
        ("", [{"role": "assistant", "content": "prefill"}]),
        (
            None,
            [
                {"role": "assistant", "content": [tool_use("a"), tool_use("b")]},
                # results in another order, after text: kept as the client wrote it
                {"content": [{"type": "text", "text": "x"}, tool_result("b"), tool_result("a")],
                 "role": "user"},
            ],
        ),
    ],
)  # fmt: skip
def test_unchanged_messages_come_back_byte_for_byte(system: Any, messages: Any) -> None:
    before = dumps((system, messages))
    assert dumps(from_neutral(to_neutral(system, messages))) == before
    assert dumps((system, messages)) == before  # nothing edited in place


@settings(max_examples=300, deadline=None)
@given(requests())
def test_any_valid_request_round_trips_byte_for_byte(request: Any) -> None:
    system, messages = request
    before = dumps(request)
    neutral = to_neutral(system, messages)
    validate(neutral)
    assert dumps(from_neutral(neutral)) == before
    assert dumps(request) == before


# -- what compaction changes ----------------------------------------------------------------


def test_a_placeholder_replaces_only_the_content_of_its_tool_result() -> None:
    msgs = session()
    neutral = to_neutral(SYSTEM_BLOCKS, msgs)
    neutral[4] = {**neutral[4], "content": placeholder_for("toolu_2")}
    system, out = from_neutral(neutral)
    assert dumps(system) == dumps(SYSTEM_BLOCKS)
    changed = out[2]["content"][1]
    assert changed == {**msgs[2]["content"][1], "content": placeholder_for("toolu_2")}
    assert list(changed) == list(msgs[2]["content"][1])  # key order kept
    assert changed["is_error"] is True and changed["cache_control"] == {"type": "ephemeral"}
    assert out[2]["content"][0] is msgs[2]["content"][0]
    assert out[2]["content"][2] is msgs[2]["content"][2]
    assert msgs[2]["content"][1]["content"] == [{"type": "text", "text": "B" * 300}]
    assert [dumps(out[i]) == dumps(msgs[i]) for i in range(len(msgs))] == [
        True, True, False, True, True, True, True, True,
    ]  # fmt: skip


def test_reclaims_of_the_real_core_reach_the_wire_as_placeholders() -> None:
    msgs = session()
    rb = rebuild(to_neutral(SYSTEM_BLOCKS, msgs), None)
    rb.conversation.compact_toolcall(keep_max=1)
    apply_compaction(rb)
    assert rb.state.reclaimed == ["toolu_1", "toolu_2"]
    system, out = from_neutral(rb.upstream_messages())
    assert dumps(system) == dumps(SYSTEM_BLOCKS)
    assert [b["content"] for b in out[2]["content"][:2]] == [
        placeholder_for("toolu_1"),
        placeholder_for("toolu_2"),
    ]
    assert dumps(out[5]) == dumps(msgs[5])  # the newest result stays intact
    assert out[1] is msgs[1] and out[4] is msgs[4]  # thinking turns untouched
    assert anthropic_errors(out) == []
    # The next turn re-applies the reclaims from the stored state.
    state = record_turn(rb, total_tokens=1000)
    more = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    _, again = from_neutral(rebuild(to_neutral(SYSTEM_BLOCKS, more), state).upstream_messages())
    assert dumps(again[:2]) == dumps(out[:2]) and again[2] == out[2]
    assert again[-2:] == more[-2:]


def test_a_summary_cut_keeps_a_valid_history_and_thinking_intact() -> None:
    msgs = session()
    rb = rebuild(to_neutral(SYSTEM_BLOCKS, msgs), None)
    rb.conversation.compact(lambda m: "SUM", keep_recent=4)
    apply_compaction(rb)
    assert rb.state.summary == "SUM"
    sent = rb.upstream_messages()
    assert sent[0]["role"] == "system" and X_ITEMS not in sent[0]
    system, out = from_neutral(sent[1:])
    assert system is None
    assert anthropic_errors(out) == []
    for msg in out:
        if msg["role"] == "assistant":
            assert any(msg is m for m in msgs)  # thinking goes back byte for byte


@settings(max_examples=150, deadline=None)
@given(requests(), st.data())
def test_any_cut_and_any_placeholders_still_give_a_valid_request(
    request: Any, data: st.DataObject
) -> None:
    system, messages = request
    neutral = to_neutral(system, messages)
    head = 1 if system is not None else 0
    start = data.draw(st.integers(head, len(neutral)))
    kept = neutral[:head] + neutral[start:]
    tools = [i for i, m in enumerate(kept) if m["role"] == "tool"]
    for i in data.draw(st.lists(st.sampled_from(tools), unique=True) if tools else st.just([])):
        kept[i] = {**kept[i], "content": placeholder_for(kept[i]["tool_call_id"])}
    snapshot = dumps(request)
    out_system, out = from_neutral(kept)
    assert dumps(out_system) == dumps(system)
    assert anthropic_errors(out) == []
    originals = {id(m) for m in messages}
    for msg in out:
        if msg["role"] == "assistant" and isinstance(msg["content"], list):
            assert id(msg) in originals  # never split, never edited
    placeholders = [
        b for m in out for b in m["content"] if isinstance(m["content"], list)
        if b.get("type") == "tool_result" and str(b.get("content", "")).startswith("[Compacted")
    ]  # fmt: skip
    replaced = [m for m in kept if m["role"] == "tool" and m["content"] != m[X_ITEMS][0].get(
        "content", "")]  # fmt: skip
    assert len(placeholders) <= len(replaced)
    assert dumps(request) == snapshot


def test_a_history_that_lost_its_start_begins_with_a_user_message() -> None:
    msgs = session()
    neutral = to_neutral(None, msgs)
    _, out = from_neutral(neutral[6:])  # from the assistant with server tools
    assert out[0] == {"role": "user", "content": CONTINUED}
    assert out[1] is msgs[4]
    _, out = from_neutral(neutral[5:])  # from the mid-conversation system message
    assert out[0] == {"role": "user", "content": CONTINUED}
    assert out[1] is msgs[3]


def test_results_whose_call_was_cut_away_become_text() -> None:
    neutral = to_neutral(None, session())
    _, out = from_neutral(neutral[2:])  # starts at the tool results of toolu_1/2
    assert out[0]["role"] == "user"
    assert [b["type"] for b in out[0]["content"]] == ["text", "text", "text"]
    assert out[0]["content"][0]["text"] == "[Result of tool call toolu_1]\n" + "A" * 300
    assert anthropic_errors(out) == []


# -- the proxy's hidden extract calls -------------------------------------------------------


def extract_call(call_id: str, target: str) -> dict[str, Any]:
    arguments = orjson.dumps({"toolcall_id": target}).decode()
    function = {"name": "extract_compacted_tool_result", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


def test_hidden_extract_calls_and_answers_join_the_clients_messages() -> None:
    msgs = session()
    neutral = to_neutral(None, msgs)
    reply = neutral[6]  # the assistant calling toolu_3
    with_hidden = {**reply, "tool_calls": [*reply["tool_calls"], extract_call("toolu_x", "t1")]}
    answer = {"role": "tool", "tool_call_id": "toolu_x", "content": "AAA"}
    rebuilt = [*neutral[:6], with_hidden, answer, *neutral[7:]]
    _, out = from_neutral(rebuilt)
    assert out[4]["content"][:-1] == msgs[4]["content"]
    assert out[4]["content"][-1] == {
        "type": "tool_use",
        "id": "toolu_x",
        "name": "extract_compacted_tool_result",
        "input": {"toolcall_id": "t1"},
    }
    assert out[5]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "AAA"},
        *msgs[5]["content"],
    ]
    assert anthropic_errors(out) == []


def test_an_extract_round_in_flight_ends_in_a_new_user_message() -> None:
    msgs = session()
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [
            {"type": "thinking", "thinking": "need t1", "signature": SIG},
            {"type": "tool_use", "id": "toolu_x", "name": "extract_compacted_tool_result",
             "input": {"toolcall_id": "toolu_1"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip
    neutral = [
        *to_neutral(None, msgs),
        reply_to_neutral(reply),
        {"role": "tool", "tool_call_id": "toolu_x", "content": "A" * 300},
    ]
    validate(neutral)
    _, out = from_neutral(neutral)
    assert out[-2] == {"role": "assistant", "content": reply["content"]}
    assert out[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "A" * 300}],
    }
    assert anthropic_errors(out) == []


def test_core_written_messages_without_originals_are_rendered() -> None:
    system, out = from_neutral(
        [
            {"role": "system", "content": "summary text"},
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": "a", "tool_calls": [extract_call("c1", "k")]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "user", "content": "next"},
            {"role": "assistant", "content": None},
        ]
    )
    assert system == "summary text"
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a"},
                {
                    "type": "tool_use",
                    "id": "c1",
                    "name": "extract_compacted_tool_result",
                    "input": {"toolcall_id": "k"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "r"},
                {"type": "text", "text": "next"},
            ],
        },
    ]


def test_several_system_messages_with_originals_join_as_blocks() -> None:
    first = to_neutral("one", [])[0]
    second = to_neutral([{"type": "text", "text": "two"}], [])[0]
    system, out = from_neutral([first, second])
    assert out == []
    assert system == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]


def test_unknown_neutral_roles_are_refused() -> None:
    with pytest.raises(UnrecognisedHistory):
        from_neutral([{"role": "wizard", "content": "x"}])


def test_original_dicts_are_never_edited() -> None:
    msgs = session()
    frozen = copy.deepcopy(msgs)
    neutral = to_neutral(SYSTEM_BLOCKS, msgs)
    for i, m in enumerate(neutral):
        if m["role"] == "tool":
            neutral[i] = {**m, "content": "[Compacted]"}
    from_neutral(neutral[5:])
    assert msgs == frozen


def test_a_mixed_round_is_replayed_through_the_session_state() -> None:
    """The pipeline's path for extract calls mixed with the client's own, with the real core."""
    msgs = session()
    neutral = to_neutral(SYSTEM_BLOCKS, msgs)
    rb = rebuild(neutral, None)
    rb.conversation.compact_toolcall(keep_max=0)
    apply_compaction(rb)
    model_reply = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "need toolu_1", "signature": SIG},
            tool_use("toolu_x", name="extract_compacted_tool_result", toolcall_id="toolu_1"),
            tool_use("toolu_9", command="ls"),
        ],
    }
    calls = reply_to_neutral(model_reply)["tool_calls"]
    own, ext = split_calls(calls)
    answers = [{"role": "tool", "tool_call_id": c["id"], "content": answer(c, rb.originals)}
               for c in ext]  # fmt: skip
    assert answers[0]["content"] == "A" * 300  # the original, from the client's own message
    add_hidden(rb.state, len(neutral), own, ext, answers)
    state = record_turn(rb, total_tokens=5000)
    # The client saw thinking + its own call, and answers that call.
    seen = {
        "role": "assistant",
        "content": [model_reply["content"][0], tool_use("toolu_9", command="ls")],
    }
    more = [*msgs, seen, {"role": "user", "content": [tool_result("toolu_9", "files")]}]
    sent = rebuild(to_neutral(SYSTEM_BLOCKS, more), state).upstream_messages()
    _, out = from_neutral(sent)
    assert out[-2]["content"] == [*seen["content"], model_reply["content"][1]]
    assert out[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "A" * 300},
        tool_result("toolu_9", "files"),
    ]
    assert out[2]["content"][0]["content"] == placeholder_for("toolu_1")
    assert anthropic_errors(out) == []


def test_content_the_core_rewrote_replaces_only_the_text() -> None:
    """The summariser shortens a message too long for its request: the text changes, the
    blocks around it (thinking, calls, images) stay as they were."""
    msgs = session()
    neutral = to_neutral(None, msgs)
    short = "[... shortened ...]"
    edited = [{**m, "content": short} if i in (1, 4, 5, 8, 9) else m for i, m in enumerate(neutral)]
    _, out = from_neutral(edited)
    assert (
        out[1]["content"]
        == [
            msgs[1]["content"][0],  # thinking, byte for byte
            {"type": "text", "text": short},
            *msgs[1]["content"][2:],
        ]
    )
    assert out[2]["content"] == [*msgs[2]["content"][:2], {"type": "text", "text": short}]
    assert out[3] == {**msgs[3], "content": short}  # the mid-conversation system message
    assert out[6]["content"] == [msgs[6]["content"][0], {"type": "text", "text": short}]
    assert out[7] == {**msgs[7], "content": short}
    assert [out[i] is msgs[i] for i in (0, 4)] == [True, True]
    assert anthropic_errors(out) == []


@pytest.mark.parametrize(
    ("content", "text", "expected"),
    [
        (
            [{"type": "thinking"}, tool_use("a")],
            "new",
            [{"type": "thinking"}, {"type": "text", "text": "new"}, tool_use("a")],
        ),
        ("plain", "new", [{"type": "text", "text": "new"}]),
        ([{"type": "text", "text": "x"}, {"type": "text", "text": "y"}], None, []),
    ],
)  # fmt: skip
def test_an_assistant_message_is_retexted_around_its_other_blocks(
    content: Any, text: Any, expected: Any
) -> None:
    original = {"role": "assistant", "content": content}
    neutral = {**to_neutral(None, [original])[0], "content": text}
    assert from_neutral([{"role": "user", "content": "q"}, neutral])[1][1]["content"] == expected


def test_consecutive_assistant_messages_are_one_turn() -> None:
    """Anthropic joins them; a tool_result may answer a call of either."""
    first = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "t", "signature": SIG}, tool_use("toolu_a")],
    }
    second = {
        "role": "assistant",
        "content": [{"type": "text", "text": "and"}, tool_use("toolu_b")],
    }
    answers = {"role": "user", "content": [tool_result("toolu_a"), tool_result("toolu_b")]}
    msgs = [{"role": "user", "content": "go"}, first, second, answers]
    neutral = to_neutral(None, msgs)
    assert [m["role"] for m in neutral] == ["user", "assistant", "tool", "tool"]
    assert neutral[1][X_ITEMS] == [first, second]
    assert [c["id"] for c in neutral[1]["tool_calls"]] == ["toolu_a", "toolu_b"]
    assert neutral[1]["content"] == "and" and neutral[1]["reasoning_content"] == "t"
    validate(neutral)
    _, out = from_neutral(neutral)
    assert out[1] is first and out[2] is second and dumps(out) == dumps(msgs)
    # A hidden extract call joins the last message of the turn.
    hidden = {**neutral[1], "tool_calls": [*neutral[1]["tool_calls"], extract_call("x", "k")]}
    answer_x = {"role": "tool", "tool_call_id": "x", "content": "r"}
    _, out = from_neutral([neutral[0], hidden, answer_x, *neutral[2:]])
    assert out[1] is first and out[2]["content"][-1]["id"] == "x"
    assert [b["tool_use_id"] for b in out[3]["content"]] == ["x", "toolu_a", "toolu_b"]
    assert anthropic_errors(out) == []
    # Cut after the first of the two: its result is an orphan, the other is kept.
    only_second = {**neutral[1], X_ITEMS: [second], "tool_calls": neutral[1]["tool_calls"][1:]}
    _, out = from_neutral([only_second, *neutral[2:]])
    assert [b["type"] for b in out[-1]["content"]] == ["tool_result", "text"]
    assert anthropic_errors(out) == []


def test_results_spread_over_several_user_messages_go_up_uncompacted() -> None:
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]},
        {"role": "user", "content": [tool_result("toolu_a")]},
        {"role": "user", "content": [tool_result("toolu_b")]},
    ]
    with pytest.raises(UnrecognisedHistory):
        to_neutral(None, msgs)
