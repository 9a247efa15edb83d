"""proxy.wire.sse: the event-stream decoder, the encoders and the chat-chunk accumulator."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import proxy.wire.sse
from proxy.wire.sse import DONE, ChunkAccumulator, SSEDecoder, SSEEvent, encode_comment, encode_data

# --- decoder -------------------------------------------------------------------------------


def decode(stream: bytes, pieces: list[bytes] | None = None) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for piece in pieces if pieces is not None else [stream]:
        events += decoder.feed(piece)
    return events + decoder.flush()


def byte_by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def fields(event: SSEEvent) -> tuple[str | None, str | None, str | None, int | None, str | None]:
    return (event.data, event.event, event.id, event.retry, event.comment)


def parsed(events: list[SSEEvent]) -> list[tuple[Any, ...]]:
    """Fields of each event, leaving out raw-only ones (stray line breaks at the end)."""
    return [fields(e) for e in events if fields(e) != (None,) * 5]


# (stream, expected (data, event, id, retry, comment) per event)
DECODE_CASES: list[tuple[bytes, list[tuple[Any, ...]]]] = [
    (b"data: hello\n\n", [("hello", None, None, None, None)]),
    (b"data: hello\r\n\r\n", [("hello", None, None, None, None)]),
    (b"data: hello\r\r", [("hello", None, None, None, None)]),
    (b"data: a\r\ndata: b\rdata: c\n\n", [("a\nb\nc", None, None, None, None)]),
    (b"data:no-space\n\n", [("no-space", None, None, None, None)]),
    (b"data:  two spaces\n\n", [(" two spaces", None, None, None, None)]),
    (b"data: line one\ndata: line two\n\n", [("line one\nline two", None, None, None, None)]),
    (b"data\n\n", [("", None, None, None, None)]),
    (b"data:\ndata:\n\n", [("\n", None, None, None, None)]),
    (b"event: ping\ndata: {}\n\n", [("{}", "ping", None, None, None)]),
    (b"id: 42\ndata: x\n\n", [("x", None, "42", None, None)]),
    (b"id: a\x00b\ndata: x\n\n", [("x", None, None, None, None)]),
    (b"retry: 3000\n\n", [(None, None, None, 3000, None)]),
    (b"retry: 30x\ndata: y\n\n", [("y", None, None, None, None)]),
    (b": keep-alive\n\n", [(None, None, None, None, "keep-alive")]),
    (b": OPENROUTER PROCESSING\n\n", [(None, None, None, None, "OPENROUTER PROCESSING")]),
    (b":\n\n", [(None, None, None, None, "")]),
    (b": ping\ndata: x\n\n", [("x", None, None, None, "ping")]),
    (b"unknown: field\ndata: x\n\n", [("x", None, None, None, None)]),
    (b"\xef\xbb\xbfdata: bom\n\n", [("bom", None, None, None, None)]),
    (
        b"data: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\n\n",
        [("café 日本 😀", None, None, None, None)],
    ),
    (b"data: bad \xff byte\n\n", [("bad \ufffd byte", None, None, None, None)]),
    (b"data: a\n\n\n\ndata: b\n\n", [("a",) + (None,) * 4, ("b",) + (None,) * 4]),
    (b"\n\n\n", []),
    (b"data: [DONE]\n\n", [("[DONE]", None, None, None, None)]),
    # end of stream without the blank line: dispatched by flush() rather than lost
    (b"data: tail", [("tail", None, None, None, None)]),
    (b"data: tail\n", [("tail", None, None, None, None)]),
]


@pytest.mark.parametrize(("stream", "expected"), DECODE_CASES)
def test_decode_table(stream: bytes, expected: list[tuple[Any, ...]]) -> None:
    assert parsed(decode(stream)) == expected


@pytest.mark.parametrize(("stream", "expected"), DECODE_CASES)
def test_decode_byte_by_byte_matches_whole(stream: bytes, expected: list[tuple[Any, ...]]) -> None:
    assert parsed(decode(stream, byte_by_byte(stream))) == expected


@pytest.mark.parametrize(("stream", "expected"), DECODE_CASES)
def test_raw_bytes_reproduce_the_stream(stream: bytes, expected: list[tuple[Any, ...]]) -> None:
    # a proxy forwarding each event's `raw` sends exactly what it received
    for pieces in ([stream], byte_by_byte(stream)):
        assert b"".join(e.raw for e in decode(stream, pieces)) == stream


def test_raw_is_the_exact_event_bytes() -> None:
    stream = b': keep-alive\n\ndata: {"a":1}\r\n\r\nevent: x\rdata: y\r\r'
    assert [e.raw for e in decode(stream)] == [
        b": keep-alive\n\n",
        b'data: {"a":1}\r\n\r\n',
        b"event: x\rdata: y\r\r",
    ]


def test_event_is_dispatched_as_soon_as_its_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert [e.data for e in decoder.feed(b"\n")] == ["a"]
    # a bare \r ends the line at once; no need to wait and see if \n follows
    assert [e.data for e in decoder.feed(b"data: b\r\r")] == ["b"]


def test_flush_returns_trailing_bytes_that_form_no_event() -> None:
    decoder = SSEDecoder()
    assert [e.data for e in decoder.feed(b"data: a\r\n\r")] == ["a"]
    assert decoder.feed(b"\n") == []
    assert [(e.raw, fields(e)) for e in decoder.flush()] == [(b"\n", (None,) * 5)]


def test_cr_lf_split_across_chunks_is_one_line_ending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    # the \n completes the \r\n of the data line; then \r\n is the blank line
    events = decoder.feed(b"\n\r")
    assert [(e.data, e.raw) for e in events] == [("a", b"data: a\r\n\r")]
    events = decoder.feed(b"\ndata: b\n\n")
    assert [(e.data, e.raw) for e in events] == [("b", b"\ndata: b\n\n")]


def test_multibyte_character_split_between_chunks() -> None:
    stream = "data: 日本語 😀\n\n".encode()
    for cut in range(1, len(stream)):
        events = decode(stream, [stream[:cut], stream[cut:]])
        assert [e.data for e in events] == ["日本語 😀"]


def test_last_event_id_persists() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 1\ndata: a\n\ndata: b\n\n")
    assert [e.id for e in events] == ["1", None]
    assert decoder.last_event_id == "1"


def test_empty_feed_and_flush_are_harmless() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.flush() == []
    assert decoder.feed(b"data: x\n\n")[0].data == "x"


def test_is_done() -> None:
    assert SSEEvent(data="[DONE]").is_done
    assert not SSEEvent(data='{"x": 1}').is_done
    assert not SSEEvent(comment="[DONE]").is_done


line_ending = st.sampled_from([b"\n", b"\r\n", b"\r"])
field_value = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\x00"), max_size=12
)


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[bytes, list[tuple[Any, ...]]]:
    """A stream of random events in random line endings, and the fields each should give."""
    stream = bytearray()

    def line(text: bytes) -> None:
        end = draw(line_ending)
        if end == b"\n" and stream.endswith(b"\r"):
            end = b"\r\n"  # "\r" then "\n" would be one line ending, not two
        stream.extend(text + end)

    expected = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["data", "comment", "event"]))
        if kind == "comment":
            text = draw(field_value)
            line(b": " + text.encode())
            expected.append((None, None, None, None, text))
        else:
            lines = draw(st.lists(field_value, min_size=1, max_size=3))
            name = draw(field_value.filter(lambda s: ":" not in s)) if kind == "event" else None
            if name is not None:
                line(b"event: " + name.encode())
            for text in lines:
                line(b"data: " + text.encode())
            expected.append(("\n".join(lines), name, None, None, None))
        line(b"")
    return bytes(stream), expected


@given(event_streams(), st.data())
def test_arbitrary_split_points(
    case: tuple[bytes, list[tuple[Any, ...]]], data: st.DataObject
) -> None:
    stream, expected = case
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=8)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    events = decode(stream, pieces)
    assert parsed(events) == expected
    assert b"".join(e.raw for e in events) == stream


WHOLE_EVENT_CHUNKS = [
    [b'data: {"a":1}\n\n', b'data: {"b":"\xc3\xa9"}\n\n', b"data: [DONE]\n\n"],
    [b"data: one\n\ndata: two\n\n", b"data: three\n\n"],  # several events to a chunk
    [b"data: a\n\n\n", b"data: b\n\n"],  # a stray blank line after an event
    [b"data: a\n\n", b": keep-alive\n\n", b"data: b\n\n"],  # a comment between
    [b"data: a\r\n\r\n", b"data: b\n\n"],  # CRLF line ends
    [b"data: a\ndata: b\n\n", b"data: c\n\n"],  # a two-line event
    [b"event: x\ndata: a\n\n", b"data: b\n\n"],
    [b"data: a\n", b"\ndata: b\n\n"],  # an event split between chunks
    [b"\xef\xbb\xbfdata: a\n\n", b"data: b\n\n"],  # a byte-order mark first
    [b"data:no-space\n\n", b"data: \xff\n\n"],  # no space after the colon, bad UTF-8
]


@pytest.mark.parametrize("chunks", WHOLE_EVENT_CHUNKS)
def test_whole_events_decode_as_line_by_line(
    chunks: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of whole `data:` events (what upstreams send) take a shortcut; it gives the
    same events, raw bytes included, as decoding the same chunks line by line."""
    stream = b"".join(chunks)
    shortcut = decode(stream, chunks)
    monkeypatch.setattr(proxy.wire.sse, "_whole_data_events", lambda data: None)
    assert shortcut == decode(stream, chunks)


# --- encoders ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "wire"),
    [
        ("x", b"data: x\n\n"),
        (b'{"a":1}', b'data: {"a":1}\n\n'),
        ("", b"data: \n\n"),
        ("a\nb", b"data: a\ndata: b\n\n"),
        ("a\r\nb\rc", b"data: a\ndata: b\ndata: c\n\n"),
        ("é", "data: é\n\n".encode()),
    ],
)
def test_encode_data(payload: bytes | str, wire: bytes) -> None:
    assert encode_data(payload) == wire


@given(st.text(st.characters(blacklist_categories=["Cs"])))
def test_encode_decode_round_trip(text: str) -> None:
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    assert [e.data for e in decode(encode_data(text))] == [normalised]


def test_done_and_comment() -> None:
    assert DONE == b"data: [DONE]\n\n"
    assert decode(DONE)[0].is_done
    assert encode_comment("keep-alive") == b": keep-alive\n\n"
    assert decode(encode_comment("a\nb"))[0].comment == "a\nb"


def test_module_is_pure() -> None:
    """No I/O or HTTP library: the SSE layer is part of the pure core."""
    tree = ast.parse(Path(proxy.wire.sse.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__", "json", "re", "dataclasses", "typing"}


# --- accumulator ---------------------------------------------------------------------------

BASE = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_1",
    "service_tier": "default",
}


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, index: int = 0, **extra: Any
) -> dict[str, Any]:
    choice = {"index": index, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
    return {**BASE, "choices": [choice], **extra}


def tc(**fields: Any) -> dict[str, Any]:
    """One tool-call delta chunk; `name`/`arguments` go under `function`."""
    function = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    if function:
        fields["function"] = function
    return chunk({"tool_calls": [fields]})


def call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def fold(chunks: list[dict[str, Any]]) -> ChunkAccumulator:
    acc = ChunkAccumulator()
    for c in chunks:
        acc.add(c)
    return acc


def test_text_stream_with_usage_chunk() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    acc = fold(
        [
            chunk({"role": "assistant", "content": "", "refusal": None}, usage=None),
            chunk({"content": "Hel"}, usage=None),
            chunk({"content": "lo!"}, usage=None),
            chunk({}, "stop", usage=None),
            {**BASE, "choices": [], "usage": usage},
        ]
    )
    assert acc.message() == {"role": "assistant", "content": "Hello!"}
    assert acc.finish_reason == "stop"
    assert acc.usage == usage
    assert (acc.id, acc.model, acc.created) == ("chatcmpl-1", "gpt-4o-2024-08-06", 1700000000)
    assert (acc.system_fingerprint, acc.service_tier) == ("fp_1", "default")
    assert acc.to_completion() == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
        "system_fingerprint": "fp_1",
        "service_tier": "default",
    }


TOOL_CALL_SHAPES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "openai: opening delta then argument fragments": (
        [
            tc(index=0, id="call_a", type="function", name="get_weather", arguments=""),
            tc(index=0, arguments='{"ci'),
            tc(index=0, arguments='ty": "Pa'),
            tc(index=0, arguments='ris"}'),
        ],
        [call("call_a", "get_weather", '{"city": "Paris"}')],
    ),
    "one whole call per chunk": (
        [
            tc(index=0, id="call_a", type="function", name="f", arguments='{"x":1}'),
            tc(index=1, id="call_b", type="function", name="g", arguments='{"y":2}'),
        ],
        [call("call_a", "f", '{"x":1}'), call("call_b", "g", '{"y":2}')],
    ),
    "parallel calls interleaved by index": (
        [
            tc(index=0, id="call_a", type="function", name="f", arguments=""),
            tc(index=1, id="call_b", type="function", name="g", arguments=""),
            tc(index=1, arguments='{"y"'),
            tc(index=0, arguments='{"x"'),
            tc(index=0, arguments=":1}"),
            tc(index=1, arguments=":2}"),
        ],
        [call("call_a", "f", '{"x":1}'), call("call_b", "g", '{"y":2}')],
    ),
    "missing index: no id continues the last call, a new id starts one": (
        [
            tc(id="call_a", type="function", name="f", arguments=""),
            tc(arguments='{"x"'),
            tc(arguments=":1}"),
            tc(id="call_b", type="function", name="g", arguments='{"y'),
            tc(arguments='":2}'),
        ],
        [call("call_a", "f", '{"x":1}'), call("call_b", "g", '{"y":2}')],
    ),
    "missing index: the same id goes to the same call": (
        [
            tc(id="call_a", type="function", name="f", arguments='{"x"'),
            tc(id="call_b", type="function", name="g", arguments='{"y"'),
            tc(id="call_a", arguments=":1}"),
            tc(id="call_b", arguments=":2}"),
        ],
        [call("call_a", "f", '{"x":1}'), call("call_b", "g", '{"y":2}')],
    ),
    "parallel calls all at index 0 with different ids": (
        [
            tc(index=0, id="call_a", type="function", name="f", arguments=""),
            tc(index=0, arguments='{"x":1}'),
            tc(index=0, id="call_b", type="function", name="g", arguments=""),
            tc(index=0, arguments='{"y":2}'),
        ],
        [call("call_a", "f", '{"x":1}'), call("call_b", "g", '{"y":2}')],
    ),
    "id and name repeated on every delta": (
        [
            tc(index=0, id="call_a", type="function", name="f", arguments='{"x"'),
            tc(index=0, id="call_a", type="function", name="f", arguments=":1}"),
        ],
        [call("call_a", "f", '{"x":1}')],
    ),
    "id arrives after the opening delta": (
        [
            tc(index=0, type="function", name="f", arguments='{"x"'),
            tc(index=0, id="call_a", arguments=":1}"),
        ],
        [call("call_a", "f", '{"x":1}')],
    ),
    "name split across deltas": (
        [
            tc(index=0, id="call_a", type="function", name="get_", arguments=""),
            tc(index=0, name="weather", arguments="{}"),
        ],
        [call("call_a", "get_weather", "{}")],
    ),
    "empty-string id and null fields are ignored": (
        [
            tc(index=0, id="call_a", type="function", name="f", arguments=""),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "",
                            "type": None,
                            "function": {"name": None, "arguments": "{}"},
                        }
                    ]
                }
            ),
        ],
        [call("call_a", "f", "{}")],
    ),
}


@pytest.mark.parametrize(
    ("chunks", "expected"), TOOL_CALL_SHAPES.values(), ids=TOOL_CALL_SHAPES.keys()
)
def test_tool_call_shapes(chunks: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    opening = chunk({"role": "assistant", "content": None, "refusal": None})
    acc = fold([opening, *chunks, chunk({}, "tool_calls")])
    assert acc.message() == {"role": "assistant", "content": None, "tool_calls": expected}
    assert acc.tool_calls() == expected
    assert acc.finish_reason == "tool_calls"
    assert acc.to_completion()["choices"][0]["message"]["tool_calls"] == expected


def test_content_and_tool_calls_together() -> None:
    acc = fold(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Let me check."}),
            tc(index=0, id="call_a", type="function", name="f", arguments="{}"),
            chunk({}, "tool_calls"),
        ]
    )
    assert acc.message() == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [call("call_a", "f", "{}")],
    }


@pytest.mark.parametrize(
    ("deltas", "content"),
    [
        ([{"role": "assistant", "content": ""}], ""),  # an empty answer stays a string
        ([{"role": "assistant"}], None),  # no content ever arrived
        ([{"role": "assistant", "content": None}, {"content": "x"}], "x"),
    ],
)
def test_content_presence(deltas: list[dict[str, Any]], content: str | None) -> None:
    assert fold([chunk(d) for d in deltas]).message()["content"] == content


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_kept_in_the_field_it_arrived_in(field: str) -> None:
    acc = fold(
        [
            chunk({"role": "assistant", field: ""}),
            chunk({field: "Think "}),
            chunk({field: "hard."}),
            chunk({"content": "42"}),
            chunk({}, "stop"),
        ]
    )
    assert acc.message() == {"role": "assistant", "content": "42", field: "Think hard."}
    other = {"reasoning": "reasoning_content", "reasoning_content": "reasoning"}[field]
    assert other not in acc.message()


def test_refusal() -> None:
    acc = fold(
        [chunk({"role": "assistant", "refusal": "I can"}), chunk({"refusal": "'t."}, "stop")]
    )
    assert acc.message() == {"role": "assistant", "content": None, "refusal": "I can't."}
    assert acc.to_completion()["choices"][0]["message"]["refusal"] == "I can't."


def test_several_choices_by_index() -> None:
    acc = fold(
        [
            chunk({"role": "assistant", "content": "a"}, index=0),
            chunk({"role": "assistant", "content": "b"}, index=1),
            chunk({"content": "A"}, index=0),
            chunk({}, "stop", index=1),
            chunk({}, "length", index=0),
        ]
    )
    assert acc.choice_indexes == [0, 1]
    assert acc.message(0)["content"] == "aA"
    assert acc.message(1)["content"] == "b"
    assert (acc.choice_finish_reason(0), acc.choice_finish_reason(1)) == ("length", "stop")
    assert [c["index"] for c in acc.to_completion()["choices"]] == [0, 1]


def test_logprobs_and_unknown_delta_fields_reach_the_completion() -> None:
    token = {"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}
    first = chunk({"role": "assistant", "content": "a", "annotations": [{"type": "x"}]})
    first["choices"][0]["logprobs"] = {"content": [token], "refusal": None}
    second = chunk(
        {"content": "a", "audio": {"id": "au_1"}, "annotations": [{"type": "y"}]}, "stop"
    )
    second["choices"][0]["logprobs"] = {"content": [token]}
    choice = fold([first, second]).to_completion()["choices"][0]
    assert choice["logprobs"] == {"content": [token, token], "refusal": []}
    assert choice["message"]["annotations"] == [{"type": "x"}, {"type": "y"}]
    assert choice["message"]["audio"] == {"id": "au_1"}


def test_usage_on_every_chunk_keeps_the_last() -> None:
    acc = fold(
        [
            chunk({"content": "a"}, usage={"total_tokens": 1}),
            chunk({"content": "b"}, usage={"total_tokens": 2}),
            chunk({}, "stop", usage=None),
        ]
    )
    assert acc.usage == {"total_tokens": 2}


def test_empty_accumulator() -> None:
    acc = ChunkAccumulator()
    assert acc.message() == {"role": "assistant", "content": None}
    assert acc.finish_reason is None
    assert acc.usage is None
    completion = acc.to_completion()
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["finish_reason"] is None


def test_decoded_wire_stream_through_accumulator() -> None:
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "日本"}),
        chunk({"content": "語"}),
        chunk({}, "stop"),
    ]
    wire = (
        b": OPENROUTER PROCESSING\n\n" + b"".join(encode_data(json.dumps(c)) for c in chunks) + DONE
    )
    acc = ChunkAccumulator()
    decoder = SSEDecoder()
    for piece in byte_by_byte(wire):
        for event in decoder.feed(piece):
            if event.data is not None and not event.is_done:
                acc.add(json.loads(event.data))
    assert acc.message()["content"] == "日本語"


def test_arguments_sent_as_a_json_object() -> None:
    acc = fold([tc(index=0, id="call_a", type="function", name="f", arguments={"x": 1})])
    assert acc.tool_calls() == [call("call_a", "f", '{"x":1}')]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["index", "id", "delta", "choices", "tool_calls", "function", "name"])
            | st.sampled_from(["arguments", "content", "usage", "logprobs", "role", "type"])
            | st.text(max_size=3),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(st.lists(json_values, max_size=6))
def test_malformed_chunks_never_raise(chunks: list[Any]) -> None:
    acc = ChunkAccumulator()
    for value in chunks:
        acc.add(value)
    for index in acc.choice_indexes or [0]:
        assert acc.message(index)["role"] == "assistant"
    json.dumps(acc.to_completion())
