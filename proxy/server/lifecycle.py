"""Draining and graceful shutdown: the gate for new requests, and the server that drains.

    SIGTERM (or SIGINT)
      -> draining: /readyz answers 503, new requests get a 503 + Retry-After in the API's shape
      -> requests in flight (streams included) finish, for up to `drain_timeout` seconds
      -> uvicorn stops listening, runs the lifespan shutdown, and the process exits 0
    A second signal stops at once. Streams still open when the drain timeout runs out end
    with an SSE error event rather than a silent close; requests whose answer had not started
    get the same kind of 503 with Retry-After, as new requests do.

`Drain` holds the state, `DrainMiddleware` (pure ASGI) counts requests and turns new ones away,
and `DrainingServer` is the uvicorn server whose signal handler starts the drain.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from starlette.datastructures import State
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import ProxyError, ServiceUnavailable, stream_error_event
from proxy.server.allocator import IdleReclaimer
from proxy.server.guard import refusal

log = logging.getLogger("proxy.lifecycle")

# Probes and scrapes keep answering while draining: /readyz is how a balancer learns of it.
EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
RETRY_AFTER_SECONDS = 1
# uvicorn's own wait after the drain: the drain already waited for requests.
_SERVER_GRACE_SECONDS = 2


class Drain:
    """Whether the proxy is draining, and how many requests are in flight."""

    def __init__(self, retry_after: int = RETRY_AFTER_SECONDS) -> None:
        self.retry_after = retry_after
        self.draining = False
        self.started_at: float | None = None
        self.in_flight = 0
        # Requests let in so far, probes and scrapes (EXEMPT_PATHS) aside: the idle memory
        # reclaimer (proxy.server.allocator) tells a lull after traffic from a quiet process by it.
        self.admitted = 0

    def begin(self) -> bool:
        """Start draining; True the first time. Safe to call from a signal handler."""
        if self.draining:
            return False
        self.draining = True
        self.started_at = time.monotonic()
        return True

    @property
    def idle(self) -> bool:
        return self.in_flight == 0

    def refusal(self) -> ServiceUnavailable:
        """The answer to a request that arrives while draining."""
        return ServiceUnavailable(
            "The proxy is shutting down; retry the request.",
            code="draining",
            headers={"retry-after": str(self.retry_after), "connection": "close"},
        )

    def cut_off(self) -> ServiceUnavailable:
        """The answer to a request whose answer had not started when the drain ran out."""
        return ServiceUnavailable(
            "The proxy shut down before the answer was ready; retry the request.",
            code="proxy_shutdown",
            headers={"retry-after": str(self.retry_after), "connection": "close"},
        )


def is_draining(state: State) -> bool:
    """For /readyz: the app's `Drain` has begun (or a test set `state.draining`)."""
    drain = getattr(state, "drain", None)
    return bool(getattr(state, "draining", False)) or (isinstance(drain, Drain) and drain.draining)


def _shutdown_event(path: str) -> bytes:
    error = ProxyError("The proxy shut down before the stream finished.", code="proxy_shutdown")
    return stream_error_event(path, error)


class DrainMiddleware:
    """Pure ASGI: count requests in flight; while draining, answer new ones with 503."""

    def __init__(self, app: ASGIApp, *, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain.draining and scope["path"] not in EXEMPT_PATHS:
            await refusal(scope, self.drain.refusal())(scope, receive, send)
            return
        started = False
        sse = False
        done = False

        async def watch(message: Message) -> None:
            nonlocal started, sse, done
            if message["type"] == "http.response.start":
                started = True
                headers = dict(message.get("headers", []))
                sse = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                done = True
            await send(message)

        self.drain.in_flight += 1
        if scope["path"] not in EXEMPT_PATHS:
            self.drain.admitted += 1
        try:
            await self.app(scope, receive, watch)
        except asyncio.CancelledError:
            # The server cancels what is still running when the drain timeout runs out: tell
            # the client why, in the API's shape, instead of uvicorn's plain-text 500 (before
            # the answer started) or a silent cut (a stream).
            if not self.drain.draining:
                raise
            if not started:
                await refusal(scope, self.drain.cut_off())(scope, receive, send)
                return
            if not (sse and not done):
                raise
            await send(
                {
                    "type": "http.response.body",
                    "body": _shutdown_event(scope["path"]),
                    "more_body": True,
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.drain.in_flight -= 1


class DrainingServer(uvicorn.Server):
    """uvicorn's server, but a signal starts a drain and the process then exits with 0."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        drain: Drain,
        drain_timeout: float,
        reclaimer: IdleReclaimer | None = None,
    ) -> None:
        super().__init__(config)
        self.drain = drain
        self.drain_timeout = drain_timeout
        self.reclaimer = reclaimer
        self._announced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs in a signal handler: set flags only. Not recording the signal (as uvicorn's
        # handler does) means it is not re-raised after shutdown, so the exit status is 0.
        if self.drain.begin():
            return
        self.should_exit = True
        self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        drain = self.drain
        if drain.draining and not self.should_exit:
            waited = time.monotonic() - (drain.started_at or 0.0)
            if not self._announced:
                self._announced = True
                log.info(
                    "draining",
                    extra={"fields": {"in_flight": drain.in_flight, "timeout": self.drain_timeout}},
                )
            if drain.idle or waited >= self.drain_timeout:
                fields = {"in_flight": drain.in_flight, "waited_s": round(waited, 3)}
                log.info("drained" if drain.idle else "drain timeout", extra={"fields": fields})
                if not drain.idle:
                    # The drain already waited: uvicorn cancels what is left almost at once.
                    self.config.timeout_graceful_shutdown = 0
                self.should_exit = True
        elif self.reclaimer is not None:
            self.reclaimer.tick()  # a no-op unless the proxy just went idle after traffic
        return await super().on_tick(counter)


KEEP_ALIVE_SECONDS = 75


def serve(
    app: Any,
    *,
    drain: Drain,
    drain_timeout: float,
    reclaimer: IdleReclaimer | None = None,
    sockets: list[socket.socket] | None = None,
    server_class: Callable[..., DrainingServer] = DrainingServer,
    **options: Any,
) -> int:
    """Run `app` under uvicorn with draining on SIGTERM/SIGINT; returns the exit status.
    The server's loop ticks `reclaimer` (proxy.server.allocator) between requests. A worker
    (proxy.server.workers) serves `sockets` its main process bound, with its own server class."""
    options.setdefault("timeout_graceful_shutdown", _SERVER_GRACE_SECONDS)
    # Longer than the idle expiry of common clients' pools (httpx and the OpenAI SDKs: 5 s),
    # so a client never reuses a connection the proxy is closing at that very moment.
    options.setdefault("timeout_keep_alive", KEEP_ALIVE_SECONDS)
    server = server_class(
        uvicorn.Config(app, **options),
        drain=drain,
        drain_timeout=drain_timeout,
        reclaimer=reclaimer,
    )
    server.run(sockets=sockets)
    return 0 if server.started else 1


__all__ = [
    "EXEMPT_PATHS",
    "Drain",
    "DrainMiddleware",
    "DrainingServer",
    "is_draining",
    "serve",
]
