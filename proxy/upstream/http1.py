"""One keep-alive HTTP/1.1 connection to the upstream, on asyncio's transport and the C parser
uvicorn already serves with (httptools).

In a bare forwarding app (uvicorn, one ASGI function), httpcore's pool and connection (h11, a
pure-Python parser, over anyio's streams) took 1.6 ms of CPU to relay a 50 KB request, this
connection 0.4 ms. It sends the head and body in one write and, for an answer that arrives in
one piece, waits once.

It is a drop-in for `httpcore.AsyncHTTPConnection` in `proxy.upstream.pool`: it takes httpcore's
`Request` (the timeouts in its `timeout` extension, read at every wait, so a caller may change
the read timeout once the headers are in), returns httpcore's `Response`, and raises
httpcore's exceptions, so the error mapping in `proxy.upstream.transport_errors` is unchanged.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from functools import cache
from typing import Any, cast

import httpcore
import httptools

# Reading pauses while this much of a body waits for its reader, and resumes below LOW_WATER.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
# `proxy.upstream.client` retries on a fresh connection when it sees these words: the server
# closed a kept-alive connection just as it was reused, before it read the request.
NO_RESPONSE = "Server disconnected without sending a response."
INCOMPLETE_BODY = "peer closed connection without sending complete message body"


@cache
def default_ssl_context() -> ssl.SSLContext:
    """What httpcore verifies with (certifi's CA bundle), made once."""
    context = httpcore.default_ssl_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class Http1Connection(asyncio.Protocol):
    """`handle_async_request`, `is_idle`, `has_expired`, `aclose`: what `OriginPool` uses."""

    def __init__(self, origin: httpcore.Origin, *, keepalive_expiry: float | None = None) -> None:
        self._origin = origin
        self._keepalive_expiry = keepalive_expiry
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._busy = False  # a request is in flight, or its body is still being read
        self._idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._reset(b"GET")

    def _reset(self, method: bytes) -> None:
        self._method = method
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._informational = False
        self._headers_done = False
        self._until_eof = False
        self._keep_alive = False
        self._complete = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._reading_paused = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._received = False  # any byte of this response

    # -- what the pool calls -------------------------------------------------------------

    def is_idle(self) -> bool:
        return not self._busy and not self._closed and self._transport is not None

    def has_expired(self) -> bool:
        if self._closed or self._transport is None or self._transport.is_closing():
            return True
        expiry = self._keepalive_expiry
        return (
            not self._busy and expiry is not None and time.monotonic() - self._idle_since > expiry
        )

    async def aclose(self) -> None:
        self._close()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        timeouts = request.extensions.get("timeout", {})
        if self._transport is None:
            await self._connect(timeouts.get("connect"))
        if self._closed or self._busy:  # the pool hands out only idle connections
            raise httpcore.RemoteProtocolError(NO_RESPONSE)
        self._busy = True
        self._reset(request.method)
        await self._write_request(request, timeouts)
        while not self._headers_done:
            await self._wait(timeouts, "read", httpcore.ReadTimeout)
        return httpcore.Response(
            self._status,
            headers=self._headers,
            content=_Body(self, timeouts),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": b""},
        )

    # -- sending -------------------------------------------------------------------------

    async def _connect(self, seconds: float | None) -> None:
        origin = self._origin
        if origin.scheme not in (b"http", b"https"):
            raise httpcore.UnsupportedProtocol(f"Request URL has an unsupported scheme {origin}.")
        host = origin.host.decode("ascii")
        secure = origin.scheme == b"https"
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: self,
                    host,
                    origin.port,
                    ssl=default_ssl_context() if secure else None,
                    server_hostname=host if secure else None,
                ),
                seconds,
            )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{origin.port} timed out") from exc
        except OSError as exc:  # refused, unreachable, DNS, TLS verification
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc

    async def _write_request(self, request: httpcore.Request, timeouts: dict[str, Any]) -> None:
        head = _head(request)
        chunked = any(
            name.lower() == b"transfer-encoding" and b"chunked" in value.lower()
            for name, value in request.headers
        )
        stream = request.stream
        transport = self._transport
        assert transport is not None
        if isinstance(stream, Iterable) and not chunked:
            # The proxy's requests (bytes, which httpcore wraps in a one-piece iterable): the
            # whole body at hand, sent with the head in one write.
            body = b"".join(stream)
            transport.writelines((head, body) if body else (head,))
        else:
            transport.write(head)
            async for chunk in _async_chunks(stream):
                if not chunk:
                    continue
                if chunked:
                    transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
                else:
                    transport.write(chunk)
                await self._drain(timeouts)
            if chunked:
                transport.write(b"0\r\n\r\n")
        await self._drain(timeouts)

    async def _drain(self, timeouts: dict[str, Any]) -> None:
        while self._write_paused and not self._closed:
            self._drained = asyncio.get_running_loop().create_future()
            await self._wait(timeouts, "write", httpcore.WriteTimeout, self._drained)
        if self._closed and not self._received:
            raise self._error or httpcore.WriteError("the upstream connection closed")

    # -- waiting ---------------------------------------------------------------------------

    async def _wait(
        self,
        timeouts: dict[str, Any],
        kind: str,
        timeout_error: type[Exception],
        future: asyncio.Future[None] | None = None,
    ) -> None:
        """Wait for the next event of the response (or `future`); raise what went wrong."""
        if self._error is not None:
            raise self._error
        loop = asyncio.get_running_loop()
        if future is None:
            future = self._waiter = loop.create_future()
        timeout = timeouts.get(kind)
        timer = None
        if timeout is not None:

            def expire() -> None:
                if not future.done():
                    future.set_exception(timeout_error(f"{kind} timed out after {timeout} s"))

            timer = loop.call_later(timeout, expire)
        try:
            await future
        except BaseException:
            self._close()  # a timeout or a cancellation: the exchange is beyond repair
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- receiving (asyncio.Protocol and the parser's callbacks) ------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's, but have the same methods.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self._busy:
            self._close()  # bytes nobody asked for: the connection cannot be trusted again
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self._complete:
                self._close()  # bytes after the whole answer (see on_message_begin): it stands
            else:
                self._fail(httpcore.RemoteProtocolError(f"invalid HTTP response: {exc}"))

    def eof_received(self) -> bool | None:
        return False  # close the transport: connection_lost settles the response

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._busy and not self._complete and self._error is None:
            if self._headers_done and self._until_eof:
                self._complete = True
            elif not self._received:
                self._error = httpcore.RemoteProtocolError(NO_RESPONSE)
            else:
                self._error = httpcore.RemoteProtocolError(INCOMPLETE_BODY)
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def on_message_begin(self) -> None:
        if self._complete:
            # A second answer to one request: parsed on, it would overwrite this one's status
            # and headers and add to its body. Stop the parser; the connection is closed.
            raise httpcore.RemoteProtocolError("more than one answer to a request")

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._headers_done:  # after them, the trailers of a chunked body: not headers
            self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._informational = True  # 100 Continue and the like: the answer follows
            return
        self._status = status
        names = {name.lower() for name, _ in self._headers}
        self._until_eof = (
            self._method != b"HEAD"
            and status not in (204, 304)
            and b"content-length" not in names
            and b"transfer-encoding" not in names
        )
        self._keep_alive = self._parser.should_keep_alive() and not self._until_eof
        self._headers_done = True
        if self._method == b"HEAD":
            # The parser would wait for the body the headers announce: end here, and close.
            self._keep_alive = False
            self._complete = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._complete:
            return  # the body a HEAD answer announces (its answer ended with the headers)
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            self._headers = []
            return
        self._complete = True
        self._wake()

    # -- the body, as httpcore's Response reads it ---------------------------------------------

    async def next_chunk(self, timeouts: dict[str, Any]) -> bytes | None:
        """The body's next piece, or None at its end (the connection is then free again)."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._reading_paused and self._buffered < LOW_WATER and self._transport:
                    self._reading_paused = False
                    self._transport.resume_reading()
                return chunk
            if self._complete:
                self._release()
                return None
            await self._wait(timeouts, "read", httpcore.ReadTimeout)

    def body_closed(self) -> None:
        """The reader is done with the body: keep the connection if the exchange finished."""
        if self._busy and not (self._complete and not self._chunks):
            self._close()  # unread body: the connection is not reusable
        self._release()

    def _release(self) -> None:
        if not self._busy:
            return
        self._busy = False
        self._idle_since = time.monotonic()
        if not self._keep_alive or self._error is not None:
            self._close()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._close()
        self._wake()

    def _close(self) -> None:
        self._closed = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()


class _Body:
    """The response body: what `httpcore.Response.aiter_stream()` and `aclose()` call."""

    def __init__(self, connection: Http1Connection, timeouts: dict[str, Any]) -> None:
        self._connection = connection
        self._timeouts = timeouts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (chunk := await self._connection.next_chunk(self._timeouts)) is not None:
            yield chunk

    async def aclose(self) -> None:
        self._connection.body_closed()


def _head(request: httpcore.Request) -> bytes:
    """The request line and headers; a header with a line break is refused, never sent."""
    lines = [request.method, b" ", request.url.target, b" HTTP/1.1\r\n"]
    for name, value in request.headers:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name or b":" in name:
            raise httpcore.LocalProtocolError(f"Illegal header {name!r}")
        lines += (name, b": ", value, b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


async def _async_chunks(stream: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(stream, AsyncIterable):
        async for chunk in stream:
            yield chunk
    else:
        for chunk in stream:
            yield chunk
