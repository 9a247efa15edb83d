"""`Content-Encoding: gzip` request bodies on the compacting path: decoded (within the body
limit, counted on the decoded size), compacted as usual, sent upstream uncompressed; other
encodings a 415 and corrupt bodies a 400, in the API's shape. Through real uvicorn, on each
wire (the SDKs never compress a body, so httpx sends the bytes).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.errors import PayloadTooLarge
from proxy.server.app import create_app
from proxy.server.content_encoding import decoded_body
from tests.conftest import proxy_settings
from tests.support.fake_messages import FakeMessages
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_responses import FakeResponses
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import Reply
from tests.support.servers import UvicornThread

LIMIT = 256 * 1024
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "/v1/chat/completions",
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * 200}]},
    ),
    "responses": ("/v1/responses", {"model": "gpt-4o", "input": "hi " * 200, "store": False}),
    "messages": (
        "/v1/messages",
        {
            "model": "claude-opus-4-8",
            "max_tokens": 32,
            "messages": [{"role": "user", "content": "hi " * 200}],
        },
    ),
}
HEADERS = {
    "authorization": "Bearer sk-gzip",
    "x-session-id": "gz-1",
    "content-type": "application/json",
}


@pytest.fixture(scope="module")
def messages_fake() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture(scope="module")
def responses_fake() -> Iterator[FakeResponses]:
    with FakeResponses() as running:
        yield running


@pytest.fixture
def proxy_url(messages_fake: FakeMessages, responses_fake: FakeResponses) -> Iterator[str]:
    messages_fake.reset()
    responses_fake.reset()
    settings = proxy_settings(
        None,
        upstream_base_url=responses_fake.url,
        anthropic_base_url=messages_fake.url.removesuffix("/v1"),
        max_body_bytes=LIMIT,
    )
    with UvicornThread(create_app(settings)) as running:
        yield running.url


def upstream_bodies(
    wire: str, messages_fake: FakeMessages, responses_fake: FakeResponses
) -> list[Any]:
    if wire == "messages":
        return messages_fake.messages_requests
    return [r for r in responses_fake.requests if r.path == BODIES[wire][0]]


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("wire", list(BODIES))
def test_a_compressed_body_is_decoded_and_compacted(
    messages_fake: FakeMessages,
    responses_fake: FakeResponses,
    proxy_url: str,
    wire: str,
    coding: str,
) -> None:
    path, body = BODIES[wire]
    if wire == "messages":
        messages_fake.push_turns(MessagesTurn.text("hello"))
    elif wire == "responses":
        responses_fake.push_turns(ResponsesTurn(text="hello"))
    else:
        responses_fake.push(Reply.text("hello"))
    raw = json.dumps(body).encode()
    packed = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw)
    response = httpx.post(
        proxy_url + path, content=packed, headers={**HEADERS, "content-encoding": coding}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-xun-compaction"] == "none"  # the compacting path took it
    (sent,) = upstream_bodies(wire, messages_fake, responses_fake)
    assert "content-encoding" not in sent.headers
    assert sent.json["model"] == body["model"]


def error_of(wire: str, response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    data = response.json()
    if wire == "messages":
        assert data["type"] == "error" and set(data["error"]) == {"type", "message"}, data
    else:
        assert set(data["error"]) == {"message", "type", "param", "code"}, data
    error: dict[str, Any] = data["error"]
    return error


@pytest.mark.parametrize("wire", list(BODIES))
def test_a_zip_bomb_is_413_on_its_decoded_size(
    messages_fake: FakeMessages, responses_fake: FakeResponses, proxy_url: str, wire: str
) -> None:
    path, body = BODIES[wire]
    bomb = gzip.compress(json.dumps(body).encode()[:-1] + b', "pad": "' + b"0" * (64 * LIMIT))
    assert len(bomb) < LIMIT // 4
    response = httpx.post(
        proxy_url + path, content=bomb, headers={**HEADERS, "content-encoding": "gzip"}
    )
    error = error_of(wire, response, 413)
    assert "decoded" in error["message"]
    assert upstream_bodies(wire, messages_fake, responses_fake) == []


@pytest.mark.parametrize(
    ("coding", "payload", "status"),
    [("br", b"\x1b\x00", 415), ("zstd", b"(\xb5/\xfd", 415), ("gzip", b"not gzip at all", 400)],
)
@pytest.mark.parametrize("wire", list(BODIES))
def test_unreadable_encodings_get_api_shaped_errors(
    messages_fake: FakeMessages,
    responses_fake: FakeResponses,
    proxy_url: str,
    wire: str,
    coding: str,
    payload: bytes,
    status: int,
) -> None:
    response = httpx.post(
        proxy_url + BODIES[wire][0],
        content=payload,
        headers={**HEADERS, "content-encoding": coding},
    )
    error = error_of(wire, response, status)
    assert "Content-Encoding" in error["message"]
    assert upstream_bodies(wire, messages_fake, responses_fake) == []


def test_decoding_rules() -> None:
    raw = b'{"a": 1}'
    assert decoded_body(raw, None, 100) == raw
    assert decoded_body(raw, "identity", 100) == raw
    assert decoded_body(gzip.compress(raw) + gzip.compress(raw), "gzip", 100) == raw + raw
    assert decoded_body(gzip.compress(zlib.compress(raw)), "deflate, gzip", 100) == raw
    with pytest.raises(PayloadTooLarge):
        decoded_body(gzip.compress(raw * 20), "gzip", 100)
    assert decoded_body(gzip.compress(raw * 10), "gzip", 80) == raw * 10  # exactly the limit
