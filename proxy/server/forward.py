"""Transparent pass-through for `/v1/...`: status, headers and bodies kept.

The request body is read whole (at most `max_body_bytes`, within `server.body_timeout`, see
`proxy.server.guard`) before an upstream connection is taken, so a client that uploads slowly holds
none. The upstream response comes back byte for byte: streamed as it arrives, or, when it
announces a length of at most `WHOLE_BYTES` and is not an event stream, read whole and sent in
one piece (a streamed relay costs a task group and a background task per request). When the
client goes away, starlette cancels the relay and the background task closes the upstream
response, which drops that connection.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from starlette.background import BackgroundTask, BackgroundTasks
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope

from proxy.errors import (
    InvalidRequest,
    PayloadTooLarge,
    ProxyError,
    stream_error_event,
)
from proxy.server.disconnect import ClientGone
from proxy.settings import Settings
from proxy.upstream.client import Upstream, UpstreamResponse, read_response, timed_chunks
from proxy.upstream.providers import is_anthropic_raw

API_PREFIX = "/v1"
WHOLE_BYTES = 1 << 20
SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))


class Tap(Protocol):
    """Watches a passed-through answer go by, unchanged (shadow mode reads its usage).
    `feed` and `end` never raise; `close` runs once: before the answer's last bytes go out
    when it came whole, else once the relay ends."""

    def feed(self, chunk: bytes) -> None: ...
    def end(self) -> None:
        """The whole body came (not called for one cut short)."""
        ...

    async def close(self) -> None: ...


TapFactory = Callable[[UpstreamResponse], Tap]


def upstream_path(scope: Scope) -> str:
    """The request's raw (still percent-encoded) path relative to `/v1`."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    path = raw.decode("latin-1").split("?", 1)[0]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path):
        path = path[len(root_path) :]
    if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
        path = path[len(API_PREFIX) :]
    return path or "/"


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body exceeds the proxy's limit of {limit} bytes.")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body, at most `limit` bytes (413 beyond it).

    A client that closes its connection meanwhile raises `ClientGone`; one too slow raises
    the 408 of `proxy.server.guard`.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise InvalidRequest("Invalid Content-Length header.", code="invalid_content_length")
        if int(declared) > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    seen = 0
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise ClientGone() from exc
    return b"".join(chunks)


def _has_body(request: Request) -> bool:
    """Whether the request frames a body at all (a GET without framing sends none upstream)."""
    headers = request.headers
    return "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()


async def _relay_body(
    response: UpstreamResponse, timing: dict[str, Any], path: str, tap: Tap | None = None
) -> AsyncIterator[bytes]:
    held = b""  # with a tap, the last chunk waits until the tap has finished with the answer
    try:
        async for chunk in timed_chunks(response, timing):
            if tap is None:
                yield chunk
                continue
            tap.feed(chunk)
            if held:
                yield held
            held = chunk
        if tap is not None:
            tap.end()
            # Finished (a shadow turn recorded, its save queued) before the client has the
            # answer's end: a client sends its next request as soon as it has read it.
            await tap.close()
            if held:
                yield held
    except ProxyError as error:  # the upstream failed mid-body
        await response.aclose()
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            # A stream that just stopped would look complete; say why it ended, in the shape
            # of the request's API (Anthropic's SDKs raise on an `event: error`).
            yield stream_error_event(path, error)
            return
        # Headers are already out: raising aborts the connection instead of a short body.
        raise


def relay(
    response: UpstreamResponse,
    timing: dict[str, Any] | None = None,
    path: str = "",
    tap: Tap | None = None,
) -> Response:
    """Stream an open upstream response back unchanged; it is closed when the relay ends.

    Time spent waiting on the upstream's body is added to `timing["upstream_ms"]`; `path` is
    the client's, for the shape of an error that ends a broken stream. `tap` sees the body go
    by; it is closed before the last bytes go out, or after the upstream response when the
    body is cut short.
    """
    background: BackgroundTask = BackgroundTask(response.aclose)
    if tap is not None:  # closed after the upstream response
        background = BackgroundTasks([background, BackgroundTask(tap.close)])
    relayed = StreamingResponse(
        _relay_body(response, {} if timing is None else timing, path, tap),
        status_code=response.status_code,
        background=background,
    )
    headers = Upstream.response_headers(response.headers, raw=True)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        # Events must not sit in a cache or in a buffering reverse proxy (nginx) on the way.
        present = {name for name, _ in headers}
        for name, value in SSE_HEADERS:
            if name not in present:
                headers.append((name, value))
    relayed.raw_headers = _raw(headers)
    return relayed


def upstream_for(request: Request) -> Upstream:
    """The Anthropic upstream for a request with Anthropic's headers, else the OpenAI-side
    one (`proxy.upstream.providers`)."""
    state = request.app.state
    anthropic = is_anthropic_raw(request.scope["headers"])
    chosen: Upstream = state.anthropic_upstream if anthropic else state.upstream
    return chosen


async def forward(
    request: Request,
    *,
    body: bytes | None = None,
    upstream: Upstream | None = None,
    tap: TapFactory | None = None,
) -> Response:
    """Pass `request` through to the same path upstream (`upstream`: a given one, else
    `upstream_for` the request's headers).

    `body` is given when the caller has already read the request body; otherwise it is read
    here, whole, before the upstream connection is taken. `tap`, given the upstream's
    response, makes what watches its answer go by (`Tap`).
    """
    settings: Settings = request.app.state.settings
    upstream = upstream or upstream_for(request)
    headers = upstream.forward_headers(request.headers)
    if body is None and _has_body(request):
        body = await read_body(request, settings.max_body_bytes)
    elif body is not None and len(body) > settings.max_body_bytes:
        raise _too_large(settings.max_body_bytes)
    timing = getattr(request.state, "log_fields", None)
    if timing is None:
        timing = {}
    started = time.perf_counter()
    try:
        response = await upstream.send(
            request.method,
            upstream_path(request.scope),
            headers=headers,
            content=body,
            params=request.scope.get("query_string", b""),
        )
        watcher = None if tap is None else tap(response)
        if _whole(request.method, response):
            whole = await read_response(response)
            answer = _answer(response, whole)
            if watcher is not None:
                watcher.feed(whole)
                watcher.end()
                answer.background = BackgroundTask(watcher.close)
            return answer
    finally:
        timing["upstream_ms"] = (time.perf_counter() - started) * 1000
    return relay(response, timing, request.scope["path"], watcher)


def _whole(method: str, response: UpstreamResponse) -> bool:
    """Whether the answer is small, of known length and no stream: worth reading whole."""
    length = response.headers.get("content-length", "")
    return (
        method != "HEAD"
        and length.isdigit()
        and int(length) <= WHOLE_BYTES
        and not response.headers.get("content-type", "").startswith("text/event-stream")
    )


def _answer(response: UpstreamResponse, body: bytes) -> Response:
    """The upstream's answer, read whole: its status, headers and bytes."""
    answer = Response(body, status_code=response.status_code)
    headers = Upstream.response_headers(response.headers, raw=True)
    answer.raw_headers = [*_raw(headers), (b"content-length", str(len(body)).encode("ascii"))]
    return answer


def _raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


async def forward_endpoint(request: Request) -> Response:
    """The route for every `/v1/...` path the proxy does not handle itself."""
    return await forward(request)


async def anthropic_forward_endpoint(request: Request) -> Response:
    """`/v1/messages/...` (count_tokens, batches): passed through to Anthropic's API."""
    return await forward(request, upstream=request.app.state.anthropic_upstream)
