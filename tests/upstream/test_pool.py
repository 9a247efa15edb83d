"""The upstream pool: one origin, connections reused, a hard limit with a pool timeout."""

from __future__ import annotations

import asyncio

import httpcore
import orjson
import pytest

from proxy.upstream.pool import BACKGROUND, FRESH, OriginPool
from tests.support.fake_upstream import FakeUpstream, Reply

BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def request(
    fake: FakeUpstream, *, pool_timeout: float = 5.0, body: bytes = BODY
) -> httpcore.Request:
    url = httpcore.URL(fake.url + "/chat/completions")
    headers = [
        (b"host", url.host + b":" + str(url.port).encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    timeouts = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": pool_timeout}
    return httpcore.Request(
        b"POST", url, headers=headers, content=body, extensions={"timeout": timeouts}
    )


async def read(response: httpcore.Response) -> bytes:
    try:
        return await response.aread()
    finally:
        await response.aclose()


async def test_sequential_requests_reuse_one_connection(fake_upstream: FakeUpstream) -> None:
    pool = OriginPool(limit=4, keepalive_expiry=5.0)
    try:
        seen = set()
        for _ in range(5):
            response = await pool.handle_async_request(request(fake_upstream))
            assert response.status == 200 and b"choices" in await read(response)
            assert pool.idle == 1
            seen.add(id(pool._idle[0]))
        assert len(seen) == 1
    finally:
        await pool.aclose()
    assert pool.idle == 0


async def test_a_request_marked_fresh_skips_the_idle_connections(
    fake_upstream: FakeUpstream,
) -> None:
    pool = OriginPool(limit=4, keepalive_expiry=5.0)
    try:
        await read(await pool.handle_async_request(request(fake_upstream)))
        idle = pool._idle[0]
        fresh = request(fake_upstream)
        fresh.extensions[FRESH] = True
        await read(await pool.handle_async_request(fresh))
        assert pool.idle == 2 and idle in pool._idle  # the idle one was left alone
    finally:
        await pool.aclose()


async def test_the_limit_holds_and_a_wait_past_the_pool_timeout_fails(
    fake_upstream: FakeUpstream,
) -> None:
    pool = OriginPool(limit=1, keepalive_expiry=5.0)
    try:
        first = await pool.handle_async_request(request(fake_upstream))  # body not read yet
        with pytest.raises(httpcore.PoolTimeout):
            await pool.handle_async_request(request(fake_upstream, pool_timeout=0.05))
        await read(first)  # gives the connection back
        second = await pool.handle_async_request(request(fake_upstream, pool_timeout=0.05))
        assert second.status == 200
        await read(second)
    finally:
        await pool.aclose()


async def test_background_work_never_waits_for_a_connection(
    fake_upstream: FakeUpstream,
) -> None:
    """A summary written ahead fails at once on a full pool (the proxy defers it), instead of
    queueing for the connection a client's request is waiting for."""
    pool = OriginPool(limit=1, keepalive_expiry=5.0)
    try:
        first = await pool.handle_async_request(request(fake_upstream))  # body not read yet
        background = request(fake_upstream, pool_timeout=30.0)
        background.extensions[BACKGROUND] = True
        client = asyncio.ensure_future(pool.handle_async_request(request(fake_upstream)))
        with pytest.raises(httpcore.PoolTimeout):
            await pool.handle_async_request(background)
        assert not client.done()  # the client's request still waits for the connection
        await read(first)
        assert (await client).status == 200  # and gets it
        await read(client.result())
        # With a connection free, background work takes it.
        background = request(fake_upstream)
        background.extensions[BACKGROUND] = True
        taken = await pool.handle_async_request(background)
        assert taken.status == 200 and b"choices" in await read(taken)
    finally:
        await pool.aclose()


async def test_a_response_closed_before_its_end_does_not_return_its_connection(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.push(Reply.text("x" * 400, chunk_chars=4, chunk_delay=0.01))
    pool = OriginPool(limit=1, keepalive_expiry=5.0)
    try:
        stream = orjson.dumps({**orjson.loads(BODY), "stream": True})
        response = await pool.handle_async_request(request(fake_upstream, body=stream))
        async for _ in response.aiter_stream():
            break
        await response.aclose()
        assert pool.idle == 0  # half-read: the connection is closed, not kept
        # The slot is free again: the next request gets a fresh connection at once.
        again = await pool.handle_async_request(request(fake_upstream, pool_timeout=0.5))
        assert again.status == 200
        await read(again)
        assert pool.idle == 1
    finally:
        await pool.aclose()


async def test_connections_idle_past_their_keep_alive_are_closed(
    fake_upstream: FakeUpstream,
) -> None:
    pool = OriginPool(limit=4, keepalive_expiry=0.2)
    try:
        held = [await pool.handle_async_request(request(fake_upstream)) for _ in range(3)]
        for response in held[:2]:
            await read(response)
        assert pool.idle == 2
        await asyncio.sleep(0.3)
        await read(held[2])  # returned fresh: the two that expired meanwhile are closed
        assert pool.idle == 1
    finally:
        await pool.aclose()
