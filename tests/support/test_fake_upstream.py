"""The fake OpenAI upstream, driven directly by the official SDK to show it is faithful.

Every other end-to-end test trusts this fake to behave like api.openai.com, so here the real
`openai` client (which validates nothing loosely: it warns or raises on shapes it does not
expect) parses its answers, and its raw streams go through `proxy.wire.sse` as the proxy will.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.wire.sse import ChunkAccumulator, SSEDecoder, SSEEvent
from tests.support.fake_upstream import FakeUpstream, Reply, count_prompt_tokens

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeUpstream) -> FakeUpstream:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client:
        yield client


def raw_events(fake: FakeUpstream, body: dict[str, Any]) -> list[SSEEvent]:
    """POST a chat request and decode the raw response stream, as the proxy will."""
    return raw_events_at(fake, "/chat/completions", body)


def raw_events_at(fake: FakeUpstream, path: str, body: dict[str, Any]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    with httpx.stream("POST", fake.url + path, json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for piece in response.iter_raw():
            events += decoder.feed(piece)
    return events + decoder.flush()


def accumulate(events: list[SSEEvent]) -> ChunkAccumulator:
    acc = ChunkAccumulator()
    for event in events:
        if event.data is not None and not event.is_done:
            acc.add(json.loads(event.data))
    return acc


def chunks_of(events: list[SSEEvent]) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in events if e.data is not None and not e.is_done]


# --- non-streaming -------------------------------------------------------------------------


def test_default_reply_is_a_real_chat_completion(fake: FakeUpstream, client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    completion = raw.parse()
    assert raw.headers["content-type"] == "application/json"
    assert raw.headers["x-request-id"].startswith("req_")
    assert int(raw.headers["openai-processing-ms"]) >= 1
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-4o"
    assert completion.system_fingerprint and completion.system_fingerprint.startswith("fp_")
    assert completion.service_tier == "default"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == "ok"
    assert choice.message.refusal is None
    assert choice.message.annotations == []
    assert choice.message.tool_calls is None
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens == count_prompt_tokens(fake.requests[0].json)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details and usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details and usage.completion_tokens_details.reasoning_tokens == 0
    # exactly the keys OpenAI sends, nothing the SDK had to tuck into model_extra
    assert completion.model_extra == {}
    assert choice.message.model_extra == {}


def test_tool_call_reply(fake: FakeUpstream, client: openai.OpenAI) -> None:
    fake.push(Reply.tool("get_weather", {"city": "Paris"}))
    completion = client.chat.completions.create(model="gpt-4o", messages=USER, tools=[WEATHER_TOOL])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.id.startswith("call_") and len(call.id) == 29
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"messages": []}, 3),
        ({"messages": [{"role": "user", "content": "abcd"}]}, 3 + 4 + 1),
        ({"messages": [{"role": "user", "content": "abcde"}]}, 3 + 4 + 2),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "abcd"}]}]},
            3 + 4 + 1,
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "ab", "arguments": "{}"},
                            }
                        ],
                    }
                ]
            },
            3 + 4 + 1,
        ),
        ({"messages": [], "tools": [{"a": "bcdef"}]}, 3 + 4),  # [{"a":"bcdef"}]: 15 chars
    ],
)
def test_count_prompt_tokens(body: dict[str, Any], expected: int) -> None:
    assert count_prompt_tokens(body) == expected


def test_prompt_tokens_grow_with_the_prompt(client: openai.OpenAI) -> None:
    small = client.chat.completions.create(model="gpt-4o", messages=USER)
    longer = [*USER, {"role": "assistant", "content": "x" * 400}, *USER]
    large = client.chat.completions.create(model="gpt-4o", messages=longer)
    with_tools = client.chat.completions.create(
        model="gpt-4o", messages=longer, tools=[WEATHER_TOOL]
    )
    assert small.usage and large.usage and with_tools.usage
    assert small.usage.prompt_tokens < large.usage.prompt_tokens < with_tools.usage.prompt_tokens
    assert large.usage.prompt_tokens - small.usage.prompt_tokens >= 100


def test_usage_override(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.push(Reply.text("hi", usage_override={"prompt_tokens": 190_000}))
    usage = client.chat.completions.create(model="gpt-4o", messages=USER).usage
    assert usage and usage.prompt_tokens == 190_000
    assert usage.total_tokens == 190_000 + usage.completion_tokens


def test_reasoning_fields_reach_the_client(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.push(
        Reply.text("42", reasoning_content="Let me think."), Reply.text("43", reasoning="Hmm.")
    )
    first = client.chat.completions.create(model="deepseek-reasoner", messages=USER)
    second = client.chat.completions.create(model="o4-mini", messages=USER)
    assert first.choices[0].message.model_extra == {"reasoning_content": "Let me think."}
    assert second.choices[0].message.model_extra == {"reasoning": "Hmm."}
    assert first.usage and first.usage.completion_tokens_details
    assert first.usage.completion_tokens_details.reasoning_tokens == 4


def test_n_choices(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.push(Reply.text("same"))
    completion = client.chat.completions.create(model="gpt-4o", messages=USER, n=2)
    assert [(c.index, c.message.content) for c in completion.choices] == [(0, "same"), (1, "same")]


# --- scripting -----------------------------------------------------------------------------


def test_replies_are_consumed_in_order_then_the_default(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    fake.push(Reply.text("one"), lambda body: Reply.text(f"{len(body['messages'])} messages"))
    assert fake.pending == 2
    answers = [
        client.chat.completions.create(model="m", messages=USER).choices[0].message.content
        for _ in range(3)
    ]
    assert answers == ["one", "1 messages", "ok"]
    fake.default = lambda body: Reply.text(body["model"])
    assert (
        client.chat.completions.create(model="gpt-x", messages=USER).choices[0].message.content
        == "gpt-x"
    )


def test_reset_forgets_everything(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.push(Reply.text("queued"))
    fake.context_window = 1
    fake.default = lambda body: Reply.text("default")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=USER)
    fake.reset()
    assert (fake.requests, fake.pending, fake.context_window, fake.default) == ([], 0, None, None)
    assert (
        client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "ok"
    )


def test_requests_are_recorded_with_headers(fake: FakeUpstream) -> None:
    with openai.OpenAI(
        base_url=fake.url,
        api_key="sk-secret",
        organization="org-123",
        project="proj_1",
        default_headers={"X-Session-Id": "s1"},
        max_retries=0,
    ) as client:
        client.chat.completions.create(model="gpt-4o", messages=USER, temperature=0.5)
    [request] = fake.requests
    assert (request.method, request.path, request.query) == ("POST", "/v1/chat/completions", "")
    assert request.headers["authorization"] == "Bearer sk-secret"
    assert request.headers["openai-organization"] == "org-123"
    assert request.headers["openai-project"] == "proj_1"
    assert request.headers["x-session-id"] == "s1"
    assert request.json == {"messages": USER, "model": "gpt-4o", "temperature": 0.5}
    assert json.loads(request.body) == request.json
    assert abs(request.received_at - time.time()) < 5
    assert request.completed and not request.disconnected
    assert fake.chat_requests == [request]


# --- errors --------------------------------------------------------------------------------


def test_rate_limit_error(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.push(Reply.rate_limited(retry_after=7))
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    error = caught.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.type == "tokens"
    assert error.response.headers["retry-after"] == "7"
    assert error.response.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (422, openai.UnprocessableEntityError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_error_statuses(
    client: openai.OpenAI, fake: FakeUpstream, status: int, exception: type[Exception], stream: bool
) -> None:
    fake.push(Reply.error(status, "Something went wrong.", "server_error", "oops", param="x"))
    with pytest.raises(exception) as caught:
        client.chat.completions.create(model="gpt-4o", messages=USER, stream=stream)
    assert isinstance(caught.value, openai.APIStatusError)
    assert caught.value.body == {
        "message": "Something went wrong.",
        "type": "server_error",
        "param": "x",
        "code": "oops",
    }


def test_error_given_as_fields(client: openai.OpenAI, fake: FakeUpstream) -> None:
    error = {"message": "Boom.", "type": "server_error", "param": None, "code": None}
    fake.push(Reply(status=502, error=error, headers={"x-should-retry": "false"}))
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert caught.value.status_code == 502
    assert caught.value.body == error
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert Reply.error(400, "x").error == {
        "message": "x",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_context_window_gives_openais_context_length_error(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    fake.push(Reply.text("not consumed by a refused request"))
    messages = [{"role": "user", "content": "x" * 400}]
    tokens = count_prompt_tokens({"messages": messages})
    fake.context_window = tokens - 1
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=messages)
    error = caught.value
    assert error.code == "context_length_exceeded"
    assert error.param == "messages"
    assert error.type == "invalid_request_error"
    assert error.body == {
        "message": f"This model's maximum context length is {tokens - 1} tokens. However, your "
        f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    assert fake.pending == 1
    fake.context_window = tokens
    answer = client.chat.completions.create(model="gpt-4o", messages=messages)
    assert answer.choices[0].message.content == "not consumed by a refused request"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "We could not parse the JSON body of your request."),
        (b'{"model": "m"}', "Missing required parameter: 'messages'."),
        (b'{"model": "m", "messages": "hi"}', "Invalid type for 'messages'"),
        (b'{"messages": []}', "you must provide a model parameter"),
        (
            b'{"messages": [], "model": 4}',
            "Invalid type for 'model': expected a string, but got an integer",
        ),
        (b'{"messages": [], "model": "m", "n": "2"}', "Invalid type for 'n'"),
        (b'{"messages": [], "model": "m", "n": 0}', "0 is less than the minimum of 1 - 'n'"),
    ],
)
def test_malformed_requests(fake: FakeUpstream, content: bytes, message: str) -> None:
    response = httpx.post(fake.url + "/chat/completions", content=content)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(message)
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


# --- streaming -----------------------------------------------------------------------------


def test_stream_with_the_sdk(client: openai.OpenAI, fake: FakeUpstream) -> None:
    text = "The weather in Paris is sunny, 21 degrees."
    fake.push(Reply.text(text))
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True))
    assert len({(c.id, c.created, c.model, c.system_fingerprint) for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" and c.usage is None for c in chunks)
    first = chunks[0].choices[0].delta
    assert (first.role, first.content, first.refusal) == ("assistant", "", None)
    contents = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert len(contents) > 3
    assert "".join(c or "" for c in contents) == text
    last = chunks[-1].choices[0]
    assert (last.finish_reason, last.delta.content, last.delta.role) == ("stop", None, None)


def test_stream_wire_format(fake: FakeUpstream) -> None:
    events = raw_events(fake, {"model": "gpt-4o", "messages": USER, "stream": True})
    assert all(e.raw.startswith(b"data: ") and e.raw.endswith(b"\n\n") for e in events)
    assert events[-1].raw == b"data: [DONE]\n\n"
    chunks = chunks_of(events)
    assert all("usage" not in c for c in chunks)  # only present when include_usage is asked
    assert chunks[0]["choices"][0] == {
        "index": 0,
        "delta": {"role": "assistant", "content": "", "refusal": None},
        "logprobs": None,
        "finish_reason": None,
    }
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }


def test_stream_include_usage(client: openai.OpenAI, fake: FakeUpstream) -> None:
    body = {
        "model": "gpt-4o",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = chunks_of(raw_events(fake, body))
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == count_prompt_tokens(body)
    stream = client.chat.completions.create(
        model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    *_, last = stream
    assert last.choices == []
    assert (
        last.usage
        and last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    )


def test_stream_tool_call_deltas(fake: FakeUpstream) -> None:
    fake.push(
        Reply(
            tool_calls=[("get_weather", '{"city": "Paris", "unit": "celsius"}'), ("get_time", "{}")]
        )
    )
    chunks = chunks_of(raw_events(fake, {"model": "gpt-4o", "messages": USER, "stream": True}))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": None, "refusal": None}
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    opening = calls[0]
    assert set(opening) == {"index", "id", "type", "function"}
    assert opening["function"] == {"name": "get_weather", "arguments": ""}
    fragments = [c for c in calls if c["index"] == 0][1:]
    assert len(fragments) > 3
    assert all(
        set(f) == {"index", "function"} and set(f["function"]) == {"arguments"} for f in fragments
    )
    assert (
        "".join(f["function"]["arguments"] for f in fragments)
        == '{"city": "Paris", "unit": "celsius"}'
    )
    assert [c["index"] for c in calls if "id" in c] == [0, 1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_sdk_stream_helper_and_accumulator_agree(client: openai.OpenAI, fake: FakeUpstream) -> None:
    """The SDK's own accumulator and proxy.wire.sse rebuild the same message from the fake."""
    reply = Reply(
        content="Checking both.",
        tool_calls=[
            {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}},
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
            },
        ],
    )
    fake.push(reply, reply)
    with client.chat.completions.stream(
        model="gpt-4o", messages=USER, tools=[WEATHER_TOOL]
    ) as stream:
        final = stream.get_final_completion()
    acc = accumulate(raw_events(fake, {"model": "gpt-4o", "messages": USER, "stream": True}))
    sdk_message = final.choices[0].message
    assert acc.message() == {
        "role": "assistant",
        "content": sdk_message.content,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in sdk_message.tool_calls or []
        ],
    }
    assert acc.finish_reason == final.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "reply",
    [
        Reply.text("A longer answer, streamed in many small pieces: ünïcödé 日本語 😀."),
        Reply.tool("get_weather", {"city": "Paris"}, id="call_x", content="Let me look."),
        Reply(
            tool_calls=[
                {"id": "call_a", "name": "f", "arguments": "{}"},
                {"id": "call_b", "name": "g", "arguments": '{"k":[1,2]}'},
            ]
        ),
        Reply.text("42", reasoning_content="Six times seven."),
        Reply.text("42", reasoning="Six times seven."),
        Reply(refusal="I can't help with that."),
        Reply.text("cut", finish_reason="length"),
    ],
    ids=["text", "tool", "parallel", "reasoning_content", "reasoning", "refusal", "length"],
)
def test_stream_accumulates_to_the_non_streaming_completion(
    fake: FakeUpstream, reply: Reply
) -> None:
    fake.default = lambda body: reply
    body = {"model": "gpt-4o", "messages": USER, "stream_options": {"include_usage": True}}
    whole = httpx.post(fake.url + "/chat/completions", json=body).json()
    streamed = accumulate(raw_events(fake, {**body, "stream": True})).to_completion()
    for completion in (whole, streamed):
        del completion["id"], completion["created"]
        completion["choices"][0]["message"].pop("annotations", None)
    assert streamed == whole


@pytest.mark.parametrize("style", ["split", "whole", "no_index", "index0"])
def test_tool_call_styles_rebuild_the_same_calls(fake: FakeUpstream, style: str) -> None:
    calls = [
        {"id": "call_a", "name": "f", "arguments": '{"x": 1}'},
        {"id": "call_b", "name": "g", "arguments": '{"y": 22}'},
    ]
    fake.push(Reply(tool_calls=calls, tool_call_style=style))  # type: ignore[arg-type]
    events = raw_events(fake, {"model": "gpt-4o", "messages": USER, "stream": True})
    deltas = [d for c in chunks_of(events) for d in c["choices"][0]["delta"].get("tool_calls", [])]
    if style == "whole":
        assert len(deltas) == 2
    if style == "no_index":
        assert all("index" not in d for d in deltas)
    if style == "index0":
        assert {d["index"] for d in deltas} == {0}
    assert accumulate(events).tool_calls() == [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls
    ]


def test_n_choices_stream(fake: FakeUpstream) -> None:
    fake.push(Reply.text("two of us"))
    acc = accumulate(
        raw_events(fake, {"model": "gpt-4o", "messages": USER, "stream": True, "n": 2})
    )
    assert acc.choice_indexes == [0, 1]
    assert acc.message(0)["content"] == acc.message(1)["content"] == "two of us"


async def test_async_client(fake: FakeUpstream) -> None:
    fake.push(
        Reply.text("async hello"), Reply.tool("get_weather", {"city": "Oslo"}), Reply.rate_limited()
    )
    async with openai.AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client:
        completion = await client.chat.completions.create(model="gpt-4o", messages=USER)
        assert completion.choices[0].message.content == "async hello"
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        arguments = ""
        usage = None
        async for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    arguments += call.function.arguments or "" if call.function else ""
            usage = chunk.usage or usage
        assert json.loads(arguments) == {"city": "Oslo"}
        assert usage is not None
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)


# --- stream faults and disconnects ---------------------------------------------------------


def test_hold_streams_the_first_content_chunk_then_waits(fake: FakeUpstream) -> None:
    release = threading.Event()
    fake.push(Reply.text("first chunk then the rest", hold=release))
    body = {"model": "gpt-4o", "messages": USER, "stream": True}
    decoder = SSEDecoder()
    seen: list[str] = []
    with httpx.stream("POST", fake.url + "/chat/completions", json=body) as response:
        pieces = response.iter_raw()
        while not any(seen):
            for event in decoder.feed(next(pieces)):
                seen.append(json.loads(event.data)["choices"][0]["delta"].get("content") or "")
        assert seen[-1] == "first "
        time.sleep(0.1)
        assert not fake.requests[0].completed
        assert fake.open_streams == 1
        release.set()
        for piece in pieces:
            decoder.feed(piece)
    assert fake.wait_for(lambda: fake.requests[0].completed)
    assert fake.open_streams == 0
    assert fake.disconnects == 0


def test_client_disconnect_mid_stream_is_seen(fake: FakeUpstream) -> None:
    fake.push(Reply.text("never finished", hold=threading.Event()))
    with httpx.stream(
        "POST",
        fake.url + "/chat/completions",
        json={"model": "m", "messages": USER, "stream": True},
    ) as response:
        next(response.iter_raw())
    assert fake.wait_for_disconnect(timeout=2)
    request = fake.requests[0]
    assert request.disconnected and not request.completed
    assert fake.wait_for(lambda: fake.open_streams == 0, timeout=2)


def test_client_disconnect_while_the_fake_stalls(fake: FakeUpstream) -> None:
    fake.push(Reply.text("slow", delay=30))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            fake.url + "/chat/completions", json={"model": "m", "messages": USER}, timeout=0.3
        )
    assert fake.wait_for_disconnect(timeout=2)


def test_delay_and_chunk_delay(fake: FakeUpstream) -> None:
    fake.push(Reply.text("abcdefghijkl", chunk_chars=4, delay=0.2, chunk_delay=0.05))
    started = time.monotonic()
    with httpx.stream(
        "POST",
        fake.url + "/chat/completions",
        json={"model": "m", "messages": USER, "stream": True},
    ) as response:
        arrivals = [time.monotonic() - started for _ in response.iter_raw()]
    assert arrivals[0] >= 0.2
    assert arrivals[-1] - arrivals[0] >= 0.05 * 4


def test_drop_after_closes_the_connection_mid_stream(
    fake: FakeUpstream, client: openai.OpenAI
) -> None:
    fake.push(Reply.text("dropped halfway through", drop_after=3))
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream(
            "POST",
            fake.url + "/chat/completions",
            json={"model": "m", "messages": USER, "stream": True},
        ) as response:
            for piece in response.iter_raw():
                received += piece
    assert received.count(b"data: ") == 3
    assert b"[DONE]" not in received
    assert fake.wait_for(lambda: fake.open_streams == 0)
    assert fake.requests[0].dropped and not fake.requests[0].completed
    assert fake.disconnects == 0


def test_keepalive_comments_are_tolerated_by_the_sdk(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    fake.push(
        Reply.text("still here", keepalive="OPENROUTER PROCESSING"),
        Reply.text("still here", keepalive="keep-alive"),
    )
    events = raw_events(fake, {"model": "m", "messages": USER, "stream": True})
    assert {e.comment for e in events if e.comment is not None} == {"OPENROUTER PROCESSING"}
    assert accumulate(events).message()["content"] == "still here"
    chunks = client.chat.completions.create(model="m", messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "still here"


def test_raw_stream_is_sent_verbatim(fake: FakeUpstream) -> None:
    wire = [b"data: {not json}\n\n", b": comment\r\n\r\n", b"data: [DONE]\n\n"]
    fake.push(Reply(raw_stream=wire))
    with httpx.stream(
        "POST",
        fake.url + "/chat/completions",
        json={"model": "m", "messages": USER, "stream": True},
    ) as response:
        assert response.read() == b"".join(wire)


# --- other routes --------------------------------------------------------------------------


def test_models(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert "gpt-4o" in [m.id for m in models.data]
    assert client.models.retrieve("gpt-4o-mini").owned_by == "system"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.code == "model_not_found"


def test_embeddings_are_deterministic_in_both_encodings(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    as_base64 = client.embeddings.create(model="text-embedding-3-small", input=["alpha", "beta"])
    as_float = client.embeddings.create(
        model="text-embedding-3-small", input=["alpha", "beta"], encoding_format="float"
    )
    assert fake.requests[0].json["encoding_format"] == "base64"  # what the SDK asks for by default
    assert [d.embedding for d in as_base64.data] == [d.embedding for d in as_float.data]
    assert as_base64.data[0].embedding != as_base64.data[1].embedding
    assert len(as_float.data[0].embedding) == 8
    assert as_float.usage.prompt_tokens == as_float.usage.total_tokens == 2 + 1  # ceil(chars / 4)
    wide = client.embeddings.create(model="text-embedding-3-small", input="alpha", dimensions=32)
    assert len(wide.data[0].embedding) == 32


def test_responses(client: openai.OpenAI) -> None:
    response = client.responses.create(model="gpt-4o", input="hello")
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text == "echo: hello"
    assert response.usage and response.usage.total_tokens > 0


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/nope"), ("POST", "/v1/files/x/content"), ("GET", "/v1/chat/completions")],
)
def test_unknown_routes_get_openais_404(fake: FakeUpstream, method: str, path: str) -> None:
    response = httpx.request(method, fake.base_url + path)
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": f"Invalid URL ({method} {path})",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert fake.requests[-1].path == path


def test_responses_stream(client: openai.OpenAI, fake: FakeUpstream) -> None:
    with client.responses.stream(model="gpt-4o", input="hello there, streamed") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 2
    assert "".join(deltas) == final.output_text == "echo: hello there, streamed"
    events = raw_events_at(fake, "/responses", {"model": "m", "input": "x", "stream": True})
    assert [e.event for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].event == "response.completed"
    assert all(json.loads(e.data or "")["type"] == e.event for e in events)


def test_reset_during_a_stream_keeps_counters_sane(fake: FakeUpstream) -> None:
    release = threading.Event()
    fake.push(Reply.text("held across a reset", hold=release))
    body = {"model": "m", "messages": USER, "stream": True}
    with httpx.stream("POST", fake.url + "/chat/completions", json=body) as response:
        pieces = response.iter_raw()
        next(pieces)
        assert fake.open_streams == 1
        fake.reset()
        release.set()
        b"".join(pieces)
    assert (fake.open_streams, fake.disconnects, fake.requests) == (0, 0, [])
