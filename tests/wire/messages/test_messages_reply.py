"""Messages replies: rounds merged into one reply, usage, rounds and summary replies read."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.session.extract_tool import split_calls
from proxy.wire.base import Usage
from proxy.wire.messages.reply import (
    UNFINISHED,
    UnreadableReply,
    client_reply,
    merge_messages,
    reply_round,
    summary_reply,
    usage_of,
    usage_total,
)
from proxy.wire.usage import MESSAGES, usage_sum

from .messages_cases import USAGE_1, USAGE_2, extract, reply, text, thinking, use

# -- merged replies ---------------------------------------------------------------------------


def test_one_plain_reply_is_returned_as_it_is() -> None:
    only = reply("msg_1", [text("hi")], "end_turn", {**USAGE_1, "output_tokens": 3})
    assert merge_messages([only]) is only


def test_rounds_merge_into_one_reply() -> None:
    first = reply(
        "msg_1",
        [text("Let me look."), extract("toolu_x")],
        "tool_use",
        {**USAGE_1, "output_tokens": 20, "server_tool_use": {"web_search_requests": 1}},
    )
    second = reply(
        "msg_2",
        [text("Found.")],
        "end_turn",
        {**USAGE_2, "output_tokens": 7, "server_tool_use": {"web_search_requests": 2}},
    )
    merged = merge_messages([first, second])  # fmt: skip
    assert merged["id"] == "msg_1"
    assert merged["content"] == [text("Let me look."), text("Found.")]
    assert merged["stop_reason"] == "end_turn"
    assert merged["usage"] == {
        "input_tokens": 140,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 210,
        "output_tokens": 27,
        "server_tool_use": {"web_search_requests": 3},
    }
    assert first["content"][-1] == extract("toolu_x")  # the rounds are not edited


@pytest.mark.parametrize(
    ("content", "stop", "expected_content", "expected_stop"),
    [
        ([extract("x")], "tool_use", [text(UNFINISHED)], "end_turn"),
        ([extract("x"), use("toolu_1")], "tool_use", [use("toolu_1")], "tool_use"),
        ([text("a"), extract("x")], "max_tokens", [text("a")], "max_tokens"),
    ],
)
def test_a_reply_with_hidden_calls_shows_the_rest(
    content: Any, stop: str, expected_content: Any, expected_stop: str
) -> None:
    merged = merge_messages([reply("m", content, stop, dict(USAGE_1))])
    assert merged["content"] == expected_content
    assert merged["stop_reason"] == expected_stop
    assert merge_messages([reply("m", content, stop, dict(USAGE_1))], hide=False)["content"] == (
        content
    )


def test_a_reply_cut_short_after_thinking_ends_in_text() -> None:
    merged = merge_messages([reply("m", [thinking("hm"), extract("t")], "tool_use", {})])
    assert merged["content"] == [thinking("hm"), text(UNFINISHED)]
    assert merge_messages([reply("m", [extract("t")], "tool_use", {})])["content"] == [
        text(UNFINISHED)
    ]


def test_merging_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one round"):
        merge_messages([])


# -- usage ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "total"),
    [
        ({"input_tokens": 10, "output_tokens": 5}, 15),
        ({**USAGE_1, "output_tokens": 5}, 165),
        ({**USAGE_1, "output_tokens": 5, "cache_read_input_tokens": None}, 115),
        ({"input_tokens": 10}, None),
        ({"input_tokens": 10, "output_tokens": -1}, None),
        ({"input_tokens": True, "output_tokens": 1}, None),
        ({"input_tokens": "10", "output_tokens": 1}, None),
        ({"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 2.5}, None),
        (None, None),
        ([1], None),
    ],
)
def test_usage_total_counts_every_input_and_output_token(usage: Any, total: int | None) -> None:
    assert usage_total(usage) == total


def test_usage_sum_adds_counts_and_keeps_the_rest_of_the_last() -> None:
    a = {
        "input_tokens": 1,
        "output_tokens": 2,
        "service_tier": "standard",
        "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 0},
    }
    b = {"input_tokens": 4, "output_tokens": 5, "service_tier": "priority",
         "cache_creation": {"ephemeral_5m_input_tokens": 6}}  # fmt: skip
    assert usage_sum([a, None, b], MESSAGES) == {
        "input_tokens": 5,
        "output_tokens": 7,
        "service_tier": "priority",
        "cache_creation": {"ephemeral_5m_input_tokens": 9, "ephemeral_1h_input_tokens": 0},
    }
    assert usage_sum([a], MESSAGES) is a
    assert usage_sum([None], MESSAGES) is None


def test_a_reply_is_read_as_a_round() -> None:
    data = reply(
        "msg_1",
        [thinking("t"), text("a"), extract("toolu_x", "toolu_1")],
        "tool_use",
        {**USAGE_1, "output_tokens": 5},
    )
    rnd = reply_round(data)
    assert rnd.raw is data and rnd.only_extract
    assert rnd.usage == Usage(total=165, prompt=160, cached=50, output=5, written=10)
    assert rnd.message["content"] == "a" and rnd.message["reasoning_content"] == "t"
    assert split_calls(rnd.message["tool_calls"])[1][0]["id"] == "toolu_x"
    mixed = reply_round(reply("m", [extract("x"), use("toolu_2")], "tool_use", {}))
    assert not mixed.only_extract and mixed.usage is None
    final = reply_round(reply("msg_2", [text("done")], "end_turn", {**USAGE_2, "output_tokens": 1}))
    shown = client_reply([rnd, final], injected=True)
    assert shown["id"] == "msg_1" and shown["content"] == [thinking("t"), text("a"), text("done")]
    assert shown["usage"]["input_tokens"] == 140
    assert client_reply([mixed], injected=False) is mixed.raw


@pytest.mark.parametrize("data", [None, [], {"type": "message"}, {"content": "text"}])
def test_an_unreadable_reply_is_refused(data: Any) -> None:
    with pytest.raises(UnreadableReply):
        reply_round(data)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"input_tokens": 10, "output_tokens": 5}, Usage(total=15, prompt=10, cached=0, output=5)),
        (
            {**USAGE_1, "output_tokens": 2},
            Usage(total=162, prompt=160, cached=50, output=2, written=10),
        ),
        ({"input_tokens": 10}, None),
        ("junk", None),
    ],
)
def test_usage_of_reads_every_input_token_as_prompt(usage: Any, expected: Usage | None) -> None:
    assert usage_of(usage) == expected


def test_a_summary_reply_reads_as_a_chat_completion() -> None:
    data = reply(
        "msg_s",
        [thinking("plan"), text("## Goal\n"), text("fix it")],
        "end_turn",
        {**USAGE_1, "output_tokens": 9},
    )
    assert summary_reply(data) == {
        "id": "msg_s",
        "object": "chat.completion",
        "model": "claude",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "## Goal\nfix it"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 160, "completion_tokens": 9, "total_tokens": 169},
    }
    cut = summary_reply(reply("m", [text("half")], "max_tokens", {}))
    assert cut["choices"][0]["finish_reason"] == "length" and "usage" not in cut
    with pytest.raises(UnreadableReply):
        summary_reply({"type": "error"})
