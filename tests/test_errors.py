"""The error tree, OpenAI's error shape on every route, and the last-resort 500."""

from __future__ import annotations

import importlib
import json
import logging
import pkgutil
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import proxy
from proxy import errors
from proxy.errors import (
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ProxyError,
    ServiceUnavailable,
    Unauthorized,
    UpstreamError,
    UpstreamInvalidResponse,
    UpstreamTimeout,
    UpstreamUnreachable,
    error_payload,
    error_response,
    handle_http_exception,
    handle_proxy_error,
    handle_unexpected,
)
from proxy.server.logging import RequestLogMiddleware
from tests.support.servers import UvicornThread

SECRET = "sk-secret-in-an-exception-message"


def test_error_payload_is_exactly_openais_shape() -> None:
    assert error_payload("bad", "invalid_request_error") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}
    }
    assert error_payload("m", "t", "c", "p") == {
        "error": {"message": "m", "type": "t", "param": "p", "code": "c"}
    }


TREE = [
    (InvalidRequest, 400, "invalid_request_error", None, False),
    (Unauthorized, 401, "invalid_request_error", "invalid_api_key", False),
    (NotFound, 404, "invalid_request_error", "not_found", False),
    (MethodNotAllowed, 405, "invalid_request_error", "method_not_allowed", False),
    (PayloadTooLarge, 413, "invalid_request_error", "request_too_large", False),
    (ServiceUnavailable, 503, "server_error", "service_unavailable", True),
    (UpstreamError, 502, "upstream_error", "upstream_error", True),
    (UpstreamUnreachable, 502, "upstream_error", "upstream_unreachable", True),
    (UpstreamInvalidResponse, 502, "upstream_error", "upstream_invalid_response", True),
    (UpstreamTimeout, 504, "upstream_error", "upstream_timeout", True),
]


@pytest.mark.parametrize(("cls", "status", "type_", "code", "retryable"), TREE)
def test_tree(
    cls: type[ProxyError], status: int, type_: str, code: str | None, retryable: bool
) -> None:
    exc = cls()
    assert isinstance(exc, ProxyError)
    assert (exc.status, exc.type, exc.code, exc.param) == (status, type_, code, None)
    assert exc.message and str(exc) == exc.message
    response = error_response(exc)
    assert response.status_code == status
    assert json.loads(bytes(response.body)) == error_payload(exc.message, type_, code)
    # Retrying cannot fix a client error; the OpenAI SDKs honour this header.
    assert (response.headers.get("x-should-retry") == "false") is not retryable


def test_fields_and_headers_are_kept() -> None:
    exc = ServiceUnavailable("later", code="draining", param="p", headers={"Retry-After": "3"})
    response = error_response(exc)
    assert response.headers["retry-after"] == "3"
    assert json.loads(bytes(response.body))["error"] == {
        "message": "later",
        "type": "server_error",
        "param": "p",
        "code": "draining",
    }
    assert InvalidRequest("x", status=499).status == 499
    assert InvalidRequest.status == 400  # the class default is untouched


async def boom(request: Request) -> Response:
    raise RuntimeError(f"exploded while holding {SECRET}")


async def proxy_error(request: Request) -> Response:
    raise PayloadTooLarge("too big")


async def http_error(request: Request) -> Response:
    raise HTTPException(status_code=422, detail="unprocessable")


async def broken_stream(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"partial": '
        raise RuntimeError(SECRET)

    return StreamingResponse(body(), media_type="application/json")


def tiny_app() -> Starlette:
    handlers: dict[Any, Any] = {
        ProxyError: handle_proxy_error,
        HTTPException: handle_http_exception,
        Exception: handle_unexpected,
    }
    return Starlette(
        routes=[
            Route("/boom", boom),
            Route("/proxy-error", proxy_error),
            Route("/http-error", http_error),
            Route("/stream", broken_stream),
        ],
        middleware=[Middleware(RequestLogMiddleware)],
        exception_handlers=handlers,
    )


async def call(path: str, method: str = "GET") -> httpx.Response:
    transport = httpx.ASGITransport(app=tiny_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.request(method, path, headers={"authorization": f"Bearer {SECRET}"})


async def test_unexpected_exception_is_a_generic_500(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    response = await call("/boom")
    assert response.status_code == 500
    assert response.json() == error_payload(
        "The proxy failed to handle the request.", "server_error"
    )
    assert "Traceback" not in response.text and SECRET not in response.text
    assert response.headers["x-request-id"].startswith("req_")
    records = {r.name: r for r in caplog.records}
    error = records["proxy.errors"].fields  # type: ignore[attr-defined]
    assert error["exc_type"] == "RuntimeError" and "boom" in error["traceback"]
    assert "exc_message" not in error  # exception text may quote request content
    access = records["proxy.access"].fields  # type: ignore[attr-defined]
    assert (access["status"], access["path"]) == (500, "/boom")
    assert SECRET not in caplog.text


async def test_proxy_error_keeps_its_status_and_shape() -> None:
    response = await call("/proxy-error")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize(
    ("path", "method", "status", "code", "message"),
    [
        ("/nope", "GET", 404, "not_found", "Invalid URL (GET /nope)"),
        ("/boom", "POST", 405, "method_not_allowed", "Method POST is not allowed on /boom"),
        ("/http-error", "GET", 422, None, "unprocessable"),
    ],
)
async def test_routing_errors_are_openai_shaped(
    path: str, method: str, status: int, code: str | None, message: str
) -> None:
    response = await call(path, method)
    assert response.status_code == status
    assert response.json() == error_payload(message, "invalid_request_error", code)
    if status == 405:
        assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD"}


def test_failure_after_headers_aborts_the_body(caplog: pytest.LogCaptureFixture) -> None:
    """Once the status line is out, the only honest signal left is a broken connection."""
    with UvicornThread(tiny_app()) as server, httpx.Client() as client:
        with client.stream("GET", server.url + "/stream") as response:
            assert response.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                response.read()
    assert SECRET not in caplog.text


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if info.name == "proxy.__main__":
            continue  # running it is the CLI
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[f"{info.name}.{value.__name__}"] = value
    return found


def test_every_exception_class_is_in_the_error_tree() -> None:
    found = _defined_exceptions()
    assert len(found) > 20
    assert {name for name, cls in found.items() if not issubclass(cls, errors.XunError)} == set()


def test_the_tree_marks_what_degrades_rather_than_fails() -> None:
    from proxy.compaction.summarizer import ContextLengthExceeded
    from proxy.session.history import UnrecognisedHistory
    from proxy.store import StoreError, VersionConflict
    from proxy.wire.base import Unsupported

    for cls in (StoreError, VersionConflict, UnrecognisedHistory, Unsupported):
        assert issubclass(cls, errors.DegradeError) and not issubclass(cls, errors.ProxyError)
    assert issubclass(ContextLengthExceeded, errors.DegradeError)
    assert issubclass(UnrecognisedHistory, ValueError)  # what callers caught before stays caught
    assert not issubclass(errors.ProxyError, errors.DegradeError)
