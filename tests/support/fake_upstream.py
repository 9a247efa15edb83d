"""A faithful fake of the OpenAI API (api.openai.com/v1), served by real uvicorn for tests.

It answers chat completions in OpenAI's exact JSON and SSE wire formats, reports `usage` that
grows with the prompt (`count_prompt_tokens`), records every request it receives, and can be
scripted: `push(Reply...)` queues answers (text, tool calls, reasoning, OpenAI-shaped errors),
and a reply can stall, hold mid-stream, drop the connection, send keep-alive comments or the
tool-call delta shapes other servers use. It notices when a client goes away mid-response.

    with FakeUpstream() as fake:
        fake.push(Reply.tool("get_weather", {"city": "Paris"}), Reply.text("Sunny."))
        client = openai.OpenAI(base_url=fake.url, api_key="sk-test")
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import secrets
import string
import struct
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.support.servers import UvicornThread

ToolCallStyle = Literal["split", "whole", "no_index", "index0"]
Responder = Callable[[dict[str, Any]], "Reply"]
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_MODELS = ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o4-mini", "text-embedding-3-small")
_MESSAGE_OVERHEAD = 4  # tokens per message, for role and separators
_REPLY_PRIMING = 3  # tokens every prompt pays for the assistant reply's header


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def _text_of(content: Any) -> str:
    """The text of a message `content`: a string, or the `text` of its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text") or ""
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens the fake reports for a chat request; tests use it for expectations.

    3 + sum over messages of (4 + ceil(chars / 4)) + ceil(len(tools_json) / 4), where a
    message's chars are its content text (a string, or the `text` of text parts) plus the
    `name` and `arguments` of each of its tool calls, and tools_json is `json.dumps(tools,
    separators=(",", ":"), ensure_ascii=False)` (0 without tools).
    """
    total = _REPLY_PRIMING
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        chars = len(_text_of(message.get("content")))
        for call in message.get("tool_calls") or ():
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            chars += len(str(function.get("name") or "")) + len(
                str(function.get("arguments") or "")
            )
        total += _MESSAGE_OVERHEAD + _tokens(chars)
    if body.get("tools"):
        total += _tokens(len(json.dumps(body["tools"], separators=(",", ":"), ensure_ascii=False)))
    return total


def _error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _random_id(prefix: str, length: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass
class Reply:
    """One scripted answer to a chat completion request.

    `tool_calls` items are `(name, arguments_json)` tuples, `{"name", "arguments", "id"?}`
    dicts (arguments a string or a dict) or OpenAI-shaped `{"id", "type", "function"}` dicts;
    missing ids become `call_<random>`. `finish_reason` defaults to "tool_calls" when there
    are tool calls, else "stop". A `status` other than 200 answers `error` in OpenAI's shape.

    Stream behaviour: `chunk_chars` sets fragment size; `chunk_delay` sleeps between events;
    `hold` streams the first content chunk (the first chunk when there is no content) and
    waits for the `threading.Event` before the rest; `delay`
    sleeps before any byte is sent; `keepalive` sends `: <text>` comments between events;
    `drop_after` closes the connection after that many data events (no [DONE]); `raw_stream`
    replaces the body with exactly these byte chunks; `tool_call_style` picks the delta shape:
    "split" (OpenAI), "whole" (one call per chunk), "no_index" (no `index`), "index0" (every
    parallel call at index 0, told apart by id).
    """

    content: str | None = None
    tool_calls: list[Any] = field(default_factory=list)
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    finish_reason: str | None = None
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    usage_override: dict[str, Any] | None = None
    chunk_chars: int = 6
    chunk_delay: float = 0.0
    hold: threading.Event | None = None
    delay: float = 0.0
    keepalive: str | None = None
    drop_after: int | None = None
    raw_stream: list[bytes] | None = None
    tool_call_style: ToolCallStyle = "split"

    @classmethod
    def text(cls, content: str, **kwargs: Any) -> Reply:
        return cls(content=content, **kwargs)

    @classmethod
    def tool(
        cls,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        id: str | None = None,
        content: str | None = None,
        **kwargs: Any,
    ) -> Reply:
        call = {"name": name, "arguments": arguments if arguments is not None else {}, "id": id}
        return cls(content=content, tool_calls=[call], **kwargs)

    @classmethod
    def _error(
        cls,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> Reply:
        return cls(
            status=status,
            error=_error_body(message, type, param, code)["error"],
            headers=dict(headers or {}),
        )

    @classmethod
    def rate_limited(cls, retry_after: float = 1) -> Reply:
        message = (
            "Rate limit reached for gpt-4o in organization org-fake on tokens per min (TPM): "
            "Limit 30000, Used 30000, Requested 1000. Please try again in 2s. Visit "
            "https://platform.openai.com/account/rate-limits to learn more."
        )
        return cls._error(
            429, message, "tokens", "rate_limit_exceeded", {"retry-after": f"{retry_after:g}"}
        )

    @classmethod
    def context_length_exceeded(cls, limit: int, tokens: int) -> Reply:
        message = (
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages."
        )
        return cls._error(
            400, message, "invalid_request_error", "context_length_exceeded", param="messages"
        )

    def calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments) of each tool call, ids filled in."""
        out = []
        for call in self.tool_calls:
            if isinstance(call, tuple | list):
                call_id, name, arguments = None, call[0], call[1]
            elif "function" in call:
                call_id, name, arguments = (
                    call.get("id"),
                    call["function"]["name"],
                    call["function"].get("arguments", ""),
                )
            else:
                call_id, name, arguments = call.get("id"), call["name"], call.get("arguments", "")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, separators=(",", ":"))
            out.append((call_id or _random_id("call_", 24), name, arguments))
        return out


class _ConstructorOrField:
    """`Reply.error(...)` builds an error reply; `reply.error` is the instance's field.

    A non-data descriptor: on the class it returns the constructor, on an instance the
    dataclass field stored in `__dict__` shadows it. Both names are part of the fake's API.
    """

    def __init__(self, constructor: Callable[..., Reply]) -> None:
        self.constructor = constructor

    def __get__(self, obj: object, owner: type | None = None) -> Callable[..., Reply]:
        return self.constructor


Reply.error = _ConstructorOrField(Reply._error)  # type: ignore[assignment,method-assign]


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    json: Any
    received_at: float
    streaming: bool = False  # answered with an event stream
    closed: bool = False  # the response is over, one way or another
    completed: bool = False  # the whole response was sent
    disconnected: bool = False  # the client went away before the response was complete
    dropped: bool = False  # the fake cut the connection on purpose (`Reply.drop_after`)


class _Drop:
    """Marker in a body iterator: abort the connection here."""


_DROP = _Drop()


class _WatchedResponse(Response):
    """Sends parts as they come while watching for the client going away."""

    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        parts: AsyncIterator[bytes | _Drop],
        on_close: Callable[[str], None],  # "completed", "disconnected", "dropped" or "closed"
    ) -> None:
        # Not Response.__init__: it would add `content-length: 0` to a body sent in parts.
        self.status_code = status
        self.background = None
        self.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ]
        self.parts = parts
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome: list[str] = []  # reported before the client can observe it, so tests need not wait

        def close(how: str) -> None:
            if not outcome:
                outcome.append(how)
                self.on_close(how)

        async def body() -> None:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            remaining = int(dict(self.raw_headers).get(b"content-length", -1))
            async for part in self.parts:
                if isinstance(part, _Drop):
                    close("dropped")
                    return  # uvicorn closes a connection whose response never completed
                remaining -= len(part)
                if remaining == 0:
                    close("completed")  # a sized body is complete for the client with this part
                await send({"type": "http.response.body", "body": part, "more_body": True})
            close("completed")
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch(task: asyncio.Task[None]) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not outcome:
                close("disconnected")
                task.cancel()

        task = asyncio.ensure_future(body())
        watcher = asyncio.ensure_future(watch(task))
        try:
            await task
        except asyncio.CancelledError:
            if outcome != ["disconnected"]:
                raise
        finally:
            watcher.cancel()
            close("closed")


class FakeUpstream:
    """The fake OpenAI API on its own uvicorn thread; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._server: UvicornThread | None = None
        self.app = Starlette(routes=self._routes())
        self.reset()

    # lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeUpstream:
        self._server = UvicornThread(self.app).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeUpstream is not started")
        return self._server.url

    @property
    def url(self) -> str:
        """The API base URL, ending in /v1 (what OPENAI_BASE_URL would be)."""
        return self.base_url + "/v1"

    def reset(self) -> None:
        """Forget requests, queued replies, counters and scripting."""
        with self._lock:
            self.requests: list[RecordedRequest] = []
            self._queue: deque[Reply | Responder] = deque()
            self.default: Responder | None = None
            self.context_window: int | None = None
            self._lock.notify_all()

    # scripting ---------------------------------------------------------------------------

    def push(self, *replies: Reply | Responder) -> None:
        """Queue replies (or `responder(body) -> Reply` callables) for the next chat requests."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/chat/completions"]

    @property
    def open_streams(self) -> int:
        """Event streams being sent right now."""
        with self._lock:
            return sum(r.streaming and not r.closed for r in self.requests)

    @property
    def disconnects(self) -> int:
        """Responses the client abandoned before they were complete."""
        with self._lock:
            return sum(r.disconnected for r in self.requests)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Wait until `predicate()` holds (checked whenever the fake's state changes)."""
        with self._lock:
            return self._lock.wait_for(predicate, timeout)

    def wait_for_disconnect(self, count: int = 1, timeout: float = 5.0) -> bool:
        return self.wait_for(lambda: self.disconnects >= count, timeout)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """A chat request's prompt tokens as this server counts them: for its `usage` and
        against `context_window`. `count_prompt_tokens` here; a subclass stands for another
        tokenizer or chat template (tests/support/fake_counting.py)."""
        return count_prompt_tokens(body)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            scripted = self._queue.popleft() if self._queue else self.default
        if scripted is None:
            return Reply.text("ok")
        return scripted if isinstance(scripted, Reply) else scripted(body)

    # HTTP --------------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        return [
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/models/{model:path}", self._model, methods=["GET"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/{path:path}", self._not_found, methods=_ALL_METHODS),
        ]

    async def _record(self, request: Request) -> RecordedRequest:
        body = await request.body()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        record = RecordedRequest(
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            json=parsed,
            received_at=time.time(),
        )
        with self._lock:
            self.requests.append(record)
            self._lock.notify_all()
        return record

    def _headers(
        self, extra: dict[str, str] | None = None, started: float | None = None
    ) -> dict[str, str]:
        elapsed = int((time.monotonic() - started) * 1000) if started else 1
        headers = {
            "x-request-id": "req_" + secrets.token_hex(16),
            "openai-processing-ms": str(max(elapsed, 1)),
            "openai-version": "2020-10-01",
            "openai-organization": "org-fake",
        }
        headers.update(extra or {})
        return headers

    def _json(
        self,
        record: RecordedRequest,
        status: int,
        payload: Any,
        reply: Reply | None = None,
        started: float | None = None,
    ) -> Response:
        body = json.dumps(payload, indent=2).encode()  # OpenAI pretty-prints JSON bodies
        headers = self._headers(reply.headers if reply else None, started)
        headers["content-type"] = "application/json"
        headers["content-length"] = str(len(body))
        parts = _parts(reply or Reply(), [body])
        return _WatchedResponse(status, headers, parts, self._closed(record))

    def _stream(
        self, record: RecordedRequest, headers: dict[str, str], parts: AsyncIterator[bytes | _Drop]
    ) -> Response:
        headers["content-type"] = "text/event-stream; charset=utf-8"
        with self._lock:
            record.streaming = True
            self._lock.notify_all()  # wake wait_for(): open_streams changed
        return _WatchedResponse(200, headers, parts, self._closed(record))

    def _closed(self, record: RecordedRequest) -> Callable[[str], None]:
        def on_close(outcome: str) -> None:
            with self._lock:
                record.closed = True
                setattr(record, outcome, True)
                self._lock.notify_all()

        return on_close

    async def _chat(self, request: Request) -> Response:
        started = time.monotonic()
        record = await self._record(request)
        body = record.json
        invalid = _validate_chat(body)
        if invalid is not None:
            return self._json(record, 400, invalid)
        prompt_tokens = self.prompt_tokens(body)
        window = self.context_window
        if window is not None and prompt_tokens > window:
            reply = Reply.context_length_exceeded(window, prompt_tokens)
        else:
            reply = self._next_reply(body)
        if reply.status != 200 or reply.error is not None:
            error = (
                reply.error if reply.error and "error" in reply.error else {"error": reply.error}
            )
            return self._json(record, reply.status, error, reply, started)
        completion = _Completion(body, reply, prompt_tokens)
        if not body.get("stream"):
            return self._json(record, 200, completion.whole(), reply, started)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if reply.raw_stream is not None:
            events, hold_after = reply.raw_stream, 0
        else:
            events, hold_after = completion.events(include_usage)
        parts = _stream_parts(reply, events, hold_after)
        return self._stream(record, self._headers(reply.headers, started), parts)

    async def _models(self, request: Request) -> Response:
        record = await self._record(request)
        return self._json(record, 200, {"object": "list", "data": [_model(m) for m in _MODELS]})

    async def _model(self, request: Request) -> Response:
        record = await self._record(request)
        name = request.path_params["model"]
        if name not in _MODELS:
            message = f"The model '{name}' does not exist or you do not have access to it."
            error = _error_body(message, "invalid_request_error", None, "model_not_found")
            return self._json(record, 404, error)
        return self._json(record, 200, _model(name))

    async def _embeddings(self, request: Request) -> Response:
        record = await self._record(request)
        body = record.json
        if not isinstance(body, dict) or "input" not in body:
            message = "Missing required parameter: 'input'."
            error = _error_body(
                message, "invalid_request_error", "input", "missing_required_parameter"
            )
            return self._json(record, 400, error)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if inputs and all(isinstance(i, int) for i in inputs):
            inputs = [inputs]  # one pre-tokenised input
        dims = int(body.get("dimensions") or 8)
        data, tokens = [], 0
        for index, item in enumerate(inputs):
            text = item if isinstance(item, str) else json.dumps(item)
            tokens += len(item) if isinstance(item, list) else _tokens(len(text))
            vector = _vector(text, dims)
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        payload = {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        return self._json(record, 200, payload)

    async def _responses(self, request: Request) -> Response:
        """A minimal Responses API: the answer echoes the last input text."""
        record = await self._record(request)
        body = record.json if isinstance(record.json, dict) else {}
        given = body.get("input")
        last = given[-1] if isinstance(given, list) and given else None
        if isinstance(given, str):
            text = given
        else:
            text = _text_of(last.get("content") if isinstance(last, dict) else None)
        response = _response_object(body, f"echo: {text}", _tokens(len(text)))
        if not body.get("stream"):
            return self._json(record, 200, response)
        parts = _parts(Reply(), _response_events(response))
        return self._stream(record, self._headers(), parts)

    async def _not_found(self, request: Request) -> Response:
        record = await self._record(request)
        message = f"Invalid URL ({request.method} {request.url.path})"
        return self._json(record, 404, _error_body(message, "invalid_request_error"))


def _response_object(body: dict[str, Any], text: str, input_tokens: int) -> dict[str, Any]:
    message = {"type": "message", "id": _random_id("msg_", 48), "status": "completed"}
    message |= {"role": "assistant", "content": [{"type": "output_text", "text": text}]}
    message["content"][0]["annotations"] = []
    output_tokens = _tokens(len(text))
    return {
        "id": _random_id("resp_", 48),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model"),
        "output": [message],
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        "metadata": body.get("metadata") or {},
    }


def _response_events(response: dict[str, Any]) -> list[bytes]:
    """The Responses API stream: named events (`event:` lines) around text deltas."""
    message = response["output"][0]
    part = message["content"][0]
    text = part["text"]
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    opened = {**message, "status": "in_progress", "content": []}
    where = {"item_id": message["id"], "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending}),
        ("response.output_item.added", {"output_index": 0, "item": opened}),
        ("response.content_part.added", {**where, "part": {**part, "text": ""}}),
    ]
    for piece in _chunks(text, 6):
        events.append(("response.output_text.delta", {**where, "delta": piece, "logprobs": []}))
    events += [
        ("response.output_text.done", {**where, "text": text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.completed", {"response": response}),
    ]
    return [
        f"event: {name}\n".encode() + _event({"type": name, "sequence_number": number, **data})
        for number, (name, data) in enumerate(events)
    ]


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 1715367049, "owned_by": "system"}


def _vector(text: str, dims: int) -> list[float]:
    digest = b""
    counter = 0
    while len(digest) < dims:
        digest += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    raw = [b / 127.5 - 1.0 for b in digest[:dims]]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    # float32-exact values, so the base64 and float encodings decode to the same numbers
    return [struct.unpack("<f", struct.pack("<f", v / norm))[0] for v in raw]


def _validate_chat(body: Any) -> dict[str, Any] | None:
    """The 400 OpenAI gives a malformed chat request, or None when it is well formed."""
    if not isinstance(body, dict):
        message = (
            "We could not parse the JSON body of your request. (HINT: This likely means you "
            "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
            "but what was sent was not valid JSON. If you have trouble figuring out how to fix "
            "this, please contact us through our help center at help.openai.com.)"
        )
        return _error_body(message, "invalid_request_error")
    if "messages" not in body:
        return _error_body(
            "Missing required parameter: 'messages'.",
            "invalid_request_error",
            "messages",
            "missing_required_parameter",
        )
    if not isinstance(body["messages"], list):
        return _invalid_type("messages", "an array of objects", body["messages"])
    if body.get("model") is None:
        return _error_body("you must provide a model parameter", "invalid_request_error")
    if not isinstance(body["model"], str):
        return _invalid_type("model", "a string", body["model"])
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool)):
        return _invalid_type("n", "an integer", n)
    if n is not None and n < 1:
        message = f"{n} is less than the minimum of 1 - 'n'"
        return _error_body(message, "invalid_request_error", "n", "integer_below_min_value")
    return None


def _invalid_type(param: str, expected: str, value: Any) -> dict[str, Any]:
    kinds = {bool: "a boolean", int: "an integer", float: "a decimal", str: "a string"}
    kinds |= {list: "an array", dict: "an object", type(None): "null"}
    got = kinds.get(type(value), "an unknown type")
    message = f"Invalid type for '{param}': expected {expected}, but got {got} instead."
    return _error_body(message, "invalid_request_error", param, "invalid_type")


class _Completion:
    """One reply rendered as a `chat.completion` object or as `chat.completion.chunk` events."""

    def __init__(self, body: dict[str, Any], reply: Reply, prompt_tokens: int) -> None:
        self.reply = reply
        self.id = _random_id("chatcmpl-", 29)
        self.created = int(time.time())
        self.model = body["model"]
        self.n = body.get("n") or 1
        self.calls = reply.calls()
        self.fingerprint = "fp_" + hashlib.sha256(self.model.encode()).hexdigest()[:10]
        self.finish_reason = reply.finish_reason or ("tool_calls" if self.calls else "stop")
        self.usage = self._usage(prompt_tokens)

    def _usage(self, prompt_tokens: int) -> dict[str, Any]:
        reply = self.reply
        visible = len(reply.content or "") + len(reply.refusal or "")
        visible += sum(len(name) + len(arguments) for _, name, arguments in self.calls)
        reasoning = _tokens(len(reply.reasoning_content or "") + len(reply.reasoning or ""))
        completion = (max(1, _tokens(visible)) + reasoning) * self.n
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning * self.n,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        override = reply.usage_override or {}
        usage.update(override)
        if "total_tokens" not in override:
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return usage

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self) -> dict[str, Any]:
        reply = self.reply
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content if reply.content is not None or self.calls else "",
            "refusal": reply.refusal,
            "annotations": [],
        }
        for key in ("reasoning_content", "reasoning"):
            if getattr(reply, key) is not None:
                message[key] = getattr(reply, key)
        if self.calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in self.calls
            ]
        choices = [
            {"index": i, "message": message, "logprobs": None, "finish_reason": self.finish_reason}
            for i in range(self.n)
        ]
        return {
            **self._envelope("chat.completion"),
            "choices": choices,
            "usage": self.usage,
            "service_tier": "default",
            "system_fingerprint": self.fingerprint,
        }

    def _deltas(self) -> list[dict[str, Any]]:
        """The deltas of one choice, in order; the last carries the finish reason."""
        reply, size = self.reply, self.reply.chunk_chars
        text = reply.content or ""
        first: dict[str, Any] = {
            "role": "assistant",
            "content": "" if text or not self.calls else None,
        }
        first["refusal"] = None
        deltas = [first]
        for key in ("reasoning_content", "reasoning"):
            deltas += [{key: part} for part in _chunks(getattr(reply, key) or "", size)]
        deltas += [{"content": part} for part in _chunks(text, size)]
        deltas += [{"refusal": part} for part in _chunks(reply.refusal or "", size)]
        style = reply.tool_call_style
        for position, (call_id, name, arguments) in enumerate(self.calls):
            index = 0 if style == "index0" else position
            opening: dict[str, Any] = {"index": index, "id": call_id, "type": "function"}
            if style == "no_index":
                del opening["index"]
            if style == "whole":
                opening["function"] = {"name": name, "arguments": arguments}
                deltas.append({"tool_calls": [opening]})
                continue
            opening["function"] = {"name": name, "arguments": ""}
            deltas.append({"tool_calls": [opening]})
            for part in _chunks(arguments, size):
                fragment: dict[str, Any] = {"index": index, "function": {"arguments": part}}
                if style == "no_index":
                    del fragment["index"]
                deltas.append({"tool_calls": [fragment]})
        deltas.append({})
        return deltas

    def events(self, include_usage: bool) -> tuple[list[bytes], int]:
        """The SSE events, and the position of the first content chunk (0 when none)."""
        events = []
        deltas = self._deltas()
        first_content = next((i for i, d in enumerate(deltas) if d.get("content")), 0)
        for position, delta in enumerate(deltas):
            finish = self.finish_reason if position == len(deltas) - 1 else None
            choices = [
                {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish}
                for i in range(self.n)
            ]
            chunk = {
                **self._envelope("chat.completion.chunk"),
                "service_tier": "default",
                "system_fingerprint": self.fingerprint,
                "choices": choices,
            }
            if include_usage:
                chunk["usage"] = None
            events.append(_event(chunk))
        if include_usage:
            chunk = {
                **self._envelope("chat.completion.chunk"),
                "service_tier": "default",
                "system_fingerprint": self.fingerprint,
                "choices": [],
                "usage": self.usage,
            }
            events.append(_event(chunk))
        events.append(b"data: [DONE]\n\n")
        return events, first_content


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _parts(reply: Reply, parts: Iterable[bytes]) -> AsyncIterator[bytes | _Drop]:
    if reply.delay:
        await asyncio.sleep(reply.delay)
    for part in parts:
        yield part


async def _stream_parts(
    reply: Reply, events: list[bytes], hold_after: int
) -> AsyncIterator[bytes | _Drop]:
    if reply.delay:
        await asyncio.sleep(reply.delay)
    keepalive = f": {reply.keepalive}\n\n".encode() if reply.keepalive is not None else None
    for number, event in enumerate(events):
        if reply.drop_after is not None and number >= reply.drop_after:
            yield _DROP
            return
        if number and reply.chunk_delay:
            await asyncio.sleep(reply.chunk_delay)
        if keepalive is not None:
            yield keepalive
        yield event
        if number == hold_after and reply.hold is not None:
            # A threading.Event set by the test thread: poll, a blocking wait would stall the loop.
            while not reply.hold.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.005)
