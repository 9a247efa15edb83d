"""The upstream API: one shared connection pool, the URLs and headers it is sent, and sending.

Requests go through `httpcore` (the HTTP layer under httpx) directly: the httpx client on top
of it cost about 0.5 ms of CPU per request here (building URL, header and response models),
a third of everything the pass-through spends. URLs are still built with `httpx.URL`. What is
passed on is decided in `proxy.upstream.forwarding_rules`; failures are mapped onto the error
tree in `proxy.upstream.transport_errors`.

The upstream URL comes only from `Settings.upstream_base_url`. A request path is appended to the
configured base path as an opaque string, so a path such as `//evil.com/x` or `http://evil.com`
still reaches the configured host (no SSRF through the request).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, Protocol
from urllib.parse import quote

import httpcore
import httpx
import orjson

from proxy.errors import InvalidRequest, UpstreamInvalidResponse
from proxy.settings import Settings
from proxy.upstream.forwarding_rules import (
    REQUEST_DROP,
    RESPONSE_DROP,
    connection_tokens,
    has_dot_segment,
)
from proxy.upstream.pool import BACKGROUND, FRESH, OriginPool
from proxy.upstream.providers import Provider, foreign_credentials
from proxy.upstream.transport_errors import TRANSPORT_ERRORS, map_transport_error, stale_connection

Content = bytes | AsyncIterable[bytes] | None
Params = str | bytes | Mapping[str, str] | None
KEEPALIVE_EXPIRY_S = 5.0
_TARGETS_KEPT = 256  # request URLs remembered (paths and queries); all dropped beyond


class Pool(Protocol):
    """What sends a request: the proxy's `OriginPool`, or a stand-in in tests."""

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response: ...

    async def aclose(self) -> None: ...


class UpstreamResponse:
    """An upstream response whose body is still to be read; `aclose()` it when done."""

    def __init__(self, response: httpcore.Response) -> None:
        self.status_code = response.status
        self.headers = httpx.Headers(response.headers)
        self._response = response
        self._raw: AsyncIterator[bytes] | None = None

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives; transport failures become `UpstreamError`s. One iterator
        for the response: a reader that stopped early can hand the rest to another."""
        if self._raw is None:
            self._raw = self._chunks()
        return self._raw

    async def _chunks(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, AsyncIterable)
        try:
            async for chunk in stream:
                if chunk:
                    yield chunk
        except TRANSPORT_ERRORS as exc:
            raise map_transport_error(exc) from exc

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        await self._response.aclose()


class Upstream:
    """Owns the shared pool. Create it in the app lifespan and `aclose()` it on shutdown."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool: Pool | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        """The OpenAI-side upstream by default; `base_url` names another one (Anthropic's),
        which gets `api_key` (None: the client's own credentials pass through)."""
        self.provider: Provider = "openai" if base_url is None else "anthropic"
        if base_url is None:
            base_url, api_key = settings.upstream_base_url, settings.upstream_api_key_value
        self.base_url = httpx.URL(base_url)
        self._api_key = api_key
        # Read timeouts: `read` covers the wait for the response headers (first byte); once
        # they are in, `send` switches the request to the idle timeout between body reads.
        self.first_byte_timeout = settings.first_byte_timeout or settings.read_timeout
        self.idle_timeout = settings.idle_timeout or settings.read_timeout
        self.timeouts = {
            "connect": settings.connect_timeout,
            "read": self.first_byte_timeout,
            "write": settings.write_timeout,
            "pool": settings.pool_timeout,
        }
        self.closed = False
        self._targets: dict[tuple[str, str | bytes | None], tuple[httpcore.URL, bytes]] = {}
        # No proxy from the environment and no redirects: calls go to the configured URL only.
        self.pool: Pool = pool or OriginPool(
            limit=settings.max_upstream_connections, keepalive_expiry=KEEPALIVE_EXPIRY_S
        )

    def url(self, path: str, params: Params = None) -> httpx.URL:
        """The configured base URL with `path` (raw, already percent-encoded) appended."""
        path = path.split("?", 1)[0].split("#", 1)[0]
        if has_dot_segment(path):
            raise InvalidRequest("Path segments '.' and '..' are not allowed.", code="invalid_path")
        raw_path = self.base_url.raw_path.split(b"?", 1)[0].rstrip(b"/")
        # Quote what is not already URL-safe; existing %-escapes pass through unchanged.
        tail = quote(path.lstrip("/"), safe="/%:@!$&'()*+,;=-._~")
        url = self.base_url.copy_with(raw_path=raw_path + b"/" + tail.encode("ascii"))
        if isinstance(params, str):
            params = params.encode("latin-1")
        if isinstance(params, bytes):
            return url.copy_with(query=params) if params else url
        if params:
            return url.copy_merge_params(params)
        return url

    def _target(self, path: str, params: Params) -> tuple[httpcore.URL, bytes]:
        """`url(path, params)` as httpcore takes it, and its host header; remembered for the
        few paths a proxy sees (building one with httpx costs about 0.1 ms)."""
        key = (path, params) if params is None or isinstance(params, str | bytes) else None
        known = self._targets.get(key) if key is not None else None
        if known is not None:
            return known
        url = self.url(path, params)
        target = httpcore.URL(
            scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
        )
        if key is not None:
            if len(self._targets) >= _TARGETS_KEPT:
                self._targets.clear()
            self._targets[key] = (target, url.netloc)
        return target, url.netloc

    def forward_headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        """The request headers to send upstream, lower-cased, end-to-end ones only; never
        another provider's credentials (`proxy.upstream.providers`)."""
        items = list(incoming.items())
        drop = REQUEST_DROP | connection_tokens(items)
        headers: dict[str, str] = {}
        for name, value in items:
            lowered = name.lower()
            if lowered in drop or lowered.startswith(("proxy-", "x-xun-")):
                continue
            headers[lowered] = value
        for name in foreign_credentials(self.provider, headers):
            headers.pop(name, None)
        # Responses stay uncompressed end to end, so the proxy can read what it must.
        headers["accept-encoding"] = "identity"
        if self._api_key is not None:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    @staticmethod
    def response_headers(
        upstream_headers: httpx.Headers | Mapping[str, str], *, raw: bool = False
    ) -> list[tuple[str, str]]:
        """The upstream response headers to pass back to the client.

        `raw=True` when the body is relayed as the upstream's raw bytes: `content-encoding`
        then stays; otherwise the body was decoded or rebuilt and the header goes.
        """
        if isinstance(upstream_headers, httpx.Headers):
            items = upstream_headers.multi_items()
        else:
            items = list(upstream_headers.items())
        drop = RESPONSE_DROP | connection_tokens(items)
        if not raw:
            drop = drop | {"content-encoding"}
        return [(name.lower(), value) for name, value in items if name.lower() not in drop]

    async def send(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        content: Content = None,
        params: Params = None,
        read_timeout: float | None = None,
        background: bool = False,
    ) -> UpstreamResponse:
        """Send a request upstream and return the response with its body still unread.

        The caller must `aclose()` the response. Transport failures become `UpstreamError`s.
        `read_timeout` overrides both the first-byte and the idle timeout for this call.
        `background`: the proxy's own work, which takes a pool connection only when one is
        free at once (`proxy.upstream.pool.BACKGROUND`).
        """
        target, netloc = self._target(path, params)
        # Starlette decodes header bytes as latin-1; encoding them back keeps non-ASCII
        # values (a UTF-8 session id, say) byte-identical.
        raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw_headers = _framing(raw_headers, netloc, content)
        timeouts = dict(self.timeouts)
        if read_timeout is not None:
            timeouts["read"] = read_timeout
        extensions: dict[str, Any] = {"timeout": timeouts}
        if background:
            extensions[BACKGROUND] = True
        request = httpcore.Request(
            method.encode("ascii"),
            target,
            headers=raw_headers,
            content=content,
            extensions=extensions,
        )
        try:
            response = await self.pool.handle_async_request(request)
        except httpcore.RemoteProtocolError as exc:
            # A pooled keep-alive connection the server closed just as it was reused: the
            # server never read the request, so sending it once more on a fresh connection is
            # safe (when the body can be sent again). Nothing has reached the client yet.
            if not (stale_connection(exc) and isinstance(content, bytes | None)):
                raise map_transport_error(exc) from exc
            request.extensions[FRESH] = True  # the pool's other idle connections may be stale too
            try:
                response = await self.pool.handle_async_request(request)
            except TRANSPORT_ERRORS as again:
                raise map_transport_error(again) from again
        except TRANSPORT_ERRORS as exc:
            raise map_transport_error(exc) from exc
        # httpcore reads the request's timeout mapping at each body read, so from here on
        # each read may wait `idle_timeout` (the first-byte wait is over).
        timeouts["read"] = self.idle_timeout if read_timeout is None else read_timeout
        return UpstreamResponse(response)

    async def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        read_timeout: float | None = None,
        background: bool = False,
    ) -> tuple[int, dict[str, Any], httpx.Headers]:
        """POST a JSON body and read a JSON object back (used for the proxy's own calls).

        Error statuses are returned, not raised; a body that is not a JSON object is an
        `UpstreamInvalidResponse`. `background`: as `send` takes it.
        """
        headers = {**headers, "content-type": "application/json"}
        response = await self.send(
            "POST",
            path,
            headers=headers,
            content=orjson.dumps(body),
            read_timeout=read_timeout,
            background=background,
        )
        data = await read_response(response)
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UpstreamInvalidResponse(
                f"The upstream API answered {response.status_code} with a body that is not JSON."
            ) from exc
        if not isinstance(parsed, dict):
            raise UpstreamInvalidResponse(
                f"The upstream API answered {response.status_code} with JSON that is not an object."
            )
        return response.status_code, parsed, response.headers

    async def aclose(self) -> None:
        self.closed = True
        await self.pool.aclose()


async def read_response(response: UpstreamResponse) -> bytes:
    """Read a whole upstream body and close the response; transport failures translated."""
    try:
        return await response.aread()
    finally:
        await response.aclose()


def _framing(
    headers: list[tuple[bytes, bytes]], netloc: bytes, content: Content
) -> list[tuple[bytes, bytes]]:
    """Host first, and the body's framing unless the caller set it."""
    names = {name.lower() for name, _ in headers}
    framed = [(b"host", netloc), *headers] if b"host" not in names else headers
    if content is not None and not names & {b"content-length", b"transfer-encoding"}:
        if isinstance(content, bytes):
            framed.append((b"content-length", str(len(content)).encode("ascii")))
        else:
            framed.append((b"transfer-encoding", b"chunked"))
    return framed


async def timed_chunks(response: UpstreamResponse, timing: dict[str, Any]) -> AsyncIterator[bytes]:
    """The response's raw body; the time spent waiting on the upstream goes to
    `timing["upstream_ms"]`, so the access log can tell the proxy's own time from it."""
    chunks = response.aiter_raw()
    while True:
        started = time.perf_counter()
        try:
            chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            timing["upstream_ms"] = timing.get("upstream_ms", 0.0) + elapsed
        yield chunk
