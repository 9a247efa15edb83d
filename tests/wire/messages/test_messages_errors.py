"""Every answer the proxy writes itself under `/v1/messages*` is in Anthropic's error shape.

Through real uvicorn and the official `anthropic` SDK: a stream the upstream drops mid-way ends
with an `event: error` the SDK raises on (with and without a session header), and the proxy's
own errors on `/v1/messages/count_tokens` and `/v1/messages/batches` (502, 413) and on routing
(405) are `{"type": "error", "error": {"type", "message"}}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.server import lifecycle
from proxy.server.app import create_app
from tests.support.claude_checks import messages_settings
from tests.support.fake_messages import FakeMessages, Turn
from tests.support.servers import UvicornThread, free_port

MODEL = "claude-opus-4-8"
USER = [{"role": "user", "content": "Tell me a long story."}]
SESSIONS = {"pass-through": None, "compacting": "errors-1"}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture
def fake(server: FakeMessages) -> FakeMessages:
    server.reset()
    return server


@pytest.fixture
def proxy_url(fake: FakeMessages) -> Iterator[str]:
    app = create_app(messages_settings(fake, max_body_bytes=64 * 1024))
    with UvicornThread(app) as running:
        yield running.url


def anthropic_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The body of an error the proxy wrote: Anthropic's envelope, nothing else."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize("path", list(SESSIONS))
def test_a_dropped_stream_raises_in_the_sdk(fake: FakeMessages, proxy_url: str, path: str) -> None:
    fake.push_turns(Turn.text("once upon a time " * 40, chunk_chars=8, drop_after=4))
    session = SESSIONS[path]
    headers = {"x-claude-code-session-id": session} if session else {}
    with anthropic.Anthropic(
        base_url=proxy_url, api_key="sk-ant-drop", max_retries=0, default_headers=headers
    ) as client:
        received = []
        with pytest.raises(anthropic.APIStatusError) as raised:
            with client.messages.stream(model=MODEL, max_tokens=256, messages=USER) as stream:
                for text in stream.text_stream:
                    received.append(text)
    assert received, "the first events got through before the drop"
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    assert body["error"]["type"] == "api_error"
    assert len(fake.messages_requests) == 1  # not retried


def test_a_dropped_stream_ends_with_an_error_event(fake: FakeMessages, proxy_url: str) -> None:
    fake.push_turns(Turn.text("once upon a time " * 40, chunk_chars=8, drop_after=4))
    body = {"model": MODEL, "max_tokens": 256, "messages": USER, "stream": True}
    headers = {"x-api-key": "sk-ant-drop", "anthropic-version": "2023-06-01"}
    response = httpx.post(proxy_url + "/v1/messages", json=body, headers=headers, timeout=10)
    assert response.status_code == 200
    events = [e for e in response.text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    assert events[-1].startswith("event: error\ndata: "), events[-1]
    assert '"type":"error"' in events[-1].replace(" ", "")
    assert "message_stop" not in response.text


def test_count_tokens_upstream_unreachable_is_anthropic_shaped(fake: FakeMessages) -> None:
    settings = messages_settings(fake, anthropic_base_url=f"http://127.0.0.1:{free_port()}")
    with UvicornThread(create_app(settings)) as running:
        with anthropic.Anthropic(
            base_url=running.url, api_key="sk-ant-count", max_retries=0
        ) as client:
            with pytest.raises(anthropic.APIStatusError) as raised:
                client.messages.count_tokens(model=MODEL, messages=USER)
        assert raised.value.status_code == 502
        raw = httpx.post(
            running.url + "/v1/messages/count_tokens",
            json={"model": MODEL, "messages": USER},
            headers={"x-api-key": "sk-ant-count"},
        )
    error = anthropic_error(raw, 502)
    assert error["type"] == "api_error" and "reached" in error["message"]


def test_batches_body_too_large_is_anthropic_shaped(proxy_url: str) -> None:
    requests = [
        {"custom_id": f"r{i}", "params": {"model": MODEL, "max_tokens": 8, "messages": USER}}
        for i in range(2000)
    ]
    response = httpx.post(
        proxy_url + "/v1/messages/batches",
        json={"requests": requests},
        headers={"x-api-key": "sk-ant-batch"},
    )
    error = anthropic_error(response, 413)
    assert error["type"] == "request_too_large"


@pytest.mark.parametrize("session", [None, "errors-2"])
def test_messages_too_large_is_anthropic_shaped(proxy_url: str, session: str | None) -> None:
    headers = {"x-api-key": "sk-ant-big"}
    if session:
        headers["x-claude-code-session-id"] = session
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x" * 70000}]}
    response = httpx.post(proxy_url + "/v1/messages", json=body, headers=headers)
    assert anthropic_error(response, 413)["type"] == "request_too_large"


def test_routing_errors_under_messages_are_anthropic_shaped(proxy_url: str) -> None:
    response = httpx.request(
        "TRACE", proxy_url + "/v1/messages/count_tokens", headers={"x-api-key": "sk-ant-get"}
    )
    assert anthropic_error(response, 405)["type"] == "invalid_request_error"
    assert "TRACE" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/batches", "/v1/chat/completions"])
def test_a_drain_cut_stream_ends_in_the_apis_event(path: str) -> None:
    """A stream still open when the drain timeout runs out (`proxy.server.lifecycle`) ends with the
    API's own error event: `event: error` under /v1/messages, a `data:` error elsewhere."""
    event = lifecycle._shutdown_event(path)
    name, _, data = event.partition(b"data: ")
    body = json.loads(data)
    if path.startswith("/v1/messages"):
        assert name == b"event: error\n" and body["type"] == "error"
        assert body["error"] == {"type": "api_error", "message": body["error"]["message"]}
    else:
        assert name == b"" and body["error"]["code"] == "proxy_shutdown"
