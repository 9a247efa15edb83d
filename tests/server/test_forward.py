"""Pass-through: every `/v1/...` route and chat without a session header, through real uvicorn.

Most tests drive the fake OpenAI upstream with the official SDK; the byte-level ones use
`RawUpstream`, a few-line ASGI server that answers scripted bytes and records what it got.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest
from starlette.types import Receive, Scope, Send

from proxy.server.forward import WHOLE_BYTES
from proxy.server.logging import JsonFormatter, redact
from tests.conftest import MakeProxy, OpenAIClientFactory, RunningProxy
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.servers import UvicornThread, free_port

CHAT: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class RawUpstream:
    """Answers every request with `parts` after `delay`; records (method, path, query,
    headers, body). `complete=False` drops the connection after the parts."""

    status: int = 200
    headers: Sequence[tuple[str, str]] = (("content-type", "application/json"),)
    parts: Sequence[bytes] = (b"{}",)
    delay: float = 0.0
    complete: bool = True
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = scope["query_string"].decode()
        self.seen.append(
            {"method": scope["method"], "path": scope["raw_path"].decode(), "query": query}
            | {"headers": headers, "body": body}
        )
        await asyncio.sleep(self.delay)
        raw = [(k.encode(), v.encode()) for k, v in self.headers]
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        for part in self.parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        if self.complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture
def raw_upstream() -> Iterator[tuple[RawUpstream, str]]:
    upstream = RawUpstream()
    with UvicornThread(upstream) as server:
        yield upstream, server.url + "/v1"


def raw_http(port: int, head: bytes) -> bytes:
    """Send a hand-written request (no client-side URL normalisation) and read to EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


# -- the SDK through the proxy -------------------------------------------------------------


def test_models(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    client = openai_client(make_proxy(), session=None)
    assert "gpt-4o" in [model.id for model in client.models.list()]
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError) as exc:
        client.models.retrieve("no-such-model")
    assert exc.value.code == "model_not_found"  # the upstream's error body, kept
    assert [r.path for r in fake_upstream.requests] == [
        "/v1/models",
        "/v1/models/gpt-4o-mini",
        "/v1/models/no-such-model",
    ]
    assert {r.headers["authorization"] for r in fake_upstream.requests} == {"Bearer sk-test-a"}


def test_embeddings_match_a_direct_call(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    client = openai_client(make_proxy(), session=None)
    via_proxy = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    with openai.OpenAI(base_url=fake_upstream.url, api_key="sk-test-a", max_retries=0) as direct:
        expected = direct.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert via_proxy.model_dump() == expected.model_dump()


def test_responses_api(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    client = openai_client(make_proxy())
    response = client.responses.create(model="gpt-4o", input="hello there")
    assert response.output_text == "echo: hello there"
    assert fake_upstream.requests[-1].path == "/v1/responses"


def test_chat_without_session_header(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.push(Reply.text("plain"), Reply.text("streamed reply"))
    client = openai_client(make_proxy(), session=None)
    reply = client.chat.completions.create(model="gpt-4o", messages=[CHAT["messages"][0]])
    assert reply.choices[0].message.content == "plain"
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "streamed reply"
    for request in fake_upstream.chat_requests:  # untouched: no tool injected, no options added
        assert "tools" not in request.json and "stream_options" not in request.json


def test_chat_request_and_response_bytes_are_identical(
    raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy
) -> None:
    upstream, url = raw_upstream
    odd_json = b'{ "id" : "chatcmpl-1",\n  "choices" : [ ] ,"x":"\\u00e9\xc3\xa9" }  \n'
    upstream.parts = [odd_json[:10], odd_json[10:]]
    proxy = make_proxy(upstream_base_url=url)
    sent = b'{"model":"gpt-4o",  "messages":[{"role":"user","content":"hi"}], "zzz": [1,2]}'
    response = httpx.post(proxy.base_url + "/chat/completions", content=sent)
    assert response.status_code == 200
    assert response.content == odd_json
    assert upstream.seen[-1]["body"] == sent


def test_streamed_chat_bytes_are_identical(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    events = [
        b": keep-alive\n\n",
        b'data: {"id":"c1","object":"chat.completion.chunk","choices":[]}\n\n',
        b"data: not json at all\n\n",
        b"event: odd\r\ndata: [DONE]\r\n\r\n",
    ]
    fake_upstream.push(Reply(raw_stream=events))
    proxy = make_proxy()
    response = httpx.post(proxy.base_url + "/chat/completions", json=CHAT | {"stream": True})
    assert response.status_code == 200
    assert response.content == b"".join(events)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"


# -- headers ------------------------------------------------------------------------------


def test_request_headers(raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy) -> None:
    upstream, url = raw_upstream
    proxy = make_proxy(upstream_base_url=url)
    headers = {
        "Authorization": "Bearer sk-client",
        "OpenAI-Organization": "org-1",
        "OpenAI-Project": "proj-1",
        "OpenAI-Beta": "assistants=v2",
        "X-Request-Id": "client-req-1",
        "User-Agent": "my-agent/1.0",
        "X-Custom": "kept",
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "dropped",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Trailer": "X-T",
        "Proxy-Authorization": "Basic cHJveHk=",
        "X-Xun-Compact": "off",
        "Accept-Encoding": "gzip, br",
    }
    httpx.post(proxy.base_url + "/embeddings", json={"input": "x"}, headers=headers)
    got = upstream.seen[-1]["headers"]
    for name in ("openai-organization", "openai-project", "openai-beta", "x-custom"):
        assert got[name] == headers[{k.lower(): k for k in headers}[name]]
    assert got["authorization"] == "Bearer sk-client"
    assert got["x-request-id"] == "client-req-1"
    assert got["user-agent"] == "my-agent/1.0"
    assert got["content-type"] == "application/json"
    assert got["accept-encoding"] == "identity"
    assert got["host"] == url.split("//")[1].split("/")[0]
    for name in ("x-hop", "keep-alive", "te", "trailer", "proxy-authorization", "x-xun-compact"):
        assert name not in got
    assert upstream.seen[-1]["path"] == "/v1/embeddings"


def test_upstream_api_key_replaces_authorization(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    client = openai_client(make_proxy(upstream_api_key="sk-upstream"), api_key="sk-client")
    client.models.list()
    assert fake_upstream.requests[-1].headers["authorization"] == "Bearer sk-upstream"


def test_response_headers(raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy) -> None:
    upstream, url = raw_upstream
    upstream.headers = [
        ("content-type", "application/json"),
        ("x-request-id", "req_upstream_1"),
        ("openai-processing-ms", "12"),
        ("x-ratelimit-remaining-requests", "99"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("connection", "x-hop-resp"),
        ("x-hop-resp", "dropped"),
        ("keep-alive", "timeout=5"),
        ("server", "upstream-server"),
    ]
    response = httpx.get(make_proxy(upstream_base_url=url).base_url + "/models")
    assert response.headers["x-request-id"] == "req_upstream_1"
    assert response.headers["openai-processing-ms"] == "12"
    assert response.headers["x-ratelimit-remaining-requests"] == "99"
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert "x-hop-resp" not in response.headers and "keep-alive" not in response.headers
    assert response.headers["server"] != "upstream-server"


def test_request_id_is_minted_when_upstream_has_none(
    raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(upstream_base_url=raw_upstream[1])
    ids = {httpx.get(proxy.base_url + "/models").headers["x-request-id"] for _ in range(2)}
    assert len(ids) == 2
    assert all(re.fullmatch(r"req_[0-9a-f]{32}", value) for value in ids)
    assert re.fullmatch(
        r"req_[0-9a-f]{32}", httpx.get(proxy.url + "/healthz").headers["x-request-id"]
    )


def test_request_id_from_upstream_passes(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    fake_upstream.push(Reply.text("x", headers={"x-request-id": "req_from_openai"}))
    response = httpx.post(make_proxy().base_url + "/chat/completions", json=CHAT)
    assert response.headers["x-request-id"] == "req_from_openai"


# -- paths and SSRF -----------------------------------------------------------------------


def test_query_string_and_methods_kept(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    proxy = make_proxy()
    httpx.get(proxy.base_url + "/models?limit=2&order=desc%20x&a=%2F")
    assert fake_upstream.requests[-1].query == "limit=2&order=desc%20x&a=%2F"
    response = httpx.delete(proxy.base_url + "/files/file-abc")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Invalid URL (DELETE /v1/files/file-abc)"
    assert (fake_upstream.requests[-1].method, fake_upstream.requests[-1].path) == (
        "DELETE",
        "/v1/files/file-abc",
    )


def test_request_never_chooses_the_upstream_host(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()
    fake_host = fake_upstream.url.split("//")[1].split("/")[0]
    absolute_form = (
        b"GET http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n"
        b"Connection: close\r\n\r\n"
    )
    # An absolute-form target: uvicorn's h11 parser takes it as a path (not under /v1, so the
    # proxy's own 404), its httptools parser takes the path out of it (then it goes to the
    # configured upstream). Never to the host it names.
    answer = raw_http(proxy.port, absolute_form)
    assert answer.startswith((b"HTTP/1.1 404", b"HTTP/1.1 200"))
    for target in (b"/v1//evil.example/x", b"/v1/http://evil.example/x", b"/v1/%2F%2Fevil/x"):
        head = b"GET " + target + b" HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        raw_http(proxy.port, head)
    records = fake_upstream.requests
    assert {r.headers["host"] for r in records} == {fake_host}
    routed = ["/v1/models"] if answer.startswith(b"HTTP/1.1 200") else []
    assert [r.path for r in records] == [
        *routed,
        "/v1/evil.example/x",
        "/v1/http://evil.example/x",
        "/v1///evil/x",
    ]


def test_dot_segments_are_refused(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    proxy = make_proxy()
    for target in (b"/v1/../admin/sessions", b"/v1/models/%2e%2e/x", b"/v1/./models"):
        head = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        response = raw_http(proxy.port, head)
        assert response.startswith(b"HTTP/1.1 400"), response
        assert b'"code":"invalid_path"' in response
    assert fake_upstream.requests == []


# -- upstream failures ---------------------------------------------------------------------


def test_upstream_error_status_headers_and_body_kept(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    failure = Reply.error(500, "kaput", "server_error")  # type: ignore[operator, misc]
    fake_upstream.push(Reply.rate_limited(retry_after=7), failure)
    proxy = make_proxy()
    limited = httpx.post(proxy.base_url + "/chat/completions", json=CHAT)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "7"
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert limited.json()["error"]["type"] == "tokens"
    failed = httpx.post(proxy.base_url + "/chat/completions", json=CHAT)
    assert failed.status_code == 500
    assert failed.json()["error"]["message"] == "kaput"
    fake_upstream.push(Reply.rate_limited())
    with pytest.raises(openai.RateLimitError):
        openai_client(proxy, session=None).chat.completions.create(**CHAT)


def test_unreachable_upstream_is_502(make_proxy: MakeProxy) -> None:
    proxy = make_proxy(upstream_base_url=f"http://127.0.0.1:{free_port()}/v1")
    response = httpx.get(proxy.base_url + "/models")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
    assert response.json()["error"]["type"] == "upstream_error"
    with openai.OpenAI(base_url=proxy.base_url, api_key="sk-x", max_retries=0) as client:
        with pytest.raises(openai.InternalServerError) as exc:
            client.chat.completions.create(**CHAT)
    assert exc.value.status_code == 502


def test_first_byte_timeout_is_504(
    raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy
) -> None:
    upstream, url = raw_upstream
    upstream.delay = 2
    proxy = make_proxy(upstream_base_url=url, read_timeout=0.2)
    response = httpx.post(proxy.base_url + "/chat/completions", json=CHAT)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


def test_idle_timeout_mid_stream_ends_with_an_error_event(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    fake_upstream.push(Reply.text("one two three four", chunk_chars=4, chunk_delay=1.0))
    proxy = make_proxy(read_timeout=0.3)
    response = httpx.post(proxy.base_url + "/chat/completions", json=CHAT | {"stream": True})
    events = [e for e in response.text.split("\n\n") if e]
    assert events[0].startswith("data: {")
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "upstream_timeout"


def test_upstream_dropping_a_stream_ends_with_an_error_event(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    fake_upstream.push(Reply.text("one two three four", chunk_chars=4, drop_after=2))
    response = httpx.post(make_proxy().base_url + "/chat/completions", json=CHAT | {"stream": True})
    events = [e for e in response.text.split("\n\n") if e]
    assert len(events) == 3
    error = json.loads(events[-1].removeprefix("data: "))["error"]
    assert (error["code"], error["type"]) == ("upstream_unreachable", "upstream_error")


def test_upstream_dropping_a_small_json_body_is_a_502_not_a_short_body(
    raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy
) -> None:
    # A small answer of known length is read whole before anything goes out, so its loss is
    # told as an error of the upstream's, never passed on cut short.
    upstream, url = raw_upstream
    upstream.headers = [("content-type", "application/json"), ("content-length", "100")]
    upstream.parts, upstream.complete = [b'{"partial":'], False
    with httpx.Client() as client:
        response = client.get(make_proxy(upstream_base_url=url).base_url + "/models")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"


def test_upstream_dropping_a_large_json_body_breaks_the_reply(
    raw_upstream: tuple[RawUpstream, str], make_proxy: MakeProxy
) -> None:
    # Beyond WHOLE_BYTES the answer streams through: once its headers are out, a cut body
    # aborts the connection instead.
    upstream, url = raw_upstream
    length = str(WHOLE_BYTES + 1)
    upstream.headers = [("content-type", "application/json"), ("content-length", length)]
    upstream.parts, upstream.complete = [b'{"partial":'], False
    with httpx.Client() as client, pytest.raises(httpx.RemoteProtocolError):
        client.get(make_proxy(upstream_base_url=url).base_url + "/models")


def test_connection_pool_is_bounded(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("held open", hold=hold))
    proxy = make_proxy(max_upstream_connections=1, pool_timeout=0.2)
    with httpx.Client(timeout=10) as client:
        body = CHAT | {"stream": True}
        with client.stream("POST", proxy.base_url + "/chat/completions", json=body) as first:
            chunks = first.iter_raw()
            next(chunks)
            second = client.get(proxy.base_url + "/models")
            assert second.status_code == 503
            assert second.headers["retry-after"] == "1"
            assert second.json()["error"]["code"] == "upstream_pool_exhausted"
            hold.set()
            assert b"".join(chunks).endswith(b"[DONE]\n\n")
    assert httpx.get(proxy.base_url + "/models").status_code == 200


# -- bodies: limits, streaming both ways, disconnects --------------------------------------


def test_oversized_body_is_413(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    proxy = make_proxy(max_body_bytes=1000)
    declared = httpx.post(proxy.base_url + "/embeddings", content=b"x" * 1001)
    chunked = httpx.post(proxy.base_url + "/embeddings", content=iter([b"x" * 600] * 2))
    for response in (declared, chunked):
        assert response.status_code == 413
        assert response.headers["x-should-retry"] == "false"
        assert response.json()["error"] == {
            "message": "The request body exceeds the proxy's limit of 1000 bytes.",
            "type": "invalid_request_error",
            "param": None,
            "code": "request_too_large",
        }
    assert fake_upstream.requests == []
    at_limit = json.dumps({"input": "y" * 970}).encode()
    assert len(at_limit) <= 1000
    assert httpx.post(proxy.base_url + "/embeddings", content=at_limit).status_code == 200
    chunks = iter([at_limit[:500], at_limit[500:]])
    assert httpx.post(proxy.base_url + "/embeddings", content=chunks).status_code == 200
    assert [r.body for r in fake_upstream.requests] == [at_limit, at_limit]


def test_chat_body_limit_applies_without_session_header(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(max_body_bytes=200)
    big = CHAT | {"messages": [{"role": "user", "content": "z" * 500}]}
    response = httpx.post(proxy.base_url + "/chat/completions", json=big)
    assert response.status_code == 413
    assert fake_upstream.requests == []


def test_first_chunk_arrives_before_upstream_finishes(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("first and then the rest", hold=hold))
    proxy = make_proxy()
    with httpx.Client(timeout=10) as client:
        body = CHAT | {"stream": True}
        with client.stream("POST", proxy.base_url + "/chat/completions", json=body) as response:
            chunks = response.iter_raw()
            first = next(chunks)
            assert first.startswith(b"data: ")
            assert not hold.is_set()  # the upstream is still holding the rest back
            hold.set()
            rest = b"".join(chunks)
    assert rest.endswith(b"data: [DONE]\n\n")


def test_client_disconnect_closes_the_upstream_request(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("never finished", hold=hold))
    proxy = make_proxy()
    try:
        with httpx.Client(timeout=10) as client:
            body = CHAT | {"stream": True}
            with client.stream("POST", proxy.base_url + "/chat/completions", json=body) as r:
                next(r.iter_raw())
        assert fake_upstream.wait_for_disconnect(timeout=1.0)
        assert fake_upstream.chat_requests[-1].disconnected
    finally:
        hold.set()


# -- health, routing errors, logs ----------------------------------------------------------


class DownStore:
    async def ping(self) -> bool:
        return False

    async def close(self) -> None:
        raise AssertionError("an injected store is not closed by the app")


def test_health_and_readiness(make_proxy: MakeProxy) -> None:
    proxy = make_proxy()
    assert httpx.get(proxy.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(proxy.url + "/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "store": "ok"})
    down = make_proxy(store=DownStore())
    not_ready = httpx.get(down.url + "/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["store"] == "unreachable"
    assert not_ready.json()["error"]["code"] == "store_down"
    assert httpx.get(down.url + "/healthz").status_code == 200


def test_proxy_routing_errors_are_openai_shaped(make_proxy: MakeProxy) -> None:
    proxy = make_proxy()
    missing = httpx.get(proxy.url + "/v2/models")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "message": "Invalid URL (GET /v2/models)",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }
    wrong_method = httpx.delete(proxy.url + "/healthz")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


def test_one_access_line_per_request_without_secrets(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy")
    proxy = make_proxy(upstream_api_key="sk-upstream-SECRET")
    secret = "sk-client-SECRET"
    httpx.post(
        proxy.base_url + "/embeddings?api-key=q-SECRET",
        json={"input": "content-SECRET"},
        headers={"authorization": f"Bearer {secret}", "api-key": "h-SECRET"},
    )
    proxy.stop()
    access = [r for r in caplog.records if r.name == "proxy.access"]
    assert len(access) == 1
    fields = access[0].fields  # type: ignore[attr-defined]
    assert (fields["method"], fields["path"], fields["status"]) == ("POST", "/v1/embeddings", 200)
    assert fields["duration_ms"] >= 0 and fields["request_id"].startswith("req_")
    formatted = "\n".join(JsonFormatter().format(r) for r in caplog.records)
    assert "SECRET" not in formatted and "SECRET" not in caplog.text
    assert json.loads(JsonFormatter().format(access[0]))["status"] == 200


def test_redact_drops_credential_fields() -> None:
    fields = {
        "authorization": "Bearer x",
        "api_key": "k",
        "admin_key": "k",
        "x-api-key": "k",
        "token": "t",
        "access_token": "t",
        "cookie": "c",
        "token_threshold": 1,
        "total_tokens": 5,
        "tokens_before": 9,
        "session": "s",
        "tenant": "abc",
    }
    assert redact(fields) == {
        "token_threshold": 1,
        "total_tokens": 5,
        "tokens_before": 9,
        "session": "s",
        "tenant": "abc",
    }


def test_running_proxy_restart_keeps_the_port(make_proxy: MakeProxy) -> None:
    proxy: RunningProxy = make_proxy()
    port = proxy.port
    proxy.restart()
    assert proxy.port == port
    assert httpx.get(proxy.url + "/healthz").status_code == 200
