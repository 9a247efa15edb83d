"""On the compacting path, a `200` whose body is not JSON is a 502 in the API's shape, on each
wire, for the first round and for the proxy's own extract round; never a `200` to the client.

An upstream that answers with exactly the bytes it is given (a gateway's HTML page, a body
cut short) stands in for the provider; the official SDKs drive the proxy under real uvicorn.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import proxy_settings
from tests.support.servers import UvicornThread

HTML = b"<html><body>502 Bad Gateway (nginx)</body></html>"
TRUNCATED_JSON = b'{"id": "cut-sho'
ARGS = json.dumps({"toolcall_id": "call_unknown"})
USAGE_CHAT = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
USAGE_RESPONSES = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}

# One valid reply per wire whose only call is the proxy's own tool: the proxy answers it and
# asks upstream again (its extract round), whose answer is the unreadable one.
EXTRACT_ONLY: dict[str, dict[str, Any]] = {
    "chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_x1",
                            "type": "function",
                            "function": {"name": EXTRACT_TOOL_NAME, "arguments": ARGS},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": USAGE_CHAT,
    },
    "responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-4o",
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_x1",
                "name": EXTRACT_TOOL_NAME,
                "arguments": ARGS,
                "status": "completed",
            }
        ],
        "usage": USAGE_RESPONSES,
    },
    "messages": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-8",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_x1",
                "name": EXTRACT_TOOL_NAME,
                "input": {"toolcall_id": "call_unknown"},
            }
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5},
    },
}


class RawUpstream:
    """Answers each model request with the next queued (status, content type, bytes)."""

    def __init__(self) -> None:
        self.replies: deque[tuple[int, str, bytes]] = deque()
        self.paths: list[str] = []
        routes = [
            Route(path, self._answer, methods=["POST"])
            for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages")
        ]
        self.server = UvicornThread(Starlette(routes=routes))

    def push(self, body: bytes | dict[str, Any], content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append((200, content_type, data))

    async def _answer(self, request: Request) -> Response:
        await request.body()
        self.paths.append(request.url.path)
        status, content_type, data = self.replies.popleft()
        return Response(data, status_code=status, media_type=content_type)


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    upstream = RawUpstream()
    upstream.server.start()
    try:
        yield upstream
    finally:
        upstream.server.stop()


@pytest.fixture
def proxy_url(raw: RawUpstream) -> Iterator[str]:
    # The extract tool in every request (not only from a compaction on): the extract-round
    # cases script a model that calls it on the first turn.
    settings = proxy_settings(
        None,
        upstream_base_url=raw.server.url + "/v1",
        anthropic_base_url=raw.server.url,
        extract_tool="always",
    )
    with UvicornThread(create_app(settings)) as running:
        yield running.url


FUNCTION = {"name": "read_file", "parameters": {"type": "object", "properties": {}}}


def call_chat(url: str, stream: bool) -> None:
    client = openai.OpenAI(
        base_url=url + "/v1", api_key="sk-x", max_retries=0, default_headers={"x-session-id": "u1"}
    )
    with client:
        tools: Any = [{"type": "function", "function": FUNCTION}]
        messages: Any = [{"role": "user", "content": "hi"}]
        if stream:
            for _ in client.chat.completions.create(
                model="gpt-4o", messages=messages, tools=tools, stream=True
            ):
                pass
        else:
            client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)


def call_responses(url: str, stream: bool) -> None:
    client = openai.OpenAI(
        base_url=url + "/v1", api_key="sk-x", max_retries=0, default_headers={"x-session-id": "u2"}
    )
    with client:
        tools: Any = [{"type": "function", **FUNCTION}]
        if stream:
            for _ in client.responses.create(
                model="gpt-4o", input="hi", tools=tools, store=False, stream=True
            ):
                pass
        else:
            client.responses.create(model="gpt-4o", input="hi", tools=tools, store=False)


def call_messages(url: str, stream: bool) -> None:
    client = anthropic.Anthropic(
        base_url=url,
        api_key="sk-ant-x",
        max_retries=0,
        default_headers={"x-claude-code-session-id": "u3"},
    )
    tool: Any = {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
    messages: Any = [{"role": "user", "content": "hi"}]
    with client:
        if stream:
            with client.messages.stream(
                model="claude-opus-4-8", max_tokens=64, messages=messages, tools=[tool]
            ) as events:
                for _ in events:
                    pass
        else:
            client.messages.create(
                model="claude-opus-4-8", max_tokens=64, messages=messages, tools=[tool]
            )


CALLS: dict[str, Callable[[str, bool], None]] = {
    "chat": call_chat,
    "responses": call_responses,
    "messages": call_messages,
}


def check_error(wire: str, error: openai.APIStatusError | anthropic.APIStatusError) -> None:
    """A 502 in the wire's shape, written by the proxy."""
    assert error.status_code == 502, error
    body = error.body
    if wire == "messages":
        assert isinstance(body, dict) and body["type"] == "error", body
        assert body["error"]["type"] == "api_error"
    else:
        # The openai SDK hands over the `error` object itself.
        assert isinstance(body, dict) and body["code"] == "upstream_invalid_response", body


@pytest.mark.parametrize("body", [HTML, TRUNCATED_JSON], ids=["html", "truncated"])
@pytest.mark.parametrize("wire", list(CALLS))
def test_an_unreadable_200_is_a_502_in_the_apis_shape(
    raw: RawUpstream, proxy_url: str, wire: str, body: bytes
) -> None:
    raw.push(body, "text/html" if body == HTML else "application/json")
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as raised:
        CALLS[wire](proxy_url, False)
    check_error(wire, raised.value)


@pytest.mark.parametrize("wire", list(CALLS))
def test_an_unreadable_200_in_the_extract_round_is_a_502(
    raw: RawUpstream, proxy_url: str, wire: str
) -> None:
    raw.push(EXTRACT_ONLY[wire])
    raw.push(HTML, "text/html")
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as raised:
        CALLS[wire](proxy_url, False)
    check_error(wire, raised.value)
    assert len(raw.paths) == 2  # the proxy did ask again: the 502 is its extract round's


@pytest.mark.parametrize("wire", list(CALLS))
def test_an_html_200_to_a_stream_request_is_a_502(
    raw: RawUpstream, proxy_url: str, wire: str
) -> None:
    raw.push(HTML, "text/html")
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as raised:
        CALLS[wire](proxy_url, True)
    check_error(wire, raised.value)


@pytest.mark.parametrize("wire", list(CALLS))
def test_an_html_200_in_a_streamed_extract_round_ends_with_an_error_event(
    raw: RawUpstream, proxy_url: str, wire: str
) -> None:
    """The first round (answered whole, as some gateways do) holds only the proxy's call; the
    stream is open when the extract round's HTML comes, so it ends with the wire's error
    event: the chat and Messages SDKs raise on it, the Responses SDK yields it last."""
    raw.push(EXTRACT_ONLY[wire])
    raw.push(HTML, "text/html")
    if wire == "responses":
        client = openai.OpenAI(
            base_url=proxy_url + "/v1",
            api_key="sk-x",
            max_retries=0,
            default_headers={"x-session-id": "u4"},
        )
        tools: Any = [{"type": "function", **FUNCTION}]
        with client:
            stream = client.responses.create(
                model="gpt-4o", input="hi", tools=tools, store=False, stream=True
            )
            kinds = [event.type for event in stream]
        assert kinds[-1] == "error" and "response.completed" not in kinds, kinds
    else:
        with pytest.raises((openai.APIError, anthropic.APIError)) as raised:
            CALLS[wire](proxy_url, True)
        assert "UpstreamInvalidResponse" in str(raised.value), raised
    assert len(raw.paths) == 2
