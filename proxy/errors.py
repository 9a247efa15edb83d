"""One error tree for the proxy, rendered in the shape of the API a request came through:
OpenAI's on every route, Anthropic's under `/v1/messages*` (`is_anthropic_path`).

Every exception class the proxy defines derives from `XunError` (tests/test_errors.py checks
it); those defined elsewhere name their module:

    XunError
    ├── ProxyError (500, server_error)                      answered to the client
    │   ├── InvalidRequest (400, invalid_request_error)    x-should-retry: false
    │   │   ├── Unauthorized (401)                          x-should-retry: false
    │   │   ├── NotFound (404)                              x-should-retry: false
    │   │   ├── MethodNotAllowed (405)                      x-should-retry: false
    │   │   ├── RequestTimeout (408)
    │   │   ├── PayloadTooLarge (413)                       x-should-retry: false
    │   │   ├── Conflict (409, admin.base)
    │   │   └── ClientGone (server.disconnect)
    │   ├── ServiceUnavailable (503, server_error)
    │   └── UpstreamError (502, upstream_error)
    │       ├── UpstreamUnreachable (502)
    │       ├── UpstreamInvalidResponse (502)
    │       └── UpstreamTimeout (504)
    ├── DegradeError                                        DEGRADE, DO NOT FAIL: the request
    │   │                                                   goes upstream uncompacted
    │   ├── StoreError (store.base): VersionConflict, SessionTooLarge
    │   ├── UnrecognisedHistory (session.history)
    │   ├── Unsupported (wire.base)
    │   ├── ContextLengthExceeded
    │   └── _Wide (session.json_limits)
    ├── UnreadableInput                                     translated at the boundary into
    │   │                                                   the ProxyError the API would answer
    │   ├── MalformedRequest (wire.messages.checks)
    │   ├── UnreadableReply (wire.messages.reply)
    │   └── ConversationFormatError (conversation_message)
    └── ConfigError (settings)                              the proxy does not start

Foreign errors (httpx, starlette) are translated at the edge with `raise ... from exc`; any
other exception becomes a generic 500 whose body never carries a traceback or exception text.

The error types import no HTTP library, so the pure core can raise them too (the stream
relay raises `UpstreamInvalidResponse`); starlette is imported only to render a response.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

if TYPE_CHECKING:
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

logger = logging.getLogger("proxy.errors")


class XunError(Exception):
    """Every exception the proxy defines."""


class DegradeError(XunError):
    """A failure of compaction, the store or the summary: it never fails the user's request,
    which goes upstream uncompacted."""


class ContextLengthExceeded(DegradeError):
    """Upstream refused a request because the prompt does not fit the model's window (read by
    `proxy.wire.refusal`): the summariser splits its request, or gives up on the summary."""


class UnreadableInput(XunError):
    """Input the proxy reads but cannot use, translated where it is caught into the
    ProxyError the API would answer (a 400 for a request, a 502 for a reply)."""


class ProxyError(XunError):
    """An error the proxy answers itself, with an HTTP status and OpenAI's error fields."""

    status: int = 500
    type: str = "server_error"
    default_code: ClassVar[str | None] = None
    default_message: ClassVar[str] = "The proxy failed to handle the request."
    # False when sending the same request again cannot succeed (the OpenAI SDKs honour it).
    retryable: ClassVar[bool] = True

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        status: int | None = None,
    ) -> None:
        if status is not None:
            self.status = status
        self.message = message or self.default_message
        self.code = code if code is not None else self.default_code
        self.param = param
        self.headers: dict[str, str] = dict(headers or {})
        if not self.retryable:
            self.headers.setdefault("x-should-retry", "false")
        super().__init__(self.message)


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    default_message = "The request is invalid."
    retryable = False


class Unauthorized(InvalidRequest):
    status = 401
    default_code = "invalid_api_key"
    default_message = "Missing or invalid credentials."


class NotFound(InvalidRequest):
    status = 404
    default_code = "not_found"
    default_message = "Not found."


class MethodNotAllowed(InvalidRequest):
    status = 405
    default_code = "method_not_allowed"
    default_message = "Method not allowed."


class RequestTimeout(InvalidRequest):
    """The request body did not arrive in time; the same request sent again may make it."""

    status = 408
    default_code = "request_timeout"
    default_message = "The request body did not arrive in time."
    retryable = True


class PayloadTooLarge(InvalidRequest):
    status = 413
    default_code = "request_too_large"
    default_message = "The request body is too large."


class ServiceUnavailable(ProxyError):
    status = 503
    default_code = "service_unavailable"
    default_message = "The proxy is not ready to serve requests."


class UpstreamError(ProxyError):
    status = 502
    type = "upstream_error"
    default_code = "upstream_error"
    default_message = "The upstream API failed."


class UpstreamUnreachable(UpstreamError):
    default_code = "upstream_unreachable"
    default_message = "The upstream API could not be reached."


class UpstreamInvalidResponse(UpstreamError):
    default_code = "upstream_invalid_response"
    default_message = "The upstream API sent a response the proxy could not read."


class UpstreamTimeout(UpstreamError):
    status = 504
    default_code = "upstream_timeout"
    default_message = "The upstream API did not answer in time."


def error_payload(
    message: str, type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


ANTHROPIC_PATH = "/v1/messages"  # Anthropic's API: its routes answer in its error shape
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_ANTHROPIC_KNOWN = frozenset([*_ANTHROPIC_TYPES.values(), "api_error"])


def is_anthropic_path(path: str) -> bool:
    """Whether `path` is one of Anthropic's routes (`/v1/messages` and below it)."""
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


def anthropic_payload(status: int, message: str, type_: str | None = None) -> dict[str, Any]:
    """Anthropic's error body: `type_` when it is one of Anthropic's types, else the type
    Anthropic gives that status (a code has no place in this shape). The proxy's generic
    `invalid_request_error` yields to the status's own type (413: `request_too_large`)."""
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if type_ in _ANTHROPIC_KNOWN and not (
        type_ == "invalid_request_error" and status in _ANTHROPIC_TYPES
    ):
        kind = type_
    return {"type": "error", "error": {"type": kind, "message": message}}


def payload_for(path: str, exc: ProxyError) -> dict[str, Any]:
    """`exc`'s body in the shape of the API `path` belongs to."""
    if is_anthropic_path(path):
        return anthropic_payload(exc.status, exc.message, exc.type)
    return error_payload(exc.message, exc.type, exc.code, exc.param)


def stream_error_event(path: str, exc: ProxyError) -> bytes:
    """The last event of a stream that broke, in the shape of `path`'s API: Anthropic's
    `event: error`, which its SDKs raise on, or OpenAI's `data:` line with an `error`."""
    if is_anthropic_path(path):
        return b"event: error\ndata: " + orjson.dumps(payload_for(path, exc)) + b"\n\n"
    return b"data: " + orjson.dumps(payload_for(path, exc)) + b"\n\n"


def error_response(exc: ProxyError, path: str = "") -> JSONResponse:
    """Render a `ProxyError` as its status, headers and body, in the shape of the API
    `path` belongs to (OpenAI's unless it is under `/v1/messages`)."""
    from starlette.responses import JSONResponse

    return JSONResponse(payload_for(path, exc), status_code=exc.status, headers=exc.headers)


_HTTP_ERRORS: Mapping[int, type[ProxyError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    404: NotFound,
    405: MethodNotAllowed,
    408: RequestTimeout,
    413: PayloadTooLarge,
    503: ServiceUnavailable,
}


def from_http_exception(request: Request, exc: HTTPException) -> ProxyError:
    """Translate starlette's routing errors (404, 405, ...) into the proxy's tree."""
    cls = _HTTP_ERRORS.get(exc.status_code)
    if cls is None:
        cls = InvalidRequest if exc.status_code < 500 else ProxyError
    message = exc.detail
    if exc.status_code == 404:
        message = f"Invalid URL ({request.method} {request.url.path})"
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    # Unusual statuses (e.g. 408, 422) keep their number rather than fold into 400/500.
    return cls(message, headers=exc.headers, status=exc.status_code)


def internal_error_response(path: str = "") -> JSONResponse:
    """The generic 500: nothing about the failure leaks to the client."""
    return error_response(ProxyError(), path)


def log_unexpected(exc: BaseException, *, where: str, include_message: bool = False) -> None:
    """Log an unexpected exception: its type and stack frames; its text only when asked,
    because exception messages can quote request content."""
    fields: dict[str, Any] = {
        "where": where,
        "exc_type": type(exc).__name__,
        "traceback": "".join(traceback.format_tb(exc.__traceback__)),
    }
    if include_message:
        fields["exc_message"] = str(exc)
    logger.error("unhandled exception", extra={"fields": fields})


async def handle_proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    return error_response(exc, request.scope.get("path", ""))


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    from starlette.exceptions import HTTPException

    assert isinstance(exc, HTTPException)
    return error_response(from_http_exception(request, exc), request.scope.get("path", ""))


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    log_unexpected(exc, where=request.scope.get("path", ""))
    return internal_error_response(request.scope.get("path", ""))
