"""The compacting path under bad input, upstream failures, and histories it cannot parse."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.servers import free_port

URL = "/v1/chat/completions"
HEADERS = {"X-Session-Id": "bad-1", "Authorization": "Bearer sk-inputs"}


def post(proxy: Any, content: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(timeout=30) as client:
        return client.post(
            proxy.url + URL,
            content=content,
            headers={"content-type": "application/json", **(headers or HEADERS)},
        )


def assert_openai_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    assert "Traceback" not in resp.text
    return dict(body["error"])


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b'{"model": "gpt-4o", "messages": [', None),
        (b"[1, 2, 3]", None),
        (b'"a string"', None),
        (b'{"model": "gpt-4o", "messages": "hello"}', "messages"),
        (b'{"model": "gpt-4o"}', "messages"),
        (b"\xff\xfe{not utf-8}", None),
        (b"[" * 100_000 + b"]" * 100_000, None),
    ],
)
def test_malformed_bodies_get_400(
    fake_upstream: FakeUpstream, make_proxy: Any, content: bytes, param: str | None
) -> None:
    proxy = make_proxy()
    err = assert_openai_error(post(proxy, content), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert fake_upstream.chat_requests == []


def test_oversized_body_gets_413(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    proxy = make_proxy(max_body_bytes=10_000)
    big = '{"model":"gpt-4o","messages":[{"role":"user","content":"' + "x" * 20_000 + '"}]}'
    assert_openai_error(post(proxy, big), 413)
    assert fake_upstream.chat_requests == []


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "tool", "tool_call_id": "orphan", "content": "result"}],
        [{"role": "wizard", "content": "abracadabra"}],
        [{"role": "user", "content": "hi"}, 42],
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
        ],
    ],
)
def test_histories_the_proxy_cannot_read_pass_through_unchanged(
    fake_upstream: FakeUpstream, make_proxy: Any, messages: list[Any]
) -> None:
    proxy = make_proxy(token_threshold=10)
    body = {"model": "gpt-4o", "messages": messages}
    resp = post(proxy, httpx.Request("POST", "/", json=body).content)
    assert resp.status_code in (200, 400)
    assert fake_upstream.chat_requests[-1].json == body


def test_upstream_errors_reach_the_client_unchanged(
    fake_upstream: FakeUpstream, make_proxy: Any
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.rate_limited(retry_after=7))
    resp = post(proxy, b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}')
    err = assert_openai_error(resp, 429)
    assert err["code"] == "rate_limit_exceeded"
    assert resp.headers["retry-after"] == "7"
    assert resp.headers["x-xun-session"]


def test_unreachable_upstream_gets_502(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    proxy = make_proxy(upstream_base_url=f"http://127.0.0.1:{free_port()}/v1")
    assert_openai_error(
        post(proxy, b'{"model":"m","messages":[{"role":"user","content":"x"}]}'), 502
    )


def test_upstream_timeout_gets_504(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    proxy = make_proxy(read_timeout=0.3)
    fake_upstream.push(Reply.text("late", delay=2.0))
    assert_openai_error(
        post(proxy, b'{"model":"m","messages":[{"role":"user","content":"x"}]}'), 504
    )


def test_request_id_passes_through_or_is_minted(
    fake_upstream: FakeUpstream, make_proxy: Any
) -> None:
    proxy = make_proxy()
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    upstream_id = post(proxy, body).headers["x-request-id"]
    assert upstream_id.startswith("req_")
    fake_upstream.push(Reply.text("x", headers={"x-request-id": "req_from_upstream"}))
    assert post(proxy, body).headers["x-request-id"] == "req_from_upstream"


def test_configured_session_headers_in_order(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    proxy = make_proxy(session_headers=["X-Claude-Session", "X-Session-Id"])
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    a = post(
        proxy, body, {"X-Claude-Session": "one", "X-Session-Id": "two", "Authorization": "Bearer k"}
    )
    b = post(proxy, body, {"X-Claude-Session": "one", "Authorization": "Bearer k"})
    c = post(proxy, body, {"X-Session-Id": "two", "Authorization": "Bearer k"})
    assert a.headers["x-xun-session"] == b.headers["x-xun-session"] != c.headers["x-xun-session"]
    d = post(proxy, body, {"Authorization": "Bearer k"})
    assert "x-xun-session" not in d.headers


@pytest.mark.parametrize(
    "session", ["../../etc/passwd", "a/b\\c:d%2F", "x" * 10_000, "ünï cødé 🚀"]
)
def test_odd_session_ids_work(fake_upstream: FakeUpstream, make_proxy: Any, session: str) -> None:
    proxy = make_proxy()
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    with httpx.Client(timeout=30) as client:
        resp = client.post(
            proxy.url + URL,
            content=body,
            headers={
                "content-type": "application/json",
                "X-Session-Id": session.encode(),
                "Authorization": "Bearer k",
            },
        )
    assert resp.status_code == 200
    assert "/" not in resp.headers["x-xun-session"]
