"""httpcore's failures mapped onto the proxy's error tree, at the edge to the upstream."""

from __future__ import annotations

import httpcore

from proxy.errors import ServiceUnavailable, UpstreamTimeout, UpstreamUnreachable

# Everything httpcore raises for a failed exchange (it maps socket errors onto these).
TRANSPORT_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
)


def stale_connection(exc: Exception) -> bool:
    return "without sending a response" in str(exc)


def map_transport_error(exc: Exception) -> Exception:
    """Translate an httpcore failure into the proxy's error tree (use with `raise ... from`)."""
    if isinstance(exc, httpcore.PoolTimeout):
        return ServiceUnavailable(
            "Too many concurrent upstream requests; try again shortly.",
            code="upstream_pool_exhausted",
            headers={"retry-after": "1"},
        )
    if isinstance(exc, httpcore.ConnectTimeout):
        return UpstreamTimeout("Timed out connecting to the upstream API.")
    if isinstance(exc, httpcore.TimeoutException):
        return UpstreamTimeout()
    if isinstance(exc, httpcore.ConnectError):
        return UpstreamUnreachable()
    if isinstance(exc, httpcore.RemoteProtocolError | httpcore.ReadError | httpcore.WriteError):
        return UpstreamUnreachable("The upstream API closed the connection.")
    return UpstreamUnreachable()
