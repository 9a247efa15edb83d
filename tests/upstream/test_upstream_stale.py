"""A keep-alive connection the upstream closed just as it was reused is retried once on a new
connection (the upstream never read the request); any other failure is not retried."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.servers import free_port

BODY = b'{"id":"x","object":"chat.completion","choices":[],"usage":{"total_tokens":1}}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


class ClosingUpstream:
    """Answers the first request of each connection, then closes it unanswered at the next
    one, the way a server whose keep-alive timer fired does."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests = 0
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if served:
                    break  # the stale reuse: close without a response
                self.requests += 1
                served += 1
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def stop(self) -> None:
        async def close() -> None:
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture
def closing_upstream() -> Iterator[ClosingUpstream]:
    upstream = ClosingUpstream()
    upstream.thread.start()
    upstream.ready.wait(5)
    yield upstream
    upstream.stop()


@pytest.mark.parametrize("session", [None, "stale-1"])
def test_a_stale_pooled_connection_is_retried_once(
    closing_upstream: ClosingUpstream, make_proxy: Any, session: str | None
) -> None:
    proxy = make_proxy(upstream_base_url=f"http://127.0.0.1:{closing_upstream.port}/v1")
    headers = {"authorization": "Bearer k", **({"x-session-id": session} if session else {})}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            response = client.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
            assert response.status_code == 200, response.text
    assert closing_upstream.requests == 3
    assert closing_upstream.connections >= 3  # each reuse failed and went to a new connection


def test_the_retry_does_not_take_another_stale_pooled_connection(
    closing_upstream: ClosingUpstream, make_proxy: Any
) -> None:
    """Two kept-alive connections in the pool, both stale by the time of the next request: the
    retry after the first goes to a new connection, not to the other stale one."""
    proxy = make_proxy(upstream_base_url=f"http://127.0.0.1:{closing_upstream.port}/v1")
    headers = {"authorization": "Bearer k"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    url = proxy.base_url + "/chat/completions"

    async def two_at_once() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            answers = await asyncio.gather(
                *(client.post(url, json=body, headers=headers) for _ in range(2))
            )
        assert [a.status_code for a in answers] == [200, 200]

    asyncio.run(two_at_once())
    assert closing_upstream.connections == 2  # both now idle in the proxy's pool
    with httpx.Client(timeout=10) as client:
        response = client.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert closing_upstream.requests == 3 and closing_upstream.connections == 3
