"""Header values with control characters: an API-shaped 400 where the proxy sees them.

Through real uvicorn and raw sockets (HTTP clients refuse to send such headers). With h11
(`--http h11`, or an embedding server) the bytes 0x01-0x08, 0x0e-0x1f and 0x7f reach the app:
the proxy answers 400 `invalid_header` in OpenAI's shape, or Anthropic's under
`/v1/messages`, and sends nothing upstream. With uvicorn's default parser (httptools) every
control character is refused before the app, with uvicorn's own plain-text 400: the proxy
never sees it (SECURITY.md says so), and nothing goes upstream either.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.server.app import create_app
from proxy.server.guard import tidy_headers
from tests.conftest import proxy_settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import UvicornThread

BODY = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
ROUTES = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "count_tokens": "/v1/messages/count_tokens",
    "pass-through": "/v1/models",
}
CONTROLS = [0x01, 0x08, 0x1F, 0x7F]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as running:
        yield running


def post_raw(port: int, path: str, header: bytes) -> tuple[int, bytes]:
    request = (
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\nConnection: close\r\n"
        ).encode()
        + header
        + b"\r\n\r\n"
        + BODY
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def serve(fake: FakeUpstream, **config: Any) -> UvicornThread:
    settings = proxy_settings(fake, anthropic_base_url=fake.url.removesuffix("/v1"))
    return UvicornThread(create_app(settings), **config)


@pytest.mark.parametrize("control", CONTROLS, ids=hex)
@pytest.mark.parametrize("route", list(ROUTES))
def test_control_characters_that_reach_the_app_get_an_api_shaped_400(
    fake: FakeUpstream, route: str, control: int
) -> None:
    fake.reset()
    header = b"X-Session-Id: s" + bytes([control]) + b"1"
    if route == "pass-through":
        header = b"X-Trace: a" + bytes([control]) + b"b"
    with serve(fake, http="h11") as running:
        status, body = post_raw(running.port, ROUTES[route], header)
    assert status == 400, body
    error = json.loads(body)
    if route in ("messages", "count_tokens"):
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    else:
        assert error["error"]["code"] == "invalid_header"
    assert bytes([control]) not in body  # the value is never echoed
    assert fake.requests == []


def test_uvicorns_default_parser_refuses_them_before_the_app(fake: FakeUpstream) -> None:
    fake.reset()
    with serve(fake) as running:
        for control in CONTROLS:
            status, _ = post_raw(running.port, ROUTES["chat"], b"X-Trace: a" + bytes([control]))
            assert status == 400
    assert fake.requests == []


def test_tab_and_obs_text_pass() -> None:
    scope = {"type": "http", "headers": [(b"x-a", b"a\tb"), (b"x-b", b"caf\xc3\xa9")]}
    assert tidy_headers(scope) is None
