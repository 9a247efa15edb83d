"""A streamed chat round ends at its last chunk (the usage the proxy asks for, or `data:
[DONE]`), not at the end of the upstream's body: the client's [DONE] does not wait for it."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.reliability.rawupstream import chunk, sse
from tests.support.fake_upstream import FakeUpstream, Reply

HEADERS = {"X-Session-Id": "stream-end-1", "Authorization": "Bearer sk-stream-end"}
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
ROLE = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
USAGE = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
ANSWER = b"".join(
    [
        sse(chunk("") | {"choices": [ROLE]}),
        sse(chunk("Hello")),
        sse(chunk(" there")),
        sse(chunk("", finish="stop")),
    ]
)
DONE = b"data: [DONE]\n\n"
# The upstream holds its body open after the first part until the test releases it.
STREAMS = {
    "done": [ANSWER + DONE],
    "usage": [ANSWER + sse(chunk("") | {"choices": [], "usage": USAGE}), DONE],
}


async def _read(client: httpx.AsyncClient, url: str, release: threading.Event) -> bytes:
    """The whole stream; the upstream is released once the client has read [DONE]."""
    async with client.stream("POST", url, json=BODY, headers=HEADERS) as resp:
        assert resp.status_code == 200
        received = b""
        parts = resp.aiter_bytes()
        while b"[DONE]" not in received:
            received += await anext(parts)
        release.set()
        async for part in parts:
            received += part
    return received


@pytest.mark.parametrize("last", sorted(STREAMS))
async def test_done_is_sent_while_the_upstream_body_is_still_open(
    fake_upstream: FakeUpstream, make_proxy: Any, last: str
) -> None:
    proxy = make_proxy()
    url = proxy.base_url + "/chat/completions"
    release = threading.Event()
    fake_upstream.push(Reply(raw_stream=STREAMS[last], hold=release))
    async with httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url, json=BODY, headers=HEADERS) as resp:
            received = b""
            parts = resp.aiter_bytes()
            while b"[DONE]" not in received:
                received += await anext(parts)
            # The client has its whole answer while the upstream has not ended the body.
            assert not fake_upstream.chat_requests[-1].completed
            release.set()
            async for part in parts:
                received += part
        assert received.count(b"data: [DONE]\n\n") == 1 and received.endswith(b"[DONE]\n\n")
        assert b'"Hello"' in received and b'" there"' in received
        assert fake_upstream.wait_for(lambda: fake_upstream.chat_requests[-1].completed)

        # The session's next turn streams as well, after the first one's body was read out.
        again = threading.Event()
        fake_upstream.push(Reply(raw_stream=STREAMS[last], hold=again))
        second = await _read(client, url, again)
    assert second.endswith(b"data: [DONE]\n\n") and b'" there"' in second
    assert len(fake_upstream.chat_requests) == 2
