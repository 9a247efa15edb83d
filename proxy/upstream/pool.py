"""Keep-alive HTTP/1.1 connections to the one upstream origin, at most `limit` at a time.

httpcore's general pool serves any number of origins and re-scans every connection it holds
whenever a request starts or ends (quadratic in the connections when many are idle); with 64
requests in flight that scan cost more CPU than the requests themselves. The proxy talks to a
single origin, so its pool is a stack of idle connections (the most recently used first, as
it is the least likely to have been closed by the server) and a semaphore for the limit.
Connections are `proxy.upstream.http1.Http1Connection`s: httpcore's request, response and exception
types over asyncio's transport and httptools' parser.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpcore

from proxy.upstream.http1 import Http1Connection


class _Released:
    """A response body that returns its connection to the pool once it is closed."""

    def __init__(
        self,
        pool: OriginPool,
        connection: Http1Connection,
        response: httpcore.Response,
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._response = response
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.aiter_stream():
            yield chunk

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            await self._response.aclose()
        finally:
            await self._pool.put_back(self._connection)


# A request extension: send this request on a new connection, not an idle one (a retry after
# a kept-alive connection turned out closed: the other idle ones may be closed too).
FRESH = "xun_fresh_connection"
# A request extension: the proxy's own background work (a summary written ahead). It takes a
# connection only when one is free at once; with the pool full it fails at once (PoolTimeout),
# so it never queues before a client's request for a connection.
BACKGROUND = "xun_background"


class OriginPool:
    """`handle_async_request` for requests to one origin; `aclose()` closes what is idle."""

    def __init__(self, *, limit: int, keepalive_expiry: float) -> None:
        self.limit = limit
        self.keepalive_expiry = keepalive_expiry
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[Http1Connection] = []
        self._closed = False

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        if self._slots.locked():
            if request.extensions.get(BACKGROUND):
                raise httpcore.PoolTimeout("no upstream connection free for background work")
            timeouts = request.extensions.get("timeout", {})
            try:
                await asyncio.wait_for(self._slots.acquire(), timeouts.get("pool"))
            except TimeoutError as exc:
                raise httpcore.PoolTimeout("no upstream connection free in time") from exc
        else:
            # A free slot is taken at once. (wait_for would run the acquire as a task of its
            # own, and on Python 3.11 swallows a cancellation that arrives as it finishes.)
            await self._slots.acquire()
        try:
            reused = None if request.extensions.get(FRESH) else await self._reusable()
            connection = reused or Http1Connection(
                request.url.origin, keepalive_expiry=self.keepalive_expiry
            )
            try:
                response = await connection.handle_async_request(request)
            except BaseException:
                await connection.aclose()
                raise
        except BaseException:
            self._slots.release()
            raise
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_Released(self, connection, response),
            extensions=response.extensions,
        )

    async def _reusable(self) -> Http1Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection
            await connection.aclose()  # expired, or closed by the server meanwhile
        return None

    async def put_back(self, connection: Http1Connection) -> None:
        """A request's body is closed: keep its connection if it can serve another."""
        try:
            if not self._closed and connection.is_idle() and not connection.has_expired():
                self._idle.append(connection)
            else:
                await connection.aclose()
            # The least recently used connections sit at the bottom: close those that
            # expired, so a burst's connections do not stay open once traffic is low.
            while self._idle and self._idle[0].has_expired():
                await self._idle.pop(0).aclose()
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()
