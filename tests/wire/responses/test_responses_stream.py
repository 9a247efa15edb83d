"""The Responses stream relay: several upstream rounds reach the client as one response,
with the proxy's extract calls (and reasoning that led only to them) never shown, output
indexes and sequence numbers consistent, and one `response.completed` with summed usage."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.session.extract_tool import EXTRACT_TOOL_NAME, split_calls
from proxy.wire.base import Usage
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.reply import (
    RoundResult,
    hidden_indexes,
    merge_responses,
    round_of,
    to_round,
    usage_of,
)
from proxy.wire.responses.stream import ResponsesRelay, encode_event, error_event
from proxy.wire.responses.to_neutral import X_ITEMS, output_to_message
from proxy.wire.responses.tool import EXTRACT_TOOL
from proxy.wire.sse import SSEDecoder
from proxy.wire.usage import RESPONSES, usage_sum

Event = tuple[str, dict[str, Any], bytes]
CLIENT_TOOLS = [{"type": "function", "name": "exec_command", "parameters": {}}]


def rs(n: int, secret: str = "enc") -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{n}",
        "summary": [{"type": "summary_text", "text": f"thinking {n}"}],
        "encrypted_content": f"{secret}{n}",
    }


def msg(n: int, text: str = "hello") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": f"msg_{n}", "role": "assistant", "content": [part]}


def call(n: int, name: str = "exec_command", arguments: str = '{"cmd":"ls"}') -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": name,
        "arguments": arguments,
    }


def extract(n: int) -> dict[str, Any]:
    return call(n, EXTRACT_TOOL_NAME, '{"toolcall_id":"call_0"}')


def search(n: int) -> dict[str, Any]:
    return {"type": "web_search_call", "id": f"ws_{n}", "status": "completed"}


def usage(i: int, o: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": i,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": i + o,
    }


def response(
    rid: str, output: list[Any], use: Any = None, status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": 1000 + len(rid),
        "status": status,
        "model": "gpt-test",
        "instructions": "rules\n\nsummary",
        "output": output,
        "tools": [*CLIENT_TOOLS, EXTRACT_TOOL],
        "usage": use,
    }


def _item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """The events OpenAI streams for one output item, between added and done."""
    at = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        args = item["arguments"]
        return [
            {"type": "response.function_call_arguments.delta", **at, "delta": args[:4]},
            {"type": "response.function_call_arguments.delta", **at, "delta": args[4:]},
            {"type": "response.function_call_arguments.done", **at, "arguments": args},
        ]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": []}
        at = {**at, "content_index": 0}
        return [
            {"type": "response.content_part.added", **at, "part": part},
            {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
            {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
        ]
    if item["type"] == "reasoning":
        text = item["summary"][0]["text"]
        part = {"type": "summary_text", "text": ""}
        at = {**at, "summary_index": 0}
        return [
            {"type": "response.reasoning_summary_part.added", **at, "part": part},
            {"type": "response.reasoning_summary_text.delta", **at, "delta": text},
            {"type": "response.reasoning_summary_text.done", **at, "text": text},
            {"type": "response.reasoning_summary_part.done", **at, "part": {**part, "text": text}},
        ]
    return [{"type": "response.web_search_call.completed", **at}]


def round_events(
    rid: str, output: list[Any], use: Any = None, *, end: str | None = "response.completed"
) -> list[Event]:
    """One upstream round as OpenAI streams it (sequence numbers from 0)."""
    start = response(rid, [], None, "in_progress")
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(output):
        pending = {**item, "status": "in_progress"}
        events.append(
            {"type": "response.output_item.added", "output_index": index, "item": pending}
        )
        events.extend(_item_events(index, item))
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    if end is not None:
        status = end.removeprefix("response.")
        events.append({"type": end, "response": response(rid, output, use, status)})
    numbered = [{**e, "sequence_number": n} for n, e in enumerate(events)]
    return [(e["type"], e, encode_event(e["type"], e)) for e in numbered]


def close_round(relay: ResponsesRelay) -> RoundResult:
    """End a round; the pipeline's view of it agrees with the relay's own result."""
    result = relay.end_round()
    rnd = to_round(result)
    assert rnd.raw is result
    assert rnd.only_extract == result.only_extract
    assert rnd.usage == usage_of(result.usage)
    assert rnd.message == output_to_message(result.output)
    return result


def run(relay: ResponsesRelay, events: list[Event]) -> list[bytes]:
    return [chunk for name, data, raw in events for chunk in relay.feed(name, data, raw)]


def parse(chunks: list[bytes], first_index: int = 0) -> list[dict[str, Any]]:
    """What a client reads, checked as the openai SDK would rely on it."""
    decoder = SSEDecoder()
    events = [e for e in [*decoder.feed(b"".join(chunks)), *decoder.flush()] if e.data]
    out = [json.loads(e.data or "") for e in events]
    added: list[int] = []
    for n, (event, data) in enumerate(zip(events, out, strict=True)):
        assert event.event == data["type"]
        assert data["sequence_number"] == n  # counted over everything sent
        if data["type"] == "response.output_item.added":
            assert data["output_index"] == len(added) + first_index  # consecutive, all rounds
            added.append(data["output_index"])
        elif "output_index" in data:
            assert data["output_index"] in added
    types = [d["type"] for d in out]
    for once in ("response.created", "response.in_progress"):
        assert types.count(once) <= 1
    return out


def items_seen(events: list[dict[str, Any]]) -> list[Any]:
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


def test_one_round_goes_through_byte_for_byte_until_completed() -> None:
    events = round_events("resp_1", [rs(1), msg(1)], usage(10, 5))
    plain = [
        (n, {**d, "response": {**d["response"], "tools": CLIENT_TOOLS}})
        if "response" in d
        else (n, d)
        for n, d, _ in events
    ]
    events = [(n, d, encode_event(n, d)) for n, d in plain]
    relay = ResponsesRelay()
    sent = run(relay, events)
    assert sent == [raw for _, _, raw in events[:-1]]  # nothing rewritten, completed held
    result = close_round(relay)
    assert (result.status, result.only_extract, result.visible) == (
        "completed",
        False,
        [rs(1), msg(1)],
    )
    final = parse([*sent, *relay.final_events()])
    done = final[-1]
    assert done["type"] == "response.completed"
    assert done["response"]["output"] == [rs(1), msg(1)]
    assert done["response"]["usage"] == usage(10, 5)
    assert done["response"]["id"] == "resp_1"
    assert relay.final_events() == []  # only one completed, ever


def test_an_extract_round_then_the_answer_reach_the_client_as_one_response() -> None:
    relay = ResponsesRelay(client_fields={"instructions": "rules"})
    first = run(relay, round_events("resp_a", [rs(1, "hidden"), extract(2)], usage(100, 10, 80, 7)))
    one = close_round(relay)
    assert one.only_extract and one.status == "completed"
    assert one.hidden == [rs(1, "hidden"), extract(2)] and one.extract_calls == [extract(2)]
    assert one.output == [rs(1, "hidden"), extract(2)] and one.visible == []
    assert one.usage == usage(100, 10, 80, 7)
    second = run(relay, round_events("resp_b", [rs(3), call(4)], usage(150, 20, 100, 3)))
    two = close_round(relay)
    assert not two.only_extract and two.visible == [rs(3), call(4)]
    sent = [*first, *second, *relay.final_events()]
    wire = b"".join(sent)
    assert EXTRACT_TOOL_NAME.encode() not in wire and b"hidden1" not in wire
    events = parse(sent)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types.count("response.completed") == 1 and types[-1] == "response.completed"
    assert events[0]["response"]["id"] == "resp_a"
    assert events[0]["response"]["tools"] == CLIENT_TOOLS
    assert events[0]["response"]["instructions"] == "rules"
    assert items_seen(events) == [rs(3), call(4)]
    final = events[-1]["response"]
    assert (final["id"], final["created_at"], final["status"]) == ("resp_a", 1006, "completed")
    assert final["output"] == [rs(3), call(4)]
    assert final["tools"] == CLIENT_TOOLS and final["instructions"] == "rules"
    assert final["usage"] == usage(250, 30, 180, 10)


# (round output, visible positions, only_extract), hiding extract calls
ROUNDS: list[tuple[str, list[Any], list[int], bool]] = [
    ("text only", [msg(1)], [0], False),
    ("reasoning then an extract call", [rs(1), extract(2)], [], True),
    ("text then an extract call", [msg(1), extract(2)], [0], True),
    ("reasoning shown with the visible call after it", [rs(1), call(2), extract(3)], [0, 1], False),
    ("an extract between reasoning and a call", [rs(1), extract(2), call(3)], [0, 2], False),
    ("reasoning nothing visible follows goes", [rs(1), extract(2), rs(3)], [], True),
    ("trailing reasoning of a round with text", [msg(1), extract(2), rs(3)], [0], True),
    ("trailing reasoning without extract calls", [msg(1), rs(2)], [0, 1], False),
    ("a lone reasoning item", [rs(1)], [0], False),
    ("two extract calls", [extract(1), extract(2)], [], True),
    ("a server search then an extract call", [search(1), extract(2)], [0], True),
    ("two reasoning items before an extract call", [rs(1), rs(2), extract(3)], [], True),
]


@pytest.mark.parametrize(
    ("output", "visible", "only_extract"), [r[1:] for r in ROUNDS], ids=[r[0] for r in ROUNDS]
)
def test_what_a_round_shows(output: list[Any], visible: list[int], only_extract: bool) -> None:
    expected = [output[i] for i in visible]
    hidden = [x for i, x in enumerate(output) if i not in visible]
    assert hidden_indexes(output) == set(range(len(output))) - set(visible)
    relay = ResponsesRelay()
    sent = run(relay, round_events("resp_1", output, usage(5, 5)))
    result = close_round(relay)
    events = parse([*sent, *relay.final_events()])
    assert items_seen(events) == expected == events[-1]["response"]["output"]
    assert (result.visible, result.hidden, result.only_extract) == (expected, hidden, only_extract)
    streamed = [e for e in events if e.get("item_id") or "item" in e]
    shown_ids = {x["id"] for x in expected}
    assert {e.get("item_id") or e["item"]["id"] for e in streamed} == shown_ids
    # the same without streaming
    non_streamed = round_of(response("resp_1", output, usage(5, 5)))
    assert (non_streamed.visible, non_streamed.hidden) == (expected, hidden)
    assert non_streamed.only_extract == only_extract
    assert merge_responses([response("resp_1", output)])["output"] == expected


def test_without_hiding_every_item_is_shown() -> None:
    output = [rs(1), extract(2)]
    relay = ResponsesRelay(hide_extract=False)
    sent = run(relay, round_events("resp_1", output))
    result = close_round(relay)
    events = parse([*sent, *relay.final_events()])
    assert items_seen(events) == output and not result.only_extract
    assert events[-1]["response"]["tools"] == [*CLIENT_TOOLS, EXTRACT_TOOL]
    assert round_of(response("r", output), hide_extract=False).visible == output


@pytest.mark.parametrize("end", ["response.failed", "response.incomplete"])
def test_a_failed_or_incomplete_round_ends_the_response(end: str) -> None:
    relay = ResponsesRelay()
    first = run(relay, round_events("resp_a", [extract(1)], usage(10, 1)))
    assert close_round(relay).only_extract
    second = run(relay, round_events("resp_b", [msg(2)], usage(20, 2), end=end))
    assert relay.finished and relay.final_events() == []
    result = close_round(relay)
    assert result.status == end.removeprefix("response.") and not result.only_extract
    events = parse([*first, *second])
    last = events[-1]
    assert last["type"] == end
    assert last["response"]["id"] == "resp_a" and last["response"]["output"] == [msg(2)]
    assert last["response"]["status"] == end.removeprefix("response.")
    assert last["response"]["usage"] == usage(30, 3)
    assert last["response"]["tools"] == CLIENT_TOOLS


def test_an_error_event_passes_in_sequence_and_ends_the_response() -> None:
    relay = ResponsesRelay()
    sent = run(relay, round_events("resp_a", [extract(1)], usage(1, 1)))
    close_round(relay)
    events = round_events("resp_b", [msg(1)], end=None)[:3]
    sent += run(relay, events)
    err = {"type": "error", "code": "server_error", "message": "boom", "param": None}
    sent += relay.feed("error", {**err, "sequence_number": 99}, b"raw")
    parsed = parse(sent)
    assert parsed[-1] == {**err, "sequence_number": len(parsed) - 1}
    assert relay.finished and relay.final_events() == []


def test_a_broken_round_shows_nothing_it_held_and_ends_with_an_error() -> None:
    relay = ResponsesRelay()
    sent = run(relay, round_events("resp_a", [rs(1), msg(2)], end=None)[:6])  # inside rs_1
    result = close_round(relay)
    assert result.status is None and not result.only_extract and result.visible == []
    assert result.output == [{**rs(1), "status": "in_progress"}]
    sent.append(relay.error_event("The upstream stream broke", "upstream_stream_error"))
    events = parse(sent)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1]["code"] == "upstream_stream_error" and relay.finished


def test_later_rounds_lose_their_created_and_queued_events() -> None:
    relay = ResponsesRelay()
    queued = {"type": "response.queued", "response": response("resp_a", []), "sequence_number": 0}
    first = relay.feed("response.queued", queued, encode_event(None, queued))
    first += run(relay, round_events("resp_a", [extract(1)])[0:])
    close_round(relay)
    assert relay.feed("response.queued", queued, b"") == []
    second = run(relay, round_events("resp_b", [msg(2)]))
    close_round(relay)
    types = [e["type"] for e in parse([*first, *second, *relay.final_events()])]
    assert types.count("response.queued") == 1
    assert types[:3] == ["response.queued", "response.created", "response.in_progress"]


def test_odd_events_pass_and_events_of_a_hidden_item_without_index_do_not() -> None:
    relay = ResponsesRelay()
    run(relay, round_events("resp_a", [extract(1)], end=None)[:3])  # extract call added
    assert relay.feed(None, {"type": "response.x", "item_id": "fc_1"}, b"x") == []
    assert relay.feed(None, {"type": "response.audio.delta", "delta": "a"}, b"a") == [b"a"]
    assert relay.feed(None, "not json", b"data: ?\n\n") == [b"data: ?\n\n"]


def test_error_event_shape() -> None:
    events = SSEDecoder().feed(error_event("stream broke", "upstream_stream_error", 7))
    assert events[0].event == "error"
    assert json.loads(events[0].data or "") == {
        "type": "error",
        "code": "upstream_stream_error",
        "message": "stream broke",
        "param": None,
        "sequence_number": 7,
    }


@pytest.mark.parametrize(
    ("usages", "expected"),
    [
        ([], None),
        ([None, "x"], None),
        ([usage(1, 2)], usage(1, 2)),
        ([usage(1, 2, 1, 1), None, usage(10, 20, 5, 6)], usage(11, 22, 6, 7)),
        (
            [{"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}, usage(1, 1, 1, 1)],
            usage(4, 2, 1, 1),
        ),
        (
            [{"input_tokens": True, "output_tokens": "7"}, {"input_tokens": 2, "extra": 1}],
            {"input_tokens": 2, "output_tokens": 0, "total_tokens": 0, "extra": 1},
        ),
    ],
)
def test_usage_sum(usages: list[Any], expected: Any) -> None:
    assert usage_sum(usages, RESPONSES) == expected


def test_merge_responses() -> None:
    rounds = [
        response("resp_a", [rs(1), extract(2)], usage(10, 1, 5, 1)),
        response("resp_b", [msg(3), extract(4)], usage(20, 2, 10, 0)),
        {**response("resp_c", [call(5)], usage(30, 3)), "status": "incomplete"},
    ]
    merged = merge_responses(rounds, client_fields={"instructions": "rules"})
    assert merged["output"] == [msg(3), call(5)]
    assert (merged["id"], merged["created_at"], merged["status"]) == ("resp_a", 1006, "incomplete")
    assert merged["usage"] == usage(60, 6, 15, 1)
    assert merged["tools"] == CLIENT_TOOLS and merged["instructions"] == "rules"
    assert rounds[0]["tools"] == [*CLIENT_TOOLS, EXTRACT_TOOL]  # the rounds are not edited
    assert merge_responses([{"id": "r", "output": None}]) == {"id": "r", "output": []}
    with pytest.raises(ValueError):
        merge_responses([])


# -- property: any rounds, streamed, give what the non-streamed merge gives -------------------

POOL = ["rs", "msg", "call", "extract", "search"]


def _item(kind: str, n: int) -> dict[str, Any]:
    makers = {"rs": rs, "msg": msg, "call": call, "extract": extract, "search": search}
    return makers[kind](n)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(POOL), max_size=5), min_size=1, max_size=4),
    st.booleans(),
)
def test_streamed_rounds_match_the_merged_response(kinds: list[list[str]], hide: bool) -> None:
    counter = iter(range(1000))
    outputs = [[_item(k, next(counter)) for k in r] for r in kinds]
    uses = [usage(10 * (i + 1), i + 1, i, 1) for i in range(len(outputs))]
    relay = ResponsesRelay(hide_extract=hide)
    sent: list[bytes] = []
    results = []
    for i, (output, use) in enumerate(zip(outputs, uses, strict=True)):
        sent += run(relay, round_events(f"resp_{i}", output, use))
        results.append(close_round(relay))
    sent += relay.final_events()
    events = parse(sent)
    final = events[-1]["response"]
    merged = merge_responses(
        [response(f"resp_{i}", o, u) for i, (o, u) in enumerate(zip(outputs, uses, strict=True))],
        hide_extract=hide,
    )
    assert final == merged
    assert items_seen(events) == final["output"] == [x for r in results for x in r.visible]
    assert [r.output for r in results] == outputs
    if hide:
        assert EXTRACT_TOOL_NAME.encode() not in b"".join(sent)
        for result in results:
            kept = {x["id"] for x in result.visible}
            assert all(x["id"] not in kept for x in result.hidden)
            # reasoning that led to hidden calls is never shown without what follows it
            shown = result.visible
            assert not (shown and shown[-1]["type"] == "reasoning" and result.extract_calls)


def test_a_round_that_streams_no_items_is_told_by_its_completed_response() -> None:
    relay = ResponsesRelay()
    events = round_events("resp_a", [rs(1), extract(2)], usage(1, 1))
    done = events[-1][1]
    sent = run(relay, [events[0], events[1], events[-1]])
    assert close_round(relay).only_extract
    sent += run(
        relay,
        [(n, d, r) for n, d, r in round_events("resp_b", [msg(3)]) if n == "response.completed"],
    )
    close_round(relay)
    sent += run(relay, round_events("resp_c", [call(4)]))
    close_round(relay)
    events = parse([*sent, *relay.final_events()], first_index=1)  # call_4's place in the output
    assert done["response"]["output"] == [rs(1), extract(2)]
    assert events[-1]["response"]["output"] == [msg(3), call(4)]
    assert items_seen(events) == [call(4)]


# -- what the pipeline relies on ----------------------------------------------------------------


def test_the_pipeline_continues_with_the_rounds_items_and_the_proxys_answers() -> None:
    relay = ResponsesRelay()
    output = [rs(1), extract(2)]
    run(relay, round_events("resp_a", output, usage(100, 10, 80)))
    rnd = to_round(relay.end_round())
    assert rnd.usage == Usage(total=110, prompt=100, cached=80, output=10)
    own, calls = split_calls(rnd.message.get("tool_calls"))
    assert own == [] and [c["id"] for c in calls] == ["call_2"]
    answer = {"role": "tool", "tool_call_id": "call_2", "content": "the original"}
    assert messages_to_items([rnd.message, answer]) == [
        *output,
        {"type": "function_call_output", "call_id": "call_2", "output": "the original"},
    ]


def test_events_as_text_comments_and_a_stray_done() -> None:
    relay, twin = ResponsesRelay(), ResponsesRelay()
    for name, data, raw in round_events("resp_a", [msg(1)])[:3]:
        assert relay.feed(name, orjson.dumps(data).decode(), raw) == twin.feed(name, data, raw)
    assert relay.feed(None, None, b": keep-alive\n\n") == [b": keep-alive\n\n"]
    assert relay.feed(None, "[DONE]", b"data: [DONE]\n\n") == []
    assert relay.feed(None, "{oops", b"data: {oops\n\n") == [b"data: {oops\n\n"]
    assert relay.sequence_number == 3


@pytest.mark.parametrize(
    ("body", "detail", "message", "code"),
    [
        (
            b'{"error": {"message": "Rate limit", "code": "rate_limit_exceeded"}}',
            None,
            "Rate limit",
            "rate_limit_exceeded",
        ),
        ({"error": {"message": "Bad", "code": None}}, None, "Bad", None),
        (
            b"<html>502</html>",
            None,
            "The upstream connection failed during the stream",
            "upstream_stream_error",
        ),
        (
            None,
            "ReadTimeout",
            "The upstream connection failed during the stream (ReadTimeout)",
            "upstream_stream_error",
        ),
    ],
)
def test_relay_error_events(body: Any, detail: str | None, message: str, code: str | None) -> None:
    relay = ResponsesRelay()
    sent = run(relay, round_events("resp_a", [msg(1)], end=None))
    sent.append(relay.error(body, detail))
    event = parse(sent)[-1]
    assert event == {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "sequence_number": len(sent) - 1,
    }
    assert relay.finish(hidden_last=False) == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("x", None),
        (usage(10, 5, 3), Usage(total=15, prompt=10, cached=3, output=5)),
        ({"input_tokens": 7, "output_tokens": 2}, Usage(total=9, prompt=7, cached=None, output=2)),
        ({"input_tokens": -1, "total_tokens": True}, Usage()),
    ],
)
def test_usage_of(raw: Any, expected: Usage | None) -> None:
    assert usage_of(raw) == expected


def test_a_round_with_a_malformed_call_still_reads_as_a_round() -> None:
    bad = {"type": "function_call", "call_id": 5, "name": "f"}
    result = round_of(response("r", [msg(1), bad, "junk"]))
    rnd = to_round(result)
    assert rnd.message == {"role": "assistant", "content": None, X_ITEMS: [msg(1), bad]}
    assert not rnd.only_extract and rnd.raw is result


def test_finish_sends_the_one_completed() -> None:
    relay = ResponsesRelay()
    sent = run(relay, round_events("resp_a", [extract(1)], usage(3, 1)))
    close_round(relay)
    sent += relay.finish(hidden_last=True)  # out of extract rounds: the client saw nothing
    final = parse(sent)[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["output"] == [] and final["response"]["status"] == "completed"
