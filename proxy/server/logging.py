"""Structured logs: one JSON object per line, and the per-request access-log middleware.

Records carry their structured fields in `extra={"fields": {...}}`. Secrets never reach a line:
field names that look like credentials are dropped whatever their value, and the access line
is built from an allow-list of request facts (method, path without query, status, timing).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import internal_error_response, log_unexpected
from proxy.server.console_log import ACCESS_LOGGER, ConsoleFormatter

_SECRET_PARTS = ("authorization", "api_key", "apikey", "api-key", "secret", "password", "cookie")


@functools.lru_cache(maxsize=1024)  # the proxy's own field names, a few dozen: 1 us -> 0.05
def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    if "tokens" in lowered or lowered.endswith("threshold"):
        return False  # token counts and limits are numbers, not credentials
    return lowered.endswith("key") or "token" in lowered or any(p in lowered for p in _SECRET_PARTS)


def redact(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Drop fields whose names suggest a credential."""
    return {key: value for key, value in fields.items() if not _is_secret_name(key)}


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ...fields}` on one line; with `pid`, the id of the
    process that wrote it follows `logger` (which worker, under `--workers`)."""

    def __init__(self, *, pid: bool = False) -> None:
        super().__init__()
        self.pid = pid

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if self.pid:
            line["pid"] = record.process
        line["msg"] = record.getMessage()
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            line.update(redact(fields))
        if record.exc_info and record.exc_info[1] is not None:
            line["exc_type"] = type(record.exc_info[1]).__name__
        return orjson.dumps(line, default=str).decode()


def configure_logging(
    level: str = "info",
    stream: IO[str] | None = None,
    fmt: str | None = None,
    *,
    colour: bool = True,
    pid: bool = False,
) -> None:
    """Send the proxy's and uvicorn's logs to `stream` (stderr): `fmt` "json" (JSON lines) or
    "console" (`proxy.server.console_log`); None: console when the stream is a terminal, JSON
    otherwise. Console lines have colour on a terminal when `colour` allows it (NO_COLOR).
    With `pid` every line names the process that wrote it (several workers share a stream).

    Called by the CLI only: creating an app never reconfigures logging.
    """
    stream = stream or sys.stderr
    terminal = _is_terminal(stream)
    if fmt is None:
        fmt = "console" if terminal else "json"
    handler = logging.StreamHandler(stream)
    if fmt == "console":
        handler.setFormatter(ConsoleFormatter(colour=colour and terminal, redact=redact, pid=pid))
    else:
        handler.setFormatter(JsonFormatter(pid=pid))
    for name in ("proxy", "uvicorn", "uvicorn.error"):
        target = logging.getLogger(name)
        target.handlers[:] = [handler]
        target.setLevel(level.upper())
        target.propagate = False


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no file behind it, or closed
        return False


def mint_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


class RequestLogMiddleware:
    """Pure ASGI middleware: one access line per HTTP request, and a request id on every reply.

    Routes add facts through `request.state.log_fields` (a dict). An exception that escapes the
    app becomes the generic OpenAI-shaped 500 (or an aborted body if the reply had started).
    """

    def __init__(self, app: ASGIApp, *, include_exception_text: bool = False) -> None:
        self.app = app
        self.logger = logging.getLogger(ACCESS_LOGGER)
        self.include_exception_text = include_exception_text

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        log_fields: dict[str, Any] = {}
        scope.setdefault("state", {})["log_fields"] = log_fields
        status = 0
        request_id = ""
        aborted = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, request_id
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                found = [value for name, value in headers if name.lower() == b"x-request-id"]
                if found:
                    request_id = found[0].decode("latin-1")
                else:
                    request_id = mint_request_id()
                    headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            log_unexpected(exc, where=scope["path"], include_message=self.include_exception_text)
            if status == 0:
                await internal_error_response(scope["path"])(scope, receive, send_with_id)
            else:
                # Headers are out: returning without finishing the body makes the server
                # abort the connection, so the client sees a broken reply, not a short one.
                aborted = True
        finally:
            # A route may have replaced the dict rather than filled it in.
            added = scope.get("state", {}).get("log_fields", log_fields)
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            fields = dict(added) if isinstance(added, dict) else {}
            if aborted:
                fields["error"] = "response aborted"
            upstream_ms = fields.get("upstream_ms")
            if isinstance(upstream_ms, int | float):
                fields["proxy_ms"] = round(max(duration_ms - upstream_ms, 0.0), 2)
            fields |= {
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "duration_ms": duration_ms,
                "request_id": request_id,
            }
            self.logger.info("request", extra={"fields": fields})
