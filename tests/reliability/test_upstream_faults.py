"""Upstream faults on both paths (pass-through and compacting), through real uvicorn.

Error statuses reach the client unchanged; a refused connection is a 502; connect, first-byte
and idle-read timeouts are separate settings and each gives a 504 (or, once a stream has
started, a final SSE error event); a dropped stream ends with an error event, never a hang,
and the proxy never retries a request whose reply had started.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.reliability.rawupstream import Blackhole, TimedUpstream
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.servers import free_port

URL = "/chat/completions"
PATHS = {
    "pass-through": {"authorization": "Bearer sk-faults"},
    "compacting": {"authorization": "Bearer sk-faults", "x-session-id": "faults-1"},
}
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}


def events(content: bytes) -> list[bytes]:
    return [e for e in content.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]


def last_error(content: bytes) -> dict[str, Any]:
    last = events(content)[-1]
    assert last.startswith(b"data: "), last
    error: dict[str, Any] = json.loads(last[len(b"data: ") :])["error"]
    assert set(error) >= {"message", "type", "code"}
    return error


def proxy_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """An error the proxy answered itself: OpenAI's shape, no traceback, a request id."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in response.text
    assert response.headers["x-request-id"]
    error: dict[str, Any] = body["error"]
    return error


@pytest.fixture
def timed() -> Iterator[TimedUpstream]:
    upstream = TimedUpstream()
    try:
        yield upstream
    finally:
        upstream.close()


# -- error statuses ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize(
    ("status", "type_", "code"),
    [
        (429, "tokens", "rate_limit_exceeded"),
        (500, "server_error", None),
        (502, "server_error", "bad_gateway"),
        (503, "server_error", "overloaded"),
        (529, "overloaded_error", None),
    ],
)
def test_error_status_body_and_retry_after_reach_the_client_unchanged(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    status: int,
    type_: str,
    code: str | None,
    path: str,
    stream: bool,
) -> None:
    proxy = make_proxy()
    headers = {"retry-after": "7", "x-ratelimit-remaining-tokens": "0"}
    fake_upstream.push(Reply.error(status, f"upstream says {status}", type_, code, headers))
    response = httpx.post(
        proxy.base_url + URL, json=BODY | {"stream": stream}, headers=PATHS[path], timeout=10
    )
    expected = {"error": {"message": f"upstream says {status}", "type": type_, "param": None}}
    expected["error"]["code"] = code
    assert response.status_code == status
    assert response.content == json.dumps(expected, indent=2).encode()  # byte for byte
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-ratelimit-remaining-tokens"] == "0"
    assert "x-should-retry" not in response.headers  # the proxy adds no opinion of its own
    assert len(fake_upstream.chat_requests) == 1  # and it does not retry by itself


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", list(PATHS))
def test_refused_connection_is_502(make_proxy: MakeProxy, path: str, stream: bool) -> None:
    proxy = make_proxy(upstream_base_url=f"http://127.0.0.1:{free_port()}/v1")
    response = httpx.post(
        proxy.base_url + URL, json=BODY | {"stream": stream}, headers=PATHS[path], timeout=10
    )
    error = proxy_error(response, 502)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_unreachable")
    assert response.headers.get("x-should-retry") != "false"


# -- timeouts: connect, first byte, idle read ---------------------------------------------------


@pytest.mark.parametrize("path", list(PATHS))
def test_connect_timeout_is_504(make_proxy: MakeProxy, path: str) -> None:
    hole = Blackhole()
    try:
        proxy = make_proxy(upstream_base_url=hole.url, connect_timeout=0.3, read_timeout=30)
        started = time.monotonic()
        response = httpx.post(proxy.base_url + URL, json=BODY, headers=PATHS[path], timeout=10)
        elapsed = time.monotonic() - started
    finally:
        hole.close()
    error = proxy_error(response, 504)
    assert error["code"] == "upstream_timeout" and "connecting" in error["message"]
    assert elapsed < 2.0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", list(PATHS))
def test_first_byte_timeout_is_504(
    make_proxy: MakeProxy, timed: TimedUpstream, path: str, stream: bool
) -> None:
    timed.header_delay, timed.stream = 2.0, stream
    proxy = make_proxy(upstream_base_url=timed.url, first_byte_timeout=0.3, idle_timeout=30)
    started = time.monotonic()
    response = httpx.post(
        proxy.base_url + URL, json=BODY | {"stream": stream}, headers=PATHS[path], timeout=10
    )
    assert time.monotonic() - started < 1.5
    error = proxy_error(response, 504)
    assert error["code"] == "upstream_timeout"
    assert timed.requests == 1


@pytest.mark.parametrize("path", list(PATHS))
def test_idle_timeout_mid_stream_ends_with_an_error_event(
    make_proxy: MakeProxy, timed: TimedUpstream, path: str
) -> None:
    timed.gap = 2.0
    proxy = make_proxy(upstream_base_url=timed.url, first_byte_timeout=30, idle_timeout=0.3)
    started = time.monotonic()
    response = httpx.post(
        proxy.base_url + URL, json=BODY | {"stream": True}, headers=PATHS[path], timeout=10
    )
    assert time.monotonic() - started < 1.5
    assert response.status_code == 200
    assert events(response.content)[0].startswith(b'data: {"id"')  # the first part got through
    error = last_error(response.content)
    assert "timeout" in (error["code"] + error["message"]).lower()
    assert b"[DONE]" not in response.content
    assert timed.requests == 1


@pytest.mark.parametrize("path", list(PATHS))
def test_first_byte_and_idle_timeouts_are_separate(
    make_proxy: MakeProxy, timed: TimedUpstream, path: str
) -> None:
    """A slow first byte within first_byte_timeout, but over idle_timeout, is fine; and slow
    gaps within idle_timeout, but over first_byte_timeout, are fine."""
    body = BODY | {"stream": True}
    slow_start = make_proxy(upstream_base_url=timed.url, first_byte_timeout=3, idle_timeout=0.3)
    timed.header_delay, timed.gap = 0.8, 0.0
    response = httpx.post(slow_start.base_url + URL, json=body, headers=PATHS[path], timeout=10)
    assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n")
    slow_gaps = make_proxy(upstream_base_url=timed.url, first_byte_timeout=0.3, idle_timeout=3)
    timed.header_delay, timed.gap = 0.0, 0.8
    response = httpx.post(slow_gaps.base_url + URL, json=body, headers=PATHS[path], timeout=10)
    assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n")
    assert b'"error"' not in response.content


# -- dropped streams, and no retries once a byte went out --------------------------------------


@pytest.mark.parametrize("path", list(PATHS))
def test_dropped_stream_ends_with_an_error_event_and_is_not_retried(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, path: str
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.text("this reply is cut short by the upstream", drop_after=3))
    fake_upstream.push(Reply.text("a retry would get this"))
    started = time.monotonic()
    response = httpx.post(
        proxy.base_url + URL, json=BODY | {"stream": True}, headers=PATHS[path], timeout=10
    )
    assert time.monotonic() - started < 3.0  # no hang
    assert response.status_code == 200
    assert len(events(response.content)) >= 2
    error = last_error(response.content)
    assert error["type"] in ("upstream_error", "server_error")
    assert b"[DONE]" not in response.content
    assert b"a retry would get this" not in response.content
    assert len(fake_upstream.chat_requests) == 1
    assert fake_upstream.pending == 1


def test_request_ids_pass_through_or_are_minted(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()
    for path, headers in PATHS.items():
        sent = {**headers, "x-request-id": f"client-{path}"}
        fake_upstream.push(Reply.text("x", headers={"x-request-id": f"req_up_{path}"}))
        response = httpx.post(proxy.base_url + URL, json=BODY, headers=sent, timeout=10)
        # The client's id goes upstream; the upstream's id comes back.
        assert fake_upstream.requests[-1].headers["x-request-id"] == f"client-{path}"
        assert response.headers["x-request-id"] == f"req_up_{path}"
    # Answers the proxy makes itself carry a minted id.
    broken = make_proxy(upstream_base_url=f"http://127.0.0.1:{free_port()}/v1")
    for headers in PATHS.values():
        response = httpx.post(broken.base_url + URL, json=BODY, headers=headers, timeout=10)
        assert response.status_code == 502
        assert response.headers["x-request-id"].startswith("req_")
    bad = httpx.post(proxy.base_url + URL, content=b"{", headers=PATHS["compacting"])
    assert bad.status_code == 400 and bad.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize(
    ("method", "route", "content", "headers", "status"),
    [
        ("POST", "/v1/chat/completions", b"{nope", PATHS["compacting"], 400),
        ("POST", "/v1/chat/completions", b"x" * 2000, PATHS["compacting"], 413),
        ("POST", "/v1/embeddings", b"x" * 2000, PATHS["pass-through"], 413),
        ("GET", "/v1/a/%2e%2e/secret", b"", PATHS["pass-through"], 400),
        ("GET", "/nowhere", b"", {}, 404),
        ("DELETE", "/healthz", b"", {}, 405),
    ],
)
def test_errors_retrying_cannot_fix_say_so(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    method: str,
    route: str,
    content: bytes,
    headers: dict[str, str],
    status: int,
) -> None:
    proxy = make_proxy(max_body_bytes=1000)
    with httpx.Client(timeout=10) as client:
        request = client.build_request(method, proxy.url + route, content=content, headers=headers)
        request.url = request.url.copy_with(raw_path=route.encode())  # keep the dot segments
        response = client.send(request)
    proxy_error(response, status)
    assert response.headers["x-should-retry"] == "false"
    assert fake_upstream.requests == []
