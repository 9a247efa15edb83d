"""The `anthropic` Python SDK against the fake Messages API, then through the proxy.

The first half shows the fake is faithful: Anthropic's own client parses its answers, streamed
and not, and gets the errors Anthropic gives. The second half runs a stateless tool loop with
thinking through the proxy (a session header, a low threshold) until it compacts; it is
expected to fail until the proxy's /v1/messages compacting path exists (the marker
`needs_messages_path`, tests/support/claude_checks.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.wire.sse import SSEDecoder
from tests.support.claude_checks import (
    Checks,
    extract_rounds,
    is_placeholder,
    main_requests,
    messages_settings,
    request_problems,
    system_texts,
    tool_results,
)
from tests.support.claude_model import FINISHED, ReadFilesModel
from tests.support.fake_messages import FakeMessages, Turn, count_input_tokens
from tests.support.servers import UvicornThread

MODEL = "claude-opus-4-8"
USER = [{"role": "user", "content": "What is in src/a.py?"}]
READ_TOOL = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
SYSTEM = [
    {"type": "text", "text": "You are a careful coding agent. " * 200},
    {
        "type": "text",
        "text": "Read files before answering.",
        "cache_control": {"type": "ephemeral"},
    },
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture
def fake(server: FakeMessages) -> FakeMessages:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeMessages) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-test", max_retries=0) as c:
        yield c


def raw_stream(url: str, body: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data) of a raw Messages stream, decoded as the proxy decodes streams."""
    decoder = SSEDecoder()
    events = []
    with httpx.stream("POST", url + "/v1/messages", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for piece in response.iter_raw():
            events += decoder.feed(piece)
    events += decoder.flush()
    return [(e.event, json.loads(e.data)) for e in events if e.data is not None]


# the fake, as the SDK sees it --------------------------------------------------------------


def test_a_plain_answer_parses(client: anthropic.Anthropic, fake: FakeMessages) -> None:
    fake.push_turns(Turn.text("It defines main()."))
    message = client.messages.create(model=MODEL, max_tokens=1024, messages=USER)
    assert message.content[0].type == "text" and message.content[0].text == "It defines main()."
    assert message.stop_reason == "end_turn" and message.role == "assistant"
    assert message.usage.input_tokens == count_input_tokens(fake.messages_requests[0].json)
    assert message.usage.output_tokens > 0


def test_a_streamed_turn_with_thinking_and_a_tool_call(
    client: anthropic.Anthropic, fake: FakeMessages
) -> None:
    fake.push_turns(Turn.tool("read_file", {"path": "src/a.py"}, thinking="I should look."))
    with client.messages.stream(
        model=MODEL,
        max_tokens=2048,
        messages=USER,
        tools=[READ_TOOL],
        thinking={"type": "enabled", "budget_tokens": 1024},
    ) as stream:
        message = stream.get_final_message()
    thinking, call = message.content
    assert thinking.type == "thinking" and thinking.thinking == "I should look."
    assert fake.signed[thinking.signature] == "I should look."
    assert call.type == "tool_use" and call.input == {"path": "src/a.py"}
    assert call.id.startswith("toolu_") and message.stop_reason == "tool_use"


def test_the_event_stream_is_anthropics(fake: FakeMessages) -> None:
    fake.push_turns(Turn.tool("read_file", {"path": "src/a.py"}, thinking="Look.", text="Let me."))
    body = {"model": MODEL, "max_tokens": 64, "messages": USER, "tools": [READ_TOOL]}
    events = raw_stream(fake.base_url, {**body, "stream": True})
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert set(start["usage"]) >= {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }
    deltas = [d["delta"]["type"] for n, d in events if n == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= set(deltas)
    opened = [d["index"] for n, d in events if n == "content_block_start"]
    closed = [d["index"] for n, d in events if n == "content_block_stop"]
    assert opened == closed == [0, 1, 2]
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use" and final["usage"]["output_tokens"] > 0


def test_errors_take_anthropics_shape(client: anthropic.Anthropic, fake: FakeMessages) -> None:
    fake.push_turns(Turn.overloaded())
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client.messages.create(model=MODEL, max_tokens=64, messages=USER)
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]

    fake.context_window = 100
    with pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(model=MODEL, max_tokens=64, messages=USER, system=SYSTEM)
    assert "prompt is too long" in too_long.value.message
    assert too_long.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (
            [
                *USER,
                {"role": "assistant", "content": "Sure."},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}],
                },
            ],
            "unexpected `tool_use_id`",
        ),
        (
            [
                *USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_y", "name": "read_file", "input": {}}
                    ],
                },
                {"role": "user", "content": "go on"},
            ],
            "without `tool_result` blocks immediately after",
        ),
        (
            [
                *USER,
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "hm", "signature": "Zm9v"}],
                },
                {"role": "user", "content": "go on"},
            ],
            "Invalid `signature`",
        ),
        (
            [
                *USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_z", "name": "read_file", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Here it is:"},
                        {"type": "tool_result", "tool_use_id": "toolu_z", "content": "1"},
                    ],
                },
            ],
            "without `tool_result` blocks immediately after",
        ),
        ([*USER, {"role": "assistant", "content": []}, *USER], "non-empty content"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "must be non-empty"),
        ([{"role": "system", "content": "x"}, *USER], "Input should be 'user' or 'assistant'"),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": str(n), "cache_control": {"type": "ephemeral"}}
                        for n in range(5)
                    ],
                }
            ],
            "A maximum of 4 blocks with cache_control",
        ),
    ],
)
def test_requests_anthropic_refuses(
    client: anthropic.Anthropic, fake: FakeMessages, messages: list[Any], needle: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=[READ_TOOL])
    assert needle in refused.value.message
    assert fake.refused and fake.refused[0][1] == 400


def test_a_thinking_tool_loop_must_send_its_thinking_back(
    client: anthropic.Anthropic, fake: FakeMessages
) -> None:
    """Dropping the thinking of the turn in progress is refused; sending it back works."""
    fake.push_turns(Turn.tool("read_file", {"path": "a"}, thinking="Look."), Turn.text("Done."))
    thinking = {"type": "enabled", "budget_tokens": 1024}
    args: dict[str, Any] = {"model": MODEL, "max_tokens": 2048, "tools": [READ_TOOL]}
    first = client.messages.create(messages=USER, thinking=thinking, **args)
    call = first.content[1]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id}]}
    without = [*USER, {"role": "assistant", "content": [call.model_dump()]}, result]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(messages=without, thinking=thinking, **args)
    assert "must start with a thinking block" in refused.value.message
    assistant = {"role": "assistant", "content": [b.model_dump() for b in first.content]}
    done = client.messages.create(messages=[*USER, assistant, result], thinking=thinking, **args)
    assert done.content[0].text == "Done."


def test_an_error_mid_stream(client: anthropic.Anthropic, fake: FakeMessages) -> None:
    """Anthropic reports a failure after the stream started as an `error` event."""
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    fake.push_turns(Turn.text("Partial answer", stream_error=overloaded, stream_error_after=3))
    body = {"model": MODEL, "max_tokens": 64, "messages": USER}
    events = raw_stream(fake.base_url, {**body, "stream": True})
    assert [name for name, _ in events][-2:] == ["ping", "error"]
    assert events[-1][1]["error"] == overloaded
    fake.push_turns(Turn.text("Partial answer", stream_error=overloaded, stream_error_after=3))
    with pytest.raises(anthropic.APIStatusError), client.messages.stream(**body) as stream:
        stream.get_final_message()


def test_redacted_thinking_goes_back_as_it_came(
    client: anthropic.Anthropic, fake: FakeMessages
) -> None:
    redacted = {"type": "redacted_thinking", "data": "RWFCUTNMeXJ4d0VxbWxzYnJ3"}
    call = {"type": "tool_use", "id": "toolu_01redacted", "name": "read_file", "input": {}}
    fake.push_turns(Turn(content=[redacted, call]), Turn.text("Done."))
    args: dict[str, Any] = {"model": MODEL, "max_tokens": 2048, "tools": [READ_TOOL]}
    args["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    with client.messages.stream(messages=USER, **args) as stream:
        first = stream.get_final_message()
    assert first.content[0].type == "redacted_thinking"
    assert first.content[0].data == redacted["data"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"]}]}
    altered = {**redacted, "data": "QUJD"}
    bad = [*USER, {"role": "assistant", "content": [altered, call]}, result]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `data`"):
        client.messages.create(messages=bad, **args)
    good = [
        *USER,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        result,
    ]
    assert client.messages.create(messages=good, **args).content[0].text == "Done."


def test_count_tokens_and_prompt_caching(client: anthropic.Anthropic, fake: FakeMessages) -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=USER, system=SYSTEM)
    assert counted.input_tokens == count_input_tokens(
        {"model": MODEL, "messages": USER, "system": SYSTEM}
    )
    first = client.messages.create(model=MODEL, max_tokens=64, messages=USER, system=SYSTEM)
    again = client.messages.create(model=MODEL, max_tokens=64, messages=USER, system=SYSTEM)
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert again.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    total = counted.input_tokens
    usage = again.usage
    assert (
        usage.input_tokens
        + usage.cache_read_input_tokens
        + (usage.cache_creation_input_tokens or 0)
        == total
    )


# a tool loop through the proxy -------------------------------------------------------------


def file_output(path: str) -> str:
    return "".join(f"{path} line {i:03d}: " + "y" * 60 + "\n" for i in range(150))


def run_loop(client: anthropic.Anthropic, paths: list[str], stream: bool) -> list[Any]:
    """A stateless agent: it sends the whole history each turn and runs `read_file`."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files in order."}]
    replies = []
    for _ in range(len(paths) + 3):
        args: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 4096,
            "system": SYSTEM,
            "tools": [READ_TOOL],
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": messages,
        }
        if stream:
            with client.messages.stream(**args) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**args)
        replies.append(reply)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": file_output(c.input["path"])}
            for c in calls
        ]
        messages.append({"role": "user", "content": results})
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_tool_loop_through_the_proxy_compacts(stream: bool) -> None:
    paths = [f"src/file_{n:02d}.py" for n in range(1, 13)]
    checks = Checks()
    with FakeMessages() as fake:
        fake.policy = model = ReadFilesModel(paths, tool="read_file", path_key="path")
        settings = messages_settings(
            fake, token_threshold=12_000, toolcall_keep_max=2, summary_keep_max=4
        )
        headers = {"X-Session-Id": f"sdk-loop-{stream}"}
        with (
            UvicornThread(create_app(settings)) as proxy,
            anthropic.Anthropic(
                base_url=proxy.url, api_key="sk-ant-test", max_retries=0, default_headers=headers
            ) as client,
        ):
            replies = run_loop(client, paths, stream)
        loop = main_requests(fake, tool="read_file")

    final = replies[-1].content[-1]
    checks.check("the loop finishes", final.type == "text" and final.text == FINISHED, final)
    seen = [b.name for r in replies for b in r.content if b.type == "tool_use"]
    checks.check("the client never sees the extract call", EXTRACT_TOOL_NAME not in seen, seen)
    placeholders = [sum(map(is_placeholder, tool_results(body))) for body in loop]
    checks.check("old tool results become placeholders", any(placeholders), placeholders)
    rounds = [pair for body in loop for pair in extract_rounds(body)]
    checks.check("the proxy answered the extract call", rounds != [], model.extracted)
    summaries = ["Last file read:" in "\n".join(system_texts(body)) for body in loop]
    checks.check("a summary reaches later requests", any(summaries), model.proxy_summaries)
    checks.check(
        "every request is valid for Anthropic", request_problems(fake) == [], request_problems(fake)
    )
    kept = [body["system"][: len(SYSTEM)] == SYSTEM for body in loop]
    checks.check("the client's system blocks are kept", all(kept), kept)
    checks.verify()


class WholeAnswers(ReadFilesModel):
    """The same model behind a gateway that ignores `stream`: every answer is the whole
    message."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        return dataclasses.replace(super().__call__(body), json_to_stream=True)


def test_a_streamed_loop_answered_whole_reaches_the_client_as_streams() -> None:
    paths = [f"src/file_{n:02d}.py" for n in range(1, 13)]
    checks = Checks()
    with FakeMessages() as fake:
        fake.policy = model = WholeAnswers(paths, tool="read_file", path_key="path")
        settings = messages_settings(
            fake, token_threshold=12_000, toolcall_keep_max=2, summary_keep_max=4
        )
        headers = {"X-Session-Id": "sdk-loop-whole"}
        with (
            UvicornThread(create_app(settings)) as proxy,
            anthropic.Anthropic(
                base_url=proxy.url, api_key="sk-ant-test", max_retries=0, default_headers=headers
            ) as client,
        ):
            replies = run_loop(client, paths, stream=True)
        loop = main_requests(fake, tool="read_file")

    final = replies[-1].content[-1]
    checks.check("the loop finishes", final.type == "text" and final.text == FINISHED, final)
    checks.check("every request asked for a stream", all(b.get("stream") for b in loop))
    seen = [b.name for r in replies for b in r.content if b.type == "tool_use"]
    checks.check("the client never sees the extract call", EXTRACT_TOOL_NAME not in seen, seen)
    rounds = [pair for body in loop for pair in extract_rounds(body)]
    checks.check("the proxy answered the extract call", rounds != [], model.extracted)
    checks.check(
        "every request is valid for Anthropic", request_problems(fake) == [], request_problems(fake)
    )
    checks.verify()
