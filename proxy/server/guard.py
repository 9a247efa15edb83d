"""What the proxy asks of a client, so that no client can hold what others need.

- The request body arrives whole within `server.body_timeout` seconds of the request's start;
  otherwise the request ends with a 408 and the connection is closed. (Routes read the whole
  body before they take an upstream connection, so a slow upload never holds one.)
- Every part of the response is taken by the client within `server.send_timeout` seconds. A
  client that stops reading is treated as gone: the route sees `http.disconnect`, as when the
  client closes its connection, so the upstream request is closed and its pooled connection
  goes back.
- Credential headers (`Authorization`, `x-api-key`, `api-key`) come at most once each (400
  otherwise, in Anthropic's error shape under /v1/messages): the tenant and the upstream must
  never read two different values.
- Header values with control characters (other than HTAB) get a 400 `invalid_header`, in the
  API's error shape. uvicorn's default parser (httptools) refuses them itself, with a
  plain-text 400, before the app runs; h11 (`--http h11`, or an embedding server) lets most
  of them through to here.
- Header values lose the optional whitespace around them (RFC 9110, 5.5). The HTTP parser keeps
  trailing whitespace, and the upstream connection would refuse to send such a header.

`GuardMiddleware` is pure ASGI; a request costs it one pass over the header list and a few
attribute writes (one shared timer watches every request), so the hot path does not change
measurably.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import InvalidRequest, ProxyError, RequestTimeout, error_response

log = logging.getLogger("proxy.guard")

CREDENTIAL_HEADERS = frozenset({b"authorization", b"x-api-key", b"api-key"})
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # what no header value may hold
_WHITESPACE = (0x20, 0x09)  # SP and HTAB, the optional whitespace of RFC 9110
_DISCONNECT: Message = {"type": "http.disconnect"}


def tidy_headers(scope: Scope) -> InvalidRequest | None:
    """Strip optional whitespace from the header values in `scope` (in place); the error for
    a value with a control character or a credential header that comes twice, or None.
    Header names are lower-case in ASGI."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    # One search over all values (joined by HTAB, which they may hold) costs less than one
    # a header; the header is looked for only when there is one to name.
    if _CONTROL.search(b"\t".join([value for _, value in headers])) is not None:
        name = next(name for name, value in headers if _CONTROL.search(value) is not None)
        label = name.decode("latin-1")
        return InvalidRequest(  # the value is never echoed: it may be a credential
            f"The {label} header holds a control character.",
            param=label,
            code="invalid_header",
        )
    credentials: list[bytes] = []
    padded = False
    for name, value in headers:
        if name in CREDENTIAL_HEADERS:
            if name in credentials:
                label = name.decode("latin-1")
                return InvalidRequest(
                    f"The {label} header is given more than once; send it once.",
                    param=label,
                    code="duplicate_header",
                )
            credentials.append(name)
        if value and (value[0] in _WHITESPACE or value[-1] in _WHITESPACE):
            padded = True
    if padded:
        scope["headers"] = [(name, value.strip(b" \t")) for name, value in headers]
    return None


def refusal(scope: Scope, error: ProxyError) -> JSONResponse:
    """`error` in the shape of the API the request came through."""
    return error_response(error, scope["path"])


class _Exchange:
    """One request's receive and send, as the watchdog (`GuardMiddleware._tick`) sees them."""

    def __init__(
        self,
        receive: Receive,
        send: Send,
        scope: Scope,
        guard: GuardMiddleware,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._receive = receive
        self._send = send
        self._scope = scope
        self._guard = guard
        self._loop = loop
        self.body_deadline = self._loop.time() + guard.body_timeout
        self.body_done = False
        self.stalled = False
        self._body_reader: asyncio.Task[Any] | None = None
        self._sending: asyncio.Task[Any] | None = None
        self._send_began = 0.0
        self._receiving: set[asyncio.Task[Any]] = set()
        self._interrupted: set[asyncio.Task[Any]] = set()

    # -- receive ---------------------------------------------------------------------------

    async def receive(self) -> Message:
        if not self.body_done:
            return await self._receive_body()
        if self.stalled:
            return _DISCONNECT
        task = asyncio.current_task()
        assert task is not None
        self._receiving.add(task)
        try:
            return await self._receive()
        except asyncio.CancelledError:
            if self._ours(task):  # the client stopped reading: it is gone for the route
                return _DISCONNECT
            raise
        finally:
            self._receiving.discard(task)

    async def _receive_body(self) -> Message:
        task = asyncio.current_task()
        assert task is not None
        self._body_reader = task
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if self._ours(task):  # the body's deadline passed
                timeout = self._guard.body_timeout
                raise RequestTimeout(
                    f"The request body did not arrive within {timeout:g} seconds.",
                    headers={"connection": "close"},
                ) from None
            raise
        finally:
            self._body_reader = None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.body_done = True
        return message

    # -- send ------------------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        if self.stalled:
            return  # the route was told the client is gone; what it still sends goes nowhere
        task = asyncio.current_task()
        assert task is not None
        self._sending = task
        self._send_began = self._loop.time()
        try:
            await self._send(message)
        except asyncio.CancelledError:
            if self._ours(task):
                return
            raise
        finally:
            self._sending = None

    # -- the watchdog's view ---------------------------------------------------------------

    def check(self, now: float) -> None:
        """Interrupt a body read past its deadline, or a send blocked for `send_timeout`."""
        reader = self._body_reader
        if reader is not None and now >= self.body_deadline:
            self._interrupt(reader)
        sender = self._sending
        if sender is not None and not self.stalled:
            if now - self._send_began >= self._guard.send_timeout:
                self._stall(sender)

    def _stall(self, sender: asyncio.Task[Any]) -> None:
        """The client stopped reading: the route's sends end and its receives disconnect."""
        self.stalled = True
        log.warning(
            "client stopped reading; response abandoned",
            extra={"fields": {"path": self._scope.get("path")}},
        )
        fields = self._scope.get("state", {}).get("log_fields")
        if isinstance(fields, dict):
            fields["error"] = "client stopped reading"
        for task in (sender, *self._receiving):
            self._interrupt(task)

    def _interrupt(self, task: asyncio.Task[Any]) -> None:
        if not task.done() and task not in self._interrupted:
            self._interrupted.add(task)
            task.cancel()

    def _ours(self, task: asyncio.Task[Any]) -> bool:
        """True when this task's cancellation came from the watchdog alone (then undone)."""
        if task not in self._interrupted:
            return False
        self._interrupted.discard(task)
        return task.uncancel() == 0


class GuardMiddleware:
    """Pure ASGI: the header rules, and a watchdog for the body deadline and stalled sends.

    The watchdog is one timer for all requests, ticking while any is in flight, at a quarter
    of the shorter timeout (at most every second): a request costs no timer of its own, and
    a timeout fires up to a tick late.
    """

    def __init__(self, app: ASGIApp, *, body_timeout: float, send_timeout: float) -> None:
        self.app = app
        self.body_timeout = body_timeout
        self.send_timeout = send_timeout
        self.tick_seconds = min(1.0, body_timeout / 4, send_timeout / 4)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._live: set[_Exchange] = set()
        self._timer: asyncio.TimerHandle | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = tidy_headers(scope)
        if refused is not None:
            await refusal(scope, refused)(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        if self._timer is None or self.loop is not loop:
            self.loop = loop
            self._timer = loop.call_later(self.tick_seconds, self._tick)
        exchange = _Exchange(receive, send, scope, self, loop)
        self._live.add(exchange)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        finally:
            self._live.discard(exchange)

    def _tick(self) -> None:
        self._timer = None
        if not self._live or self.loop is None:
            return  # the next request starts the watchdog again
        now = self.loop.time()
        for exchange in list(self._live):
            exchange.check(now)
        self._timer = self.loop.call_later(self.tick_seconds, self._tick)


__all__ = ["CREDENTIAL_HEADERS", "GuardMiddleware", "refusal", "tidy_headers"]
