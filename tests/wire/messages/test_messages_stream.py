"""One client message over several upstream Messages rounds: stream relay, merge, usage."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.session.extract_tool import split_calls
from proxy.wire.base import StreamRelay, Usage
from proxy.wire.messages.reply import UNFINISHED
from proxy.wire.messages.stream import MessagesRelay, error_event, stream_error
from proxy.wire.sse import SSEDecoder

from .messages_cases import (
    SIG,
    USAGE_1,
    USAGE_2,
    client_view,
    extract,
    relay_round,
    sse,
    stream,
    text,
    thinking,
    use,
)

# -- streaming ------------------------------------------------------------------------------


def test_a_single_round_passes_byte_for_byte() -> None:
    upstream = stream("msg_1", [thinking("hm"), text("Hello there"), use("toolu_1", p="a")],
                      "tool_use", USAGE_1)  # fmt: skip
    relay = MessagesRelay()
    sent = relay_round(relay, upstream, cuts=[7, 100, 101, 333])
    rnd = relay.end_round()
    assert sent + b"".join(relay.finish()) == upstream
    assert not rnd.only_extract
    assert rnd.raw["content"] == [thinking("hm"), text("Hello there"), use("toolu_1", p="a")]
    assert rnd.raw["usage"] == {**USAGE_1, "output_tokens": 7}
    assert rnd.raw["stop_reason"] == "tool_use"
    assert rnd.usage == Usage(total=167, prompt=160, cached=50, output=7, written=10)
    # The neutral message the pipeline reads: thinking counted, the call in chat form.
    assert rnd.message["reasoning_content"] == "hm"
    assert rnd.message["content"] == "Hello there"
    assert rnd.message["tool_calls"][0]["function"] == {"name": "Read", "arguments": '{"p":"a"}'}
    assert rnd.message["x_items"] == [{"role": "assistant", "content": rnd.raw["content"]}]


def test_an_extract_round_is_hidden_and_the_next_round_continues_the_message() -> None:
    relay = MessagesRelay()
    first = relay_round(
        relay,
        stream("msg_1", [thinking("need it"), text("Let me look."), extract("toolu_x")],
               "tool_use", USAGE_1, output=20),
    )  # fmt: skip
    rnd = relay.end_round()
    assert rnd.only_extract
    assert rnd.raw["id"] == "msg_1"
    assert rnd.raw["content"][-1] == extract("toolu_x")  # input rebuilt from the json deltas
    assert [c["id"] for c in rnd.message["tool_calls"]] == ["toolu_x"]
    second = relay_round(
        relay, stream("msg_2", [text("Found it."), use("toolu_2", q=1)], "tool_use", USAGE_2)
    )
    relay.end_round()
    events, message = client_view(first + second + b"".join(relay.finish()))
    assert [e["type"] for e in events].count("message_start") == 1
    assert message["id"] == "msg_1"
    assert message["content"] == [
        thinking("need it"),
        text("Let me look."),
        text("Found it."),
        use("toolu_2", q=1),
    ]
    assert message["stop_reason"] == "tool_use" and message["stopped"]
    assert message["usage"] == {
        "input_tokens": 140,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 210,
        "output_tokens": 27,
    }
    assert [e["type"] for e in events].count("message_stop") == 1
    assert [e["type"] for e in events].count("ping") == 2


def test_a_mixed_round_shows_only_the_clients_calls_renumbered() -> None:
    relay = MessagesRelay()
    sent = relay_round(
        relay,
        stream("msg_1", [extract("toolu_x"), use("toolu_1", a=1), use("toolu_2", b=2)],
               "tool_use", USAGE_1),
    )  # fmt: skip
    rnd = relay.end_round()
    assert not rnd.only_extract
    own, hidden = split_calls(rnd.message["tool_calls"])
    assert [c["id"] for c in hidden] == ["toolu_x"]
    assert [c["id"] for c in own] == ["toolu_1", "toolu_2"]
    _, message = client_view(sent + b"".join(relay.finish()))
    assert message["content"] == [use("toolu_1", a=1), use("toolu_2", b=2)]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["output_tokens"] == 7


def test_when_rounds_run_out_a_hidden_only_call_ends_the_turn() -> None:
    relay = MessagesRelay()
    sent = relay_round(relay, stream("msg_1", [text("Let me see"), extract("t")], "tool_use",
                                     USAGE_1))  # fmt: skip
    assert relay.end_round().only_extract
    _, message = client_view(sent + b"".join(relay.finish()))
    assert message["content"] == [text("Let me see")]
    assert message["stop_reason"] == "end_turn"


def test_finish_closes_a_round_that_was_not_ended() -> None:
    relay = MessagesRelay()
    sent = relay_round(relay, stream("msg_1", [extract("t")], "tool_use", USAGE_1))
    _, message = client_view(sent + b"".join(relay.finish()))
    assert message["content"] == [text(UNFINISHED)] and message["stop_reason"] == "end_turn"
    assert len(relay.rounds) == 1


def test_a_turn_cut_short_after_thinking_ends_in_text() -> None:
    relay = MessagesRelay()
    sent = relay_round(relay, stream("msg_1", [thinking("hm"), extract("t")], "tool_use", USAGE_1))
    relay.end_round()
    _, message = client_view(sent + b"".join(relay.finish(hidden_last=True)))
    assert message["content"] == [thinking("hm"), text(UNFINISHED)]


def test_a_client_that_defines_our_tool_sees_its_calls() -> None:
    relay = MessagesRelay(hide=False)
    upstream = stream("msg_1", [extract("t")], "tool_use", USAGE_1)
    sent = relay_round(relay, upstream)
    rnd = relay.end_round()
    assert not rnd.only_extract
    assert sent + b"".join(relay.finish()) == upstream


@pytest.mark.parametrize(
    ("event", "data"),
    [
        (None, None),  # a comment
        ("ping", '{"type": "ping"}'),
        ("error", '{"type": "error", "error": {"type": "overloaded_error", "message": "x"}}'),
        ("brand_new_event", '{"type": "brand_new_event"}'),
        ("content_block_delta", "not json"),
        ("content_block_delta", "[1, 2]"),
        ("content_block_delta", '{"type": "content_block_delta", "index": 9, "delta": {}}'),
        ("content_block_stop", '{"type": "content_block_stop", "index": "zero"}'),
    ],
)
def test_other_events_pass_unchanged(event: str | None, data: str | None) -> None:
    relay = MessagesRelay()
    relay_round(relay, stream("msg_1", [extract("t")], "tool_use", USAGE_1))
    raw = b"whatever raw bytes\n\n"
    assert relay.feed(event, data, raw) == [raw]


def test_an_upstream_error_mid_stream_ends_the_message() -> None:
    relay = MessagesRelay()
    upstream = stream("msg_1", [text("Hello there")], "end_turn", USAGE_1)
    broken = upstream[: upstream.index(b"event: content_block_stop")]
    error = sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "x"}})
    sent = relay_round(relay, broken + error)
    assert sent.endswith(error)
    relay.end_round()
    assert relay.finish(hidden_last=False) == []  # nothing after the upstream's error


def test_thinking_signatures_and_citations_are_folded_exactly() -> None:
    relay = MessagesRelay()
    citation = {"type": "char_location", "cited_text": "x", "document_index": 0}
    events = [
        sse("message_start", {"type": "message_start", "message": {"id": "m", "content": []}}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "thinking", "thinking": "",
                                                      "signature": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "thinking_delta", "thinking": "a\nb"}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "signature_delta", "signature": SIG}}),
        sse("content_block_start", {"type": "content_block_start", "index": 1,
                                    "content_block": {"type": "text", "text": "",
                                                      "citations": None}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                    "delta": {"type": "citations_delta", "citation": citation}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                    "delta": {"type": "text_delta", "text": "cited"}}),
    ]  # fmt: skip
    relay_round(relay, b"".join(events))
    rnd = relay.end_round()
    assert rnd.raw["content"] == [
        {"type": "thinking", "thinking": "a\nb", "signature": SIG},
        {"type": "text", "text": "cited", "citations": [citation]},
    ]


def test_a_stream_cut_inside_tool_arguments_leaves_an_empty_input() -> None:
    relay = MessagesRelay()
    upstream = stream("msg_1", [use("toolu_1", path="/a")], "tool_use", USAGE_1)
    first_delta = upstream.index(b"input_json_delta")  # the stream ends after this event
    relay_round(relay, upstream[: upstream.index(b"\n\n", first_delta) + 2])
    assert relay.end_round().raw["content"] == [use("toolu_1")]


def test_error_event_is_an_anthropic_error() -> None:
    data = error_event("api_error", "The upstream connection failed")
    (event,) = SSEDecoder().feed(data)
    assert event.event == "error"
    assert orjson.loads(event.data or "") == {
        "type": "error",
        "error": {"type": "api_error", "message": "The upstream connection failed"},
    }


block_kinds = st.sampled_from(["text", "thinking", "use", "extract"])


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.lists(block_kinds, min_size=1, max_size=4), min_size=1, max_size=4),
    st.lists(st.integers(0, 5000), max_size=12),
)
def test_any_rounds_make_one_well_formed_message(rounds: list[list[str]], cuts: list[int]) -> None:
    relay = MessagesRelay()
    sent = b""
    expected: list[dict[str, Any]] = []
    for r, kinds in enumerate(rounds):
        blocks = []
        for b, kind in enumerate(kinds):
            name = f"{r}.{b}"
            block = {
                "text": text("text " + name),
                "thinking": thinking("thought " + name, SIG + name),
                "use": use("toolu_" + name, n=name),
                "extract": extract("toolu_" + name, name),
            }[kind]
            blocks.append(block)
            if kind != "extract":
                expected.append(block)
        stop = "tool_use" if {"use", "extract"} & set(kinds) else "end_turn"
        sent += relay_round(relay, stream(f"msg_{r}", blocks, stop, USAGE_1), cuts)
        rnd = relay.end_round()
        assert rnd.only_extract == ("extract" in kinds and "use" not in kinds)
    _, message = client_view(sent + b"".join(relay.finish()))
    assert message["id"] == "msg_0" and message["stopped"]
    last = rounds[-1]
    cut_short = "extract" in last and "use" not in last  # the proxy's rounds ran out
    if cut_short and (not expected or expected[-1]["type"] == "thinking"):
        expected.append(text(UNFINISHED))  # never an empty message, nor one ending in thinking
    assert message["content"] == expected
    assert message["stop_reason"] == ("tool_use" if "use" in last else "end_turn")
    assert message["usage"]["input_tokens"] == 100 * len(rounds)
    assert message["usage"]["output_tokens"] == 7 * len(rounds)


# -- the pipeline's side (proxy.wire.base) --------------------------------------------------


@pytest.mark.parametrize("hidden_last", [True, False])
def test_the_relay_is_the_pipelines_stream_relay(hidden_last: bool) -> None:
    relay: StreamRelay = MessagesRelay()
    sent = relay_round(
        relay, stream("msg_1", [text("so"), extract("toolu_x")], "tool_use", USAGE_1)
    )
    rnd = relay.end_round()
    assert rnd.only_extract
    # Out of extract rounds: the turn ends normally, whether or not the pipeline says so.
    closing = relay.finish(hidden_last=hidden_last)
    assert [e.event for e in SSEDecoder().feed(b"".join(closing))] == [
        "message_delta",
        "message_stop",
    ]
    _, message = client_view(sent + b"".join(closing))
    assert message["stop_reason"] == "end_turn" and message["content"] == [text("so")]


@pytest.mark.parametrize(
    ("body", "detail", "error"),
    [
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
            None,
            {"type": "overloaded_error", "message": "Overloaded"},
        ),
        (
            {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
            None,
            {"type": "rate_limit_error", "message": "slow"},
        ),
        (
            b"<html>bad gateway</html>",
            None,
            {"type": "api_error", "message": "The upstream connection failed during the stream"},
        ),
        (
            None,
            "ReadTimeout",
            {
                "type": "api_error",
                "message": "The upstream connection failed during the stream (ReadTimeout)",
            },
        ),
    ],
)
def test_a_broken_stream_ends_in_an_anthropic_error_event(
    body: Any, detail: str | None, error: dict[str, str]
) -> None:
    for data in (stream_error(body, detail), MessagesRelay().error(body, detail)):
        (event,) = SSEDecoder().feed(data)
        assert event.event == "error"
        assert orjson.loads(event.data or "") == {"type": "error", "error": error}
