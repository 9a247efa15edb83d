"""`proxy.upstream.http1.Http1Connection` against real sockets.

Each test scripts a raw asyncio server on 127.0.0.1 byte for byte (no HTTP library on that side) and
drives one connection the way `proxy.upstream.pool` does: httpcore's request in, httpcore's response
out, httpcore's exceptions for what goes wrong.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import httpcore
import pytest

from proxy.upstream import http1
from proxy.upstream.http1 import HIGH_WATER, INCOMPLETE_BODY, NO_RESPONSE, Http1Connection
from tests.support.servers import free_port

TIMEOUTS = {"connect": 2.0, "read": 2.0, "write": 2.0}
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


# -- the scripted server ------------------------------------------------------------------


class Peer:
    """The server's side of one connection, as a test scripts it."""

    def __init__(
        self, server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer

    async def request(self) -> bytes:
        """The next request, head and body as they came (b"" once the client has closed)."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return b""
        if re.search(rb"\r\ntransfer-encoding: *chunked", head, re.IGNORECASE):
            body = await self.reader.readuntil(b"0\r\n\r\n")
        elif length := re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE):
            body = await self.reader.readexactly(int(length[1]))
        else:
            body = b""
        self.server.requests.append(head + body)
        return head + body

    async def send(self, *parts: bytes, pause: float = 0.0) -> None:
        """Each part in a write of its own, `pause` seconds apart."""
        for index, part in enumerate(parts):
            if index and pause:
                await asyncio.sleep(pause)
            self.writer.write(part)
            await self.writer.drain()

    async def until_closed(self) -> bytes:
        """Whatever else the client sends, up to its closing the connection."""
        return await asyncio.wait_for(self.reader.read(), 2)


Script = Callable[[Peer], Awaitable[object]]


class Server:
    """Runs `script` on every connection it accepts; keeps what it saw."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.port = 0
        self.connections = 0
        self.requests: list[bytes] = []
        self.results: list[object] = []  # what each connection's script returned
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, tls: ssl.SSLContext | None) -> Server:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            self.results.append(await self.script(Peer(self, reader, writer)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-script
        except asyncio.CancelledError:
            pass  # stopped at the test's end (Python 3.11 would log the cancelled task)
        finally:
            writer.close()

    async def finished(self) -> None:
        """Wait until the script of every connection so far has run to its end."""
        await asyncio.wait_for(asyncio.gather(*self._tasks), 2)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        outcomes = await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome  # a script's own assertion failed


Serve = Callable[..., Awaitable[Server]]  # serve(script, tls=None): a started server
Connect = Callable[..., Http1Connection]  # connect(port, scheme=, keepalive_expiry=, kind=)


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[Server] = []

    async def start(script: Script, *, tls: ssl.SSLContext | None = None) -> Server:
        servers.append(server := await Server(script).start(tls))
        return server

    yield start
    for server in servers:
        await server.stop()


# -- the client side ----------------------------------------------------------------------


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    made: list[Http1Connection] = []

    def make(
        port: int,
        *,
        scheme: bytes = b"http",
        keepalive_expiry: float | None = None,
        kind: type[Http1Connection] = Http1Connection,
    ) -> Http1Connection:
        origin = httpcore.Origin(scheme, b"127.0.0.1", port)
        made.append(connection := kind(origin, keepalive_expiry=keepalive_expiry))
        return connection

    yield make
    for connection in made:
        await connection.aclose()
    await asyncio.sleep(0.01)  # the transports finish closing


def request(
    port: int,
    method: bytes = b"GET",
    *,
    headers: Iterable[tuple[bytes, bytes]] = (),
    content: bytes | AsyncIterator[bytes] | None = None,
    scheme: str = "http",
    **timeouts: float,
) -> httpcore.Request:
    return httpcore.Request(
        method,
        f"{scheme}://127.0.0.1:{port}/v1/x",
        headers=[(b"host", b"127.0.0.1"), *headers],
        content=content,
        extensions={"timeout": {**TIMEOUTS, **timeouts}},
    )


async def read(response: httpcore.Response) -> bytes:
    try:
        return await response.aread()
    finally:
        await response.aclose()


def closed(connection: Http1Connection) -> bool:
    """Neither idle nor reusable: what the pool drops."""
    return not connection.is_idle() and connection.has_expired()


async def answer_ok(peer: Peer) -> None:
    while await peer.request():
        await peer.send(OK)


# -- how an answer ends -------------------------------------------------------------------


async def test_a_content_length_answer(serve: Serve, connect: Connect) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n\r\n"
        )
        await peer.send(b"hello world")
        await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert response.status == 200
    assert response.headers == [(b"content-type", b"text/plain"), (b"content-length", b"11")]
    assert await read(response) == b"hello world"
    assert connection.is_idle() and not connection.has_expired()
    assert server.requests[0].startswith(b"GET /v1/x HTTP/1.1\r\nhost: 127.0.0.1\r\n")


async def test_a_chunked_answer_is_streamed_as_its_writes_arrive(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"5\r\nhello\r\n",
            b"6\r\n world\r\n",
            b"0\r\n\r\n",
            pause=0.05,
        )
        await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    chunks = [chunk async for chunk in response.aiter_stream()]
    await response.aclose()
    assert chunks == [b"hello", b" world"]  # each piece as it came, not the body at its end
    assert connection.is_idle()


async def test_an_answer_delimited_by_the_server_closing(serve: Serve, connect: Connect) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\n\r\n", b"part one, ", b"part two", pause=0.05)

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert await read(response) == b"part one, part two"
    assert closed(connection)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        # A 304 may announce the length of the body it does not send.
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 1234\r\n\r\n",
    ],
    ids=["204", "304"],
)
async def test_204_and_304_have_no_body(serve: Serve, connect: Connect, answer: bytes) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(answer)
        await answer_ok(peer)

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert await read(response) == b""
    assert connection.is_idle()
    # The next answer on the connection is read as its own, not as the previous one's body.
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"
    assert server.connections == 1


# A server should not send a body with its answer to HEAD; the second one does anyway.
@pytest.mark.parametrize("body", [b"", b"x" * 50], ids=["none", "sent-anyway"])
async def test_a_head_answer_has_no_body_and_its_connection_is_not_reused(
    serve: Serve, connect: Connect, body: bytes
) -> None:
    async def script(peer: Peer) -> bytes:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n" + body)
        return await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port, b"HEAD"))
    assert response.headers == [(b"content-length", b"50")]
    assert await read(response) == b""
    assert closed(connection)
    await server.finished()
    assert server.results == [b""]  # the client closed the connection, sending nothing more


@pytest.mark.parametrize(
    "informational",
    [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n"],
    ids=["100", "103"],
)
async def test_an_informational_answer_before_the_real_one(
    serve: Serve, connect: Connect, informational: bytes
) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        final = b"HTTP/1.1 201 Created\r\nx-final: 1\r\ncontent-length: 4\r\n\r\ndone"
        await peer.send(informational, final, pause=0.05)
        await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    expecting = [(b"expect", b"100-continue"), (b"content-length", b"1")]
    sent = request(server.port, b"POST", headers=expecting, content=b"q")
    response = await connection.handle_async_request(sent)
    assert response.status == 201
    assert response.headers == [(b"x-final", b"1"), (b"content-length", b"4")]
    assert await read(response) == b"done"
    assert connection.is_idle()


# Trailers arrive after the body; in one TCP segment with the head, they are parsed before the
# caller builds its response, and were once taken for response headers.
async def test_the_trailers_of_a_chunked_answer_are_not_headers(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n"
        )
        await answer_ok(peer)

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert response.headers == [(b"transfer-encoding", b"chunked")]
    assert await read(response) == b"hello"
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"


# A second answer to one request (a confused server): it must not be read into the first one,
# nor wait on the connection to answer the next request.
@pytest.mark.parametrize("pause", [0.0, 0.05], ids=["same-write", "later"])
async def test_bytes_after_the_answer_close_the_connection(
    serve: Serve, connect: Connect, pause: float
) -> None:
    async def script(peer: Peer) -> bytes:
        await peer.request()
        stray = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 3\r\n\r\nbad"
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", stray, pause=pause)
        return await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert await read(response) == b"hello"
    await server.finished()  # the client closed the connection
    assert (response.status, response.headers) == (200, [(b"content-length", b"5")])
    assert closed(connection)


# -- keep-alive ---------------------------------------------------------------------------


async def test_two_requests_share_one_connection(serve: Serve, connect: Connect) -> None:
    server = await serve(answer_ok)
    connection = connect(server.port)
    for method in (b"GET", b"POST"):
        response = await connection.handle_async_request(request(server.port, method))
        assert await read(response) == b"ok"
        assert connection.is_idle()
    assert server.connections == 1
    assert [head.split(b" ")[0] for head in server.requests] == [b"GET", b"POST"]


async def test_connection_close_from_the_server_ends_the_connection(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> bytes:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        return await peer.until_closed()  # the server leaves the closing to the client

    server = await serve(script)
    connection = connect(server.port)
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"
    assert closed(connection)
    await server.finished()
    assert server.results == [b""]


async def test_an_idle_connection_expires_after_its_keep_alive(
    serve: Serve, connect: Connect
) -> None:
    server = await serve(answer_ok)
    connection = connect(server.port, keepalive_expiry=0.1)
    await read(await connection.handle_async_request(request(server.port)))
    assert connection.is_idle() and not connection.has_expired()
    await asyncio.sleep(0.15)
    assert connection.has_expired()


# -- the server failing -------------------------------------------------------------------


async def test_a_kept_alive_connection_closed_before_the_answer(
    serve: Serve, connect: Connect
) -> None:
    """The case `proxy.upstream.client` retries on a fresh connection, by these exact words."""

    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(OK)
        await peer.request()  # read, then closed unanswered: the keep-alive timer fired

    server = await serve(script)
    connection = connect(server.port)
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"
    with pytest.raises(httpcore.RemoteProtocolError) as caught:
        await connection.handle_async_request(request(server.port))
    assert str(caught.value) == NO_RESPONSE == "Server disconnected without sending a response."
    assert len(server.requests) == 2
    assert closed(connection)


async def test_a_connection_the_server_closed_while_idle(serve: Serve, connect: Connect) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(OK)

    server = await serve(script)
    connection = connect(server.port)
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"
    await server.finished()
    await asyncio.sleep(0.05)
    assert closed(connection)  # seen before any reuse: the pool would drop it
    with pytest.raises(httpcore.RemoteProtocolError, match=re.escape(NO_RESPONSE)):
        await connection.handle_async_request(request(server.port))
    assert server.connections == 1


@pytest.mark.parametrize(
    "cut",
    [
        b"HTTP/1.1 200 OK\r\ncontent-le",
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
    ],
    ids=["in-the-head", "content-length", "chunked"],
)
async def test_the_server_closing_mid_answer(serve: Serve, connect: Connect, cut: bytes) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(cut)

    server = await serve(script)
    connection = connect(server.port)
    with pytest.raises(httpcore.RemoteProtocolError) as caught:
        await read(await connection.handle_async_request(request(server.port)))
    # Not the words of a stale connection: the server had the request, it is not sent again.
    assert str(caught.value) == INCOMPLETE_BODY
    assert closed(connection)


async def test_a_garbage_status_line(serve: Serve, connect: Connect) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"SSH-2.0-OpenSSH_9.6\r\n")
        await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    with pytest.raises(httpcore.RemoteProtocolError, match="invalid HTTP response"):
        await connection.handle_async_request(request(server.port))
    assert closed(connection)


# -- timeouts, read at each wait ----------------------------------------------------------


# A peer that answers late: a timeout of 0.2 s has fired long before (12x), unless it did not.
LATE_S = 2.5


async def closed_or_late(peer: Peer, late: bytes) -> bytes:
    """What the client sent before closing, or, when it has not closed after `LATE_S` (its
    timeout did not fire), `late` sent and the answer b"late"."""
    try:
        return await asyncio.wait_for(peer.reader.read(), LATE_S)
    except TimeoutError:
        await peer.send(late)
        return b"late"


async def test_a_read_timeout_waiting_for_the_headers(serve: Serve, connect: Connect) -> None:
    async def script(peer: Peer) -> bytes:
        await peer.request()
        return await closed_or_late(peer, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")

    server = await serve(script)
    connection = connect(server.port)
    started = time.monotonic()
    with pytest.raises(httpcore.ReadTimeout, match=r"after 0\.2 s"):
        await connection.handle_async_request(request(server.port, read=0.2))
    assert time.monotonic() - started > 0.15  # not before its time (a lower bound: no flake)
    assert closed(connection)
    await server.finished()
    assert server.results == [b""]  # it gave up before the late answer


async def test_a_shorter_read_timeout_set_after_the_headers_applies_to_the_body(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> bytes:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        return await closed_or_late(peer, b"4\r\nlate\r\n0\r\n\r\n")  # the rest, late

    server = await serve(script)
    connection = connect(server.port)
    sent = request(server.port, read=5.0)
    response = await connection.handle_async_request(sent)
    sent.extensions["timeout"]["read"] = (
        0.2  # what proxy.upstream.client does once the headers are in
    )
    chunks = response.aiter_stream()
    assert await anext(chunks) == b"first"
    with pytest.raises(httpcore.ReadTimeout, match=r"after 0\.2 s"):
        await anext(chunks)  # not the late rest: 0.2 s applied, not 5
    await response.aclose()
    assert closed(connection)
    await server.finished()
    assert server.results == [b""]


async def test_a_longer_read_timeout_set_after_the_headers_lets_a_slow_body_through(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n", b"late", pause=0.4)
        await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    sent = request(server.port, read=0.2)
    response = await connection.handle_async_request(sent)
    sent.extensions["timeout"]["read"] = 2.0
    assert await read(response) == b"late"  # 0.4 s after the headers: past the first timeout
    assert connection.is_idle()


async def test_a_body_the_server_does_not_read_is_a_write_timeout(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> None:
        await asyncio.Event().wait()  # reads nothing, ever

    server = await serve(script)
    connection = connect(server.port)
    big = request(server.port, b"POST", content=b"x" * (16 << 20), write=0.2)
    with pytest.raises(httpcore.WriteTimeout):
        await connection.handle_async_request(big)
    assert closed(connection)


# -- connecting -------------------------------------------------------------------------------


async def test_a_refused_connection_is_a_connect_error(connect: Connect) -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(httpcore.ConnectError):
        await connect(port).handle_async_request(request(port))


async def test_an_unsupported_scheme(connect: Connect) -> None:
    with pytest.raises(httpcore.UnsupportedProtocol):
        await connect(9, scheme=b"ftp").handle_async_request(request(9, scheme="ftp"))


async def test_a_tls_handshake_that_never_comes_is_a_connect_timeout(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> bytes:
        return await peer.until_closed()  # plain TCP: the client's hello goes unanswered

    server = await serve(script)
    connection = connect(server.port, scheme=b"https")
    with pytest.raises(httpcore.ConnectTimeout):
        await connection.handle_async_request(request(server.port, scheme="https", connect=0.2))


# -- what is sent -------------------------------------------------------------------------


class Recording(Http1Connection):
    """Keeps what each call to its transport's write or writelines carried."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.writes: list[bytes] = []
        super().connection_made(_Tap(transport, self.writes))  # type: ignore[arg-type]


class _Tap:
    def __init__(self, transport: Any, writes: list[bytes]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def writelines(self, parts: Iterable[bytes]) -> None:
        parts = list(parts)
        self._writes.append(b"".join(parts))
        self._transport.writelines(parts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@pytest.mark.parametrize(
    "value", [b"a\r\nx-injected: 1", b"a\nb", b"a\rb"], ids=["crlf", "lf", "cr"]
)
async def test_a_header_with_a_line_break_is_refused_unsent(
    serve: Serve, connect: Connect, value: bytes
) -> None:
    async def script(peer: Peer) -> bytes:
        return await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    with pytest.raises(httpcore.LocalProtocolError):
        await connection.handle_async_request(request(server.port, headers=[(b"x-note", value)]))
    await connection.aclose()
    await server.finished()
    assert server.results == [b""]  # connected, but not a byte of the request went out


async def test_a_bytes_body_goes_with_the_head_in_one_write(serve: Serve, connect: Connect) -> None:
    body = b'{"model":"m","messages":[]}' * 1000
    server = await serve(answer_ok)
    connection = connect(server.port, kind=Recording)
    assert isinstance(connection, Recording)
    sent = request(
        server.port, b"POST", headers=[(b"content-length", b"%d" % len(body))], content=body
    )
    assert await read(await connection.handle_async_request(sent)) == b"ok"
    [received] = server.requests
    head, _, received_body = received.partition(b"\r\n\r\n")
    assert received_body == body
    assert f"\r\ncontent-length: {len(body)}".encode() in head
    assert connection.writes == [received]


async def test_an_async_body_is_sent_in_chunked_framing(serve: Serve, connect: Connect) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"hello"
        yield b""  # an empty piece would end a chunked body: skipped
        await asyncio.sleep(0.01)
        yield b" chunked "
        yield b"w" * 20000

    server = await serve(answer_ok)
    connection = connect(server.port)
    sent = request(
        server.port, b"POST", headers=[(b"transfer-encoding", b"chunked")], content=body()
    )
    assert await read(await connection.handle_async_request(sent)) == b"ok"
    [received] = server.requests
    head, _, framed = received.partition(b"\r\n\r\n")
    assert b"\r\ntransfer-encoding: chunked" in head
    assert framed == (
        b"5\r\nhello\r\n" + b"9\r\n chunked \r\n" + b"4e20\r\n" + b"w" * 20000 + b"\r\n0\r\n\r\n"
    )


# -- reading the body -----------------------------------------------------------------------


async def test_a_large_answer_read_slowly_arrives_whole(serve: Serve, connect: Connect) -> None:
    data = os.urandom(8 << 20)

    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(data))
        for start in range(0, len(data), 64 << 10):
            await peer.send(data[start : start + (64 << 10)])
        await answer_ok(peer)

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    await asyncio.sleep(0.2)  # the reader is away: the connection stops reading, not buffering
    assert connection._reading_paused
    assert connection._buffered < 2 * HIGH_WATER
    received = bytearray()
    async for chunk in response.aiter_stream():
        received += chunk
        assert connection._buffered < 2 * HIGH_WATER
        await asyncio.sleep(0.001)
    await response.aclose()
    assert received == data
    # Reading resumed for good: the next answer on the connection comes in.
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"
    assert server.connections == 1


async def test_a_body_closed_half_read_closes_the_connection(
    serve: Serve, connect: Connect
) -> None:
    async def script(peer: Peer) -> bytes:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n" + b"x" * 1000)
        return await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert await anext(response.aiter_stream()) == b"x" * 1000
    await response.aclose()
    assert closed(connection)
    await server.finished()
    assert server.results == [b""]


async def test_a_body_read_to_its_end_then_closed_keeps_the_connection(
    serve: Serve, connect: Connect
) -> None:
    server = await serve(answer_ok)
    connection = connect(server.port)
    response = await connection.handle_async_request(request(server.port))
    assert [chunk async for chunk in response.aiter_stream()] == [b"ok"]
    await response.aclose()
    assert connection.is_idle()
    assert await read(await connection.handle_async_request(request(server.port))) == b"ok"
    assert server.connections == 1


async def test_cancelling_a_request_waiting_for_its_headers_closes_the_connection(
    serve: Serve, connect: Connect
) -> None:
    arrived = asyncio.Event()

    async def script(peer: Peer) -> bytes:
        await peer.request()
        arrived.set()
        return await peer.until_closed()

    server = await serve(script)
    connection = connect(server.port)
    waiting = asyncio.create_task(connection.handle_async_request(request(server.port)))
    await asyncio.wait_for(arrived.wait(), 2)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert closed(connection)
    await server.finished()
    assert server.results == [b""]


# -- TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


async def test_tls_with_an_unknown_certificate_is_refused(
    serve: Serve, connect: Connect, tls_server_context: ssl.SSLContext
) -> None:
    server = await serve(answer_ok, tls=tls_server_context)
    connection = connect(server.port, scheme=b"https")
    with pytest.raises(httpcore.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await connection.handle_async_request(request(server.port, scheme="https"))
    assert not server.requests


async def test_a_tls_exchange_with_a_trusted_certificate(
    serve: Serve,
    connect: Connect,
    tls_server_context: ssl.SSLContext,
    certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trusted = ssl.create_default_context(cafile=certificate[0])
    monkeypatch.setattr(http1, "default_ssl_context", lambda: trusted)
    server = await serve(answer_ok, tls=tls_server_context)
    connection = connect(server.port, scheme=b"https")
    for _ in range(2):
        response = await connection.handle_async_request(request(server.port, scheme="https"))
        assert (response.status, await read(response)) == (200, b"ok")
    assert server.connections == 1
