"""Upstream: URL building (no SSRF), header rules, error mapping, the JSON helper."""

from __future__ import annotations

from typing import Any

import httpcore
import httpx
import pytest

from proxy.errors import InvalidRequest, UpstreamInvalidResponse
from proxy.settings import Settings
from proxy.upstream.client import Upstream
from tests.conftest import MakeProxy
from tests.support.fake_upstream import FakeUpstream, Reply

CHAT: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def upstream_for(base: str = "http://up.test:9/v1", **overrides: Any) -> Upstream:
    return Upstream(Settings(upstream_base_url=base, store_url="memory://", **overrides))


@pytest.mark.parametrize(
    ("base", "path", "params", "expected"),
    [
        ("http://up.test:9/v1", "/models", None, "http://up.test:9/v1/models"),
        ("http://up.test:9/v1/", "models", None, "http://up.test:9/v1/models"),
        ("http://up.test:9", "/v1/models", b"a=1&b=%20", "http://up.test:9/v1/models?a=1&b=%20"),
        ("https://h/openai/v1", "//evil.com/x", None, "https://h/openai/v1/evil.com/x"),
        ("https://h/v1", "http://evil.com/x", None, "https://h/v1/http://evil.com/x"),
        ("https://h/v1", "/files/a%2Fb", "", "https://h/v1/files/a%2Fb"),
        ("https://h/v1", "/files/é x", None, "https://h/v1/files/%C3%A9%20x"),
        ("https://h/v1", "/models", {"limit": "2"}, "https://h/v1/models?limit=2"),
    ],
)
def test_upstream_url(base: str, path: str, params: Any, expected: str) -> None:
    url = upstream_for(base).url(path, params)
    assert str(url) == expected
    assert url.host == httpx.URL(base).host


@pytest.mark.parametrize(
    "path",
    [
        "/../x",
        "/a/./b",
        "/a/%2E%2e/b",
        "..",
        "/a/..",
        "/%2e%2e%2f%2e%2e%2fadmin",  # an escaped slash joins the dots into a segment
        "/a/..%5cadmin",
        "/a/..\\admin",
        "/..;/admin",
        "/a/..;v=1/b",
        "/a/%2e;/b",
        "/a/.%2E",
        "/a/%252e%252e%252fb",  # escaped twice
        "/a/%25252e%25252e/b",  # three times
        "/a/x%2f..",
    ],
)
def test_upstream_url_refuses_dot_segments(path: str) -> None:
    with pytest.raises(InvalidRequest):
        upstream_for().url(path)


@pytest.mark.parametrize(
    "path", ["/a..b", "/...", "/a/.b", "/a/b.", "/a;b", "/ft%3Agpt-4o%3Ax", "/%2e%2e-x"]
)
def test_dots_inside_a_segment_pass(path: str) -> None:
    assert str(upstream_for().url(path)).startswith("http://up.test:9/v1/")


def test_forward_headers_unit() -> None:
    incoming = {
        "Host": "proxy:8484",
        "Content-Length": "12",
        "Transfer-Encoding": "chunked",
        "Connection": "close, X-Private",
        "X-Private": "1",
        "Upgrade": "h2c",
        "Proxy-Connection": "keep-alive",
        "Expect": "100-continue",
        "Authorization": "Bearer c",
        "X-Session-Id": "s1",
    }
    assert upstream_for().forward_headers(incoming) == {
        "authorization": "Bearer c",
        "x-session-id": "s1",
        "accept-encoding": "identity",
    }
    keyed = upstream_for(upstream_api_key="sk-u").forward_headers({"authorization": "Bearer c"})
    assert keyed["authorization"] == "Bearer sk-u"
    assert upstream_for(upstream_api_key="sk-u").forward_headers({})["authorization"] == (
        "Bearer sk-u"
    )


def test_response_headers_unit() -> None:
    headers = httpx.Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", "10"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "X-Private"),
            ("X-Private", "1"),
            ("Date", "now"),
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
        ]
    )
    decoded = Upstream.response_headers(headers)
    assert decoded == [
        ("content-type", "application/json"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
    ]
    assert ("content-encoding", "gzip") in Upstream.response_headers(headers, raw=True)


async def test_post_json(fake_upstream: FakeUpstream) -> None:
    fake_upstream.push(Reply.text("summary text"), Reply.rate_limited(retry_after=3))
    upstream = upstream_for(fake_upstream.url)
    try:
        headers = {"authorization": "Bearer sk-a"}
        status, data, _ = await upstream.post_json("/chat/completions", CHAT, headers)
        assert (status, data["choices"][0]["message"]["content"]) == (200, "summary text")
        status, data, response_headers = await upstream.post_json("chat/completions", CHAT, headers)
        assert (status, data["error"]["code"]) == (429, "rate_limit_exceeded")
        assert response_headers["retry-after"] == "3"
        assert fake_upstream.requests[0].json == CHAT
        assert fake_upstream.requests[0].headers["content-type"] == "application/json"
    finally:
        await upstream.aclose()


class StandInPool:
    """Answers every request with `reply`, or raises it when it is an exception."""

    def __init__(self, reply: httpcore.Response | Exception) -> None:
        self.reply = reply
        self.requests: list[httpcore.Request] = []

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        self.requests.append(request)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply

    async def aclose(self) -> None:
        pass


async def test_post_json_rejects_non_json() -> None:
    upstream = Upstream(
        Settings(upstream_base_url="http://x/v1", store_url="memory://"),
        pool=StandInPool(httpcore.Response(200, content=b"<html>")),
    )
    try:
        with pytest.raises(UpstreamInvalidResponse):
            await upstream.post_json("/chat/completions", {}, {})
    finally:
        await upstream.aclose()


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (httpcore.ConnectError("refused"), 502, "upstream_unreachable"),
        (httpcore.ConnectTimeout("slow"), 504, "upstream_timeout"),
        (httpcore.ReadTimeout("slow"), 504, "upstream_timeout"),
        (httpcore.WriteTimeout("slow"), 504, "upstream_timeout"),
        (httpcore.PoolTimeout("busy"), 503, "upstream_pool_exhausted"),
        (httpcore.RemoteProtocolError("closed"), 502, "upstream_unreachable"),
        (httpcore.UnsupportedProtocol("gopher"), 502, "upstream_unreachable"),
    ],
)
def test_transport_errors_map_to_statuses(
    make_proxy: MakeProxy, error: Exception, status: int, code: str
) -> None:
    proxy = make_proxy(pool=StandInPool(error))
    response = httpx.get(proxy.base_url + "/models")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert "refused" not in response.text and "slow" not in response.text
