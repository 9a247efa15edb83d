"""What the proxy asks of a client, so that no client can hold what others need.

- The request body arrives whole within `server.body_timeout` seconds of the request's start;
  otherwise the request ends with a 408 and the connection is closed. (Routes read the whole
  body before they take an upstream connection, so a slow upload never holds one.)
- Every part of the response is taken by the client within `server.send_timeout` seconds. A
  client that stops reading is treated as gone: the route sees `http.disconnect`, as when the
  client closes its connection, so the upstream request is closed and its pooled connection
  goes back.
- Credential headers (`Authorization`, `x-api-key`, `api-key`) come at most once each (400
  otherwise): the tenant and the upstream must never read two different values.
- Header values lose the optional whitespace around them (RFC 9110, 5.5). The HTTP parser keeps
  trailing whitespace, and the upstream connection would refuse to send such a header.

`GuardMiddleware` is pure ASGI; its per-request cost is one pass over the header list and one
timer handle, so the hot path does not change measurably.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import InvalidRequest, RequestTimeout, error_response

log = logging.getLogger("proxy.guard")

CREDENTIAL_HEADERS = frozenset({b"authorization", b"x-api-key", b"api-key"})
_WHITESPACE = (0x20, 0x09)  # SP and HTAB, the optional whitespace of RFC 9110
_DISCONNECT: Message = {"type": "http.disconnect"}


def tidy_headers(scope: Scope) -> InvalidRequest | None:
    """Strip optional whitespace from the header values in `scope` (in place); the error for
    a credential header that comes twice, or None. Header names are lower-case in ASGI."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
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


class _Exchange:
    """One request's receive and send, with the body deadline and the send watchdog."""

    def __init__(
        self, receive: Receive, send: Send, scope: Scope, body_timeout: float, send_timeout: float
    ) -> None:
        self._receive = receive
        self._send = send
        self._scope = scope
        self._loop = asyncio.get_running_loop()
        self.body_timeout = body_timeout
        self.body_deadline = self._loop.time() + body_timeout
        self.body_done = False
        self.send_timeout = send_timeout
        self.stalled = False
        self._sending: asyncio.Task[Any] | None = None
        self._send_began = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._receiving: set[asyncio.Task[Any]] = set()
        self._interrupted: set[asyncio.Task[Any]] = set()
        self._closed = False

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
        try:
            async with asyncio.timeout_at(self.body_deadline):
                message = await self._receive()
        except TimeoutError:
            raise RequestTimeout(
                f"The request body did not arrive within {self.body_timeout:g} seconds.",
                headers={"connection": "close"},
            ) from None
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
        if self._timer is None:
            self._timer = self._loop.call_at(self._send_began + self.send_timeout, self._check)
        try:
            await self._send(message)
        except asyncio.CancelledError:
            if self._ours(task):
                return
            raise
        finally:
            self._sending = None

    def _check(self) -> None:
        """The watchdog: a send blocked for `send_timeout` means the client stopped reading."""
        self._timer = None
        if self._closed:
            return
        now = self._loop.time()
        if self._sending is None:
            due = now + self.send_timeout
        else:
            due = self._send_began + self.send_timeout
            if now >= due:
                self._stall()
                return
        self._timer = self._loop.call_at(due, self._check)

    def _stall(self) -> None:
        self.stalled = True
        log.warning(
            "client stopped reading; response abandoned",
            extra={"fields": {"path": self._scope.get("path"), "send_timeout": self.send_timeout}},
        )
        fields = self._scope.get("state", {}).get("log_fields")
        if isinstance(fields, dict):
            fields["error"] = "client stopped reading"
        for task in (self._sending, *self._receiving):
            if task is not None and not task.done():
                self._interrupted.add(task)
                task.cancel()

    def _ours(self, task: asyncio.Task[Any]) -> bool:
        """True when this task's cancellation came from `_stall` alone (then it is undone)."""
        if task not in self._interrupted:
            return False
        self._interrupted.discard(task)
        return task.uncancel() == 0

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class GuardMiddleware:
    """Pure ASGI: the header rules, the body deadline and the send watchdog (module doc)."""

    def __init__(self, app: ASGIApp, *, body_timeout: float, send_timeout: float) -> None:
        self.app = app
        self.body_timeout = body_timeout
        self.send_timeout = send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = tidy_headers(scope)
        if refused is not None:
            await error_response(refused)(scope, receive, send)
            return
        exchange = _Exchange(receive, send, scope, self.body_timeout, self.send_timeout)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        finally:
            exchange.close()


__all__ = ["CREDENTIAL_HEADERS", "GuardMiddleware", "tidy_headers"]
