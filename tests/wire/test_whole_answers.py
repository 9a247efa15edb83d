"""A whole JSON answer to a stream request, relayed as the stream the API would have sent.

For the Responses and Messages relays: `whole(raw)` followed by `end_round()` gives the round
the same answer streamed gives; the client reads a valid event stream (checked here and by the
openai / anthropic SDKs' own stream readers); extract calls stay hidden; a body that is not an
answer ends the stream with the wire's error event, without raising.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.wire.base import Round
from proxy.wire.messages.stream import MessagesRelay
from proxy.wire.responses.adapter import Relay
from proxy.wire.responses.whole import NOT_A_RESPONSE
from proxy.wire.sse import SSEDecoder
from tests.wire.messages.messages_cases import (
    USAGE_1,
    USAGE_2,
    client_view,
    relay_round,
    reply,
    stream,
    text,
)
from tests.wire.messages.messages_cases import extract as m_extract
from tests.wire.messages.messages_cases import thinking as m_thinking
from tests.wire.messages.messages_cases import use as m_use
from tests.wire.responses.test_responses_stream import (
    call,
    extract,
    items_seen,
    msg,
    parse,
    response,
    round_events,
    rs,
    run,
    search,
    usage,
)


def same_round(a: Round, b: Round) -> None:
    assert a.message == b.message
    assert a.usage == b.usage
    assert a.only_extract == b.only_extract


try:  # the HTTP library anthropic's SDK takes a client of (httpx2 in its newer releases)
    import httpx2 as anthropic_http
except ImportError:  # pragma: no cover
    anthropic_http = httpx  # type: ignore[no-redef]


def sdk_transport(body: bytes, http: Any = httpx) -> Any:
    """An HTTP client (of `http`, httpx or httpx2) whose every answer is `body` as an event
    stream."""

    def answer(request: Any) -> Any:
        return http.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return http.Client(transport=http.MockTransport(answer))


# -- Responses -----------------------------------------------------------------------------


def refusal(n: int) -> dict[str, Any]:
    part = {"type": "refusal", "refusal": "I cannot help with that."}
    return {"type": "message", "id": f"msg_{n}", "role": "assistant", "content": [part]}


def completed(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "status": "completed"} if item["type"] in ("message", "function_call") else item


OUTPUTS = {
    "reasoning and text": [rs(1), msg(2)],
    "text and a call": [msg(1), call(2)],
    "two calls": [call(1), call(2, arguments="{}")],
    "a search and text": [search(1), msg(2)],
    "empty arguments": [call(1, arguments="")],
    "extract beside a call": [rs(1), extract(2), call(3)],
    "only an extract": [rs(1), extract(2)],
}


@pytest.mark.parametrize("output", list(OUTPUTS.values()), ids=list(OUTPUTS))
def test_a_response_gives_the_round_its_stream_gives(output: list[dict[str, Any]]) -> None:
    output = [completed(x) for x in output]
    answer = response("resp_1", output, usage(30, 9, cached=10, reasoning=4))
    streamed, whole = Relay(), Relay()
    run(streamed, round_events("resp_1", output, usage(30, 9, cached=10, reasoning=4)))
    sent = whole.whole(orjson.dumps(answer))
    a, b = streamed.end_round(), whole.end_round()
    same_round(a, b)
    assert a.raw.output == b.raw.output == output
    assert a.raw.visible == b.raw.visible
    events = parse([*sent, *whole.finish()])
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert items_seen(events) == a.raw.visible
    assert events[-1]["response"]["output"] == a.raw.visible
    assert events[-1]["response"]["usage"] == answer["usage"]


def test_the_openai_sdk_reads_the_stream_and_folds_the_same_response() -> None:
    output = [rs(1), completed(msg(2, "Hello there")), completed(call(3))]
    answer = response("resp_1", output, usage(30, 9))
    relay = Relay()
    sent = relay.whole(orjson.dumps(answer))
    relay.end_round()
    body = b"".join([*sent, *relay.finish()])
    with (
        sdk_transport(body) as http,
        openai.OpenAI(base_url="http://x/v1", api_key="k", http_client=http) as client,
        client.responses.stream(model="gpt-test", input="hi") as events,
    ):
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert deltas == ["Hello there"]
    assert final.id == "resp_1"
    assert final.output_text == "Hello there"
    assert [x.model_dump(exclude_none=True) for x in final.output] == output
    assert final.usage is not None and final.usage.total_tokens == 39


def test_a_refusal_streams_as_refusal_events() -> None:
    output = [completed(refusal(1))]
    relay = Relay()
    sent = relay.whole(orjson.dumps(response("resp_1", output, usage(30, 9))))
    relay.end_round()
    body = b"".join([*sent, *relay.finish()])
    events = parse([body])
    assert [e["type"] for e in events][2:-1] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert events[3]["part"] == {"type": "refusal", "refusal": ""}
    with (
        sdk_transport(body) as http,
        openai.OpenAI(base_url="http://x/v1", api_key="k", http_client=http) as client,
        client.responses.stream(model="gpt-test", input="hi") as stream,
    ):
        final = stream.get_final_response()
    assert [x.model_dump(exclude_none=True) for x in final.output] == output


def test_an_extract_call_beside_a_client_call_is_hidden() -> None:
    output = [completed(x) for x in (rs(1), extract(2), call(3))]
    relay = Relay()
    events = parse(relay.whole(orjson.dumps(response("resp_1", output, usage(30, 9)))))
    rnd = relay.end_round()
    assert not rnd.only_extract
    assert [c["function"]["name"] for c in rnd.message["tool_calls"]] == [
        EXTRACT_TOOL_NAME,
        "exec_command",
    ]
    assert items_seen(events) == [output[0], output[2]]
    assert all(EXTRACT_TOOL_NAME not in orjson.dumps(e.get("item")).decode() for e in events)


def test_a_pure_extract_answer_shows_nothing_and_the_next_round_continues() -> None:
    first = [completed(x) for x in (rs(1), extract(2))]
    relay = Relay()
    sent = relay.whole(orjson.dumps(response("resp_1", first, usage(30, 9))))
    rnd = relay.end_round()
    assert rnd.only_extract
    assert [e["type"] for e in parse(sent)] == ["response.created", "response.in_progress"]
    # The next round (also whole) continues the one response the client sees.
    second = [completed(msg(3, "Found it"))]
    sent += relay.whole(orjson.dumps(response("resp_2", second, usage(50, 5))))
    assert not relay.end_round().only_extract
    events = parse([*sent, *relay.finish()])
    assert [e["type"] for e in events].count("response.created") == 1
    assert items_seen(events) == second
    final = events[-1]["response"]
    assert final["id"] == "resp_1" and final["output"] == second
    assert final["usage"]["total_tokens"] == 39 + 55


@pytest.mark.parametrize("status", ["incomplete", "failed"])
def test_an_unfinished_response_ends_with_its_own_terminal_event(status: str) -> None:
    output = [completed(msg(1, "Partly"))]
    relay = Relay()
    sent = relay.whole(orjson.dumps(response("resp_1", output, usage(30, 9), status)))
    rnd = relay.end_round()
    assert rnd.raw.status == status and not rnd.only_extract
    events = parse([*sent, *relay.finish()])
    assert events[-1]["type"] == f"response.{status}"
    assert events[-1]["response"]["output"] == output


ERRORS: dict[str, tuple[bytes, str, str | None]] = {
    "an OpenAI error": (
        b'{"error": {"message": "Rate limited", "type": "rate_limit", "code": "rate_limit"}}',
        "Rate limited",
        "rate_limit",
    ),
    "not JSON": (b"<html>Bad gateway</html>", NOT_A_RESPONSE, "upstream_invalid_response"),
    "not a response": (b'{"choices": []}', NOT_A_RESPONSE, "upstream_invalid_response"),
    "a list": (b"[1, 2]", NOT_A_RESPONSE, "upstream_invalid_response"),
    "bad output": (
        b'{"object": "response", "output": [1]}',
        NOT_A_RESPONSE,
        "upstream_invalid_response",
    ),
}


@pytest.mark.parametrize(("body", "message", "code"), list(ERRORS.values()), ids=list(ERRORS))
def test_a_body_that_is_not_a_response_ends_with_an_error_event(
    body: bytes, message: str, code: str | None
) -> None:
    relay = Relay()
    first = run(relay, round_events("resp_0", [completed(extract(1))], usage(3, 1)))
    relay.end_round()
    sent = relay.whole(body)
    rnd = relay.end_round()
    assert not rnd.only_extract and rnd.message.get("tool_calls") is None
    events = parse([*first, *sent, *relay.finish()])
    assert events[-1] == {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "sequence_number": len(events) - 1,
    }


# -- Messages ------------------------------------------------------------------------------

MESSAGES = {
    "thinking, text and a call": (
        [m_thinking("hm"), text("Hello"), m_use("toolu_1", p="a")], "tool_use"
    ),
    "text": ([text("Done.")], "end_turn"),
    "a call without input": ([m_use("toolu_1")], "tool_use"),
    "extract beside a call": (
        [text("Look."), m_extract("toolu_x"), m_use("toolu_2", p="b")], "tool_use"
    ),
    "only an extract": ([m_thinking("need it"), m_extract("toolu_x")], "tool_use"),
}  # fmt: skip


@pytest.mark.parametrize(("blocks", "stop"), list(MESSAGES.values()), ids=list(MESSAGES))
def test_a_message_gives_the_round_its_stream_gives(
    blocks: list[dict[str, Any]], stop: str
) -> None:
    streamed, whole = MessagesRelay(), MessagesRelay()
    sent_streamed = relay_round(streamed, stream("msg_1", blocks, stop, USAGE_1, output=9))
    answer = reply("msg_1", blocks, stop, {**USAGE_1, "output_tokens": 9})
    sent_whole = b"".join(whole.whole(orjson.dumps(answer)))
    a, b = streamed.end_round(), whole.end_round()
    same_round(a, b)
    assert a.raw == b.raw
    # The client sees the message the streamed answer shows, and no extract block.
    _, seen = client_view(sent_streamed + b"".join(streamed.finish(hidden_last=a.only_extract)))
    events, seen_whole = client_view(
        sent_whole + b"".join(whole.finish(hidden_last=b.only_extract))
    )
    assert seen_whole == seen
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert EXTRACT_TOOL_NAME not in orjson.dumps(seen["content"]).decode()
    assert seen["usage"] == {**USAGE_1, "output_tokens": 9}


def test_the_anthropic_sdk_reads_the_stream_and_folds_the_same_message() -> None:
    blocks = [m_thinking("hm"), text("Hello"), m_extract("toolu_x"), m_use("toolu_1", p="a")]
    answer = reply("msg_1", blocks, "tool_use", {**USAGE_1, "output_tokens": 9})
    relay = MessagesRelay()
    sent = relay.whole(orjson.dumps(answer))
    relay.end_round()
    body = b"".join([*sent, *relay.finish()])
    with (
        sdk_transport(body, anthropic_http) as http,
        anthropic.Anthropic(base_url="http://x", api_key="k", http_client=http) as client,
        client.messages.stream(
            model="claude", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as events,
    ):
        final = events.get_final_message()
    assert [b.model_dump(exclude_none=True) for b in final.content] == [
        blocks[0],
        blocks[1],
        blocks[3],
    ]
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 9 and final.usage.cache_read_input_tokens == 50


def test_a_pure_extract_message_shows_no_block_and_the_next_round_continues() -> None:
    relay = MessagesRelay()
    first = reply("msg_1", [m_extract("toolu_x")], "tool_use", {**USAGE_1, "output_tokens": 4})
    sent = relay.whole(orjson.dumps(first))
    rnd = relay.end_round()
    assert rnd.only_extract
    assert [orjson.loads(e.data or "")["type"] for e in SSEDecoder().feed(b"".join(sent))] == [
        "message_start"
    ]
    second = reply("msg_2", [text("Found it.")], "end_turn", {**USAGE_2, "output_tokens": 3})
    sent += relay.whole(orjson.dumps(second))
    assert not relay.end_round().only_extract
    events, seen = client_view(b"".join([*sent, *relay.finish()]))
    assert [e["type"] for e in events].count("message_start") == 1
    assert seen["id"] == "msg_1" and seen["content"] == [text("Found it.")]
    assert seen["stop_reason"] == "end_turn"
    assert seen["usage"]["output_tokens"] == 7
    assert seen["usage"]["input_tokens"] == USAGE_1["input_tokens"] + USAGE_2["input_tokens"]


M_ERRORS: dict[str, tuple[bytes, dict[str, Any]]] = {
    "an Anthropic error": (
        b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
        {"type": "overloaded_error", "message": "Overloaded"},
    ),
    "not JSON": (b"<html>Bad gateway</html>", {"type": "api_error"}),
    "not a message": (b'{"choices": []}', {"type": "api_error"}),
    "bad content": (b'{"type": "message", "content": ["x"]}', {"type": "api_error"}),
}


@pytest.mark.parametrize(("body", "error"), list(M_ERRORS.values()), ids=list(M_ERRORS))
def test_a_body_that_is_not_a_message_ends_with_an_error_event(
    body: bytes, error: dict[str, Any]
) -> None:
    relay = MessagesRelay()
    sent = relay.whole(body)
    rnd = relay.end_round()
    assert not rnd.only_extract
    ends = relay.finish()
    assert ends == []  # nothing follows the error event
    events = [(e.event, orjson.loads(e.data or "")) for e in SSEDecoder().feed(b"".join(sent))]
    assert len(events) == 1
    name, data = events[0]
    assert name == "error" and data["type"] == "error"
    assert error.items() <= data["error"].items()
