"""A fast fake upstream for the overhead benchmarks, run in its own process.

    python -m tests.bench.fast_upstream --port 8999

A raw asyncio HTTP/1.1 server (keep-alive, Content-Length or chunked request bodies) that
answers at once with a fixed reply and a fixed usage, as JSON or as an SSE stream (chunked),
in the three APIs the proxy serves:

- POST .../chat/completions: a chat completion, or its chunks (usage last when asked for);
- POST .../responses: a Responses `response` object, or its events (`response.created`,
  `response.in_progress`, `response.output_item.added`, `response.content_part.added`,
  `response.output_text.delta` ... `response.completed`, each with its `sequence_number`);
- POST .../messages: an Anthropic `message`, or its events (`message_start`,
  `content_block_start`, `ping`, `content_block_delta` ... `message_delta`, `message_stop`),
  usage with cache reads as Anthropic reports them.

It does not parse the request JSON: it only looks for `"stream": true`,
`"include_usage": true` and `"user": "bench-slow-<ms>"` (or `"user_id"`, Anthropic's
`metadata` field), which spaces the stream's events <ms> apart, for the no-buffering check
(`bench-slow-<ms>-<n>`: a chat stream of n content chunks " tok0" ... " tok<n-1>", for the
jitter measure of `tests.bench.field`).
Anything else gets a small JSON 404, except GET /health and GET .../models.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from typing import Any

import orjson

STREAM = re.compile(rb'"stream"\s*:\s*true')
INCLUDE_USAGE = re.compile(rb'"include_usage"\s*:\s*true')
SLOW = re.compile(rb'"user(?:_id)?"\s*:\s*"bench-slow-(\d+)(?:-(\d+))?"')
USAGE = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005}
# The same 1,005 tokens in the other two APIs' shapes (Anthropic: mostly read from the cache).
RESPONSES_USAGE = {
    "input_tokens": 1000,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 1005,
}
MESSAGES_INPUT_USAGE = {
    "input_tokens": 10,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 990,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    "service_tier": "standard",
}
NOT_FOUND = (
    b'{"error":{"message":"not here","type":"invalid_request_error","param":null,"code":null}}'
)
WORDS = ["Hello", " from", " the", " fast", " upstream."]


def _completion() -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "gpt-4o",
            "system_fingerprint": "fp_bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(WORDS), "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    )


def _events(include_usage: bool, words: list[str] = WORDS) -> list[bytes]:
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "gpt-4o",
        "system_fingerprint": "fp_bench",
    }
    deltas = [{"role": "assistant", "content": ""}] + [{"content": w} for w in words]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]}
        for d in deltas
    ]
    chunks.append(
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}
    )
    if include_usage:
        for chunk in chunks:
            chunk["usage"] = None
        chunks.append({**base, "choices": [], "usage": USAGE})
    events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks]
    events.append(b"data: [DONE]\n\n")
    return events


def _response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses `response` object as OpenAI returns it for a stateless request."""
    done = status == "completed"
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-5-codex",
        "output": output,
        "parallel_tool_calls": False,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": RESPONSES_USAGE if done else None,
        "user": None,
        "metadata": {},
    }


def _responses_message(text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    return {
        "id": "msg_bench",
        "type": "message",
        "status": status,
        "content": [part] if status == "completed" else [],
        "role": "assistant",
    }


def _responses_events() -> list[bytes]:
    text = "".join(WORDS)
    done_item = _responses_message(text, "completed")
    part = done_item["content"][0]
    where = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response("in_progress", [])}),
        ("response.in_progress", {"response": _response("in_progress", [])}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": _responses_message("", "in_progress")},
        ),
        ("response.content_part.added", {**where, "part": {**part, "text": ""}}),
    ]
    for word in WORDS:
        events.append(("response.output_text.delta", {**where, "delta": word, "logprobs": []}))
    events += [
        ("response.output_text.done", {**where, "text": text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": done_item}),
        ("response.completed", {"response": _response("completed", [done_item])}),
    ]
    return [
        b"event: "
        + name.encode()
        + b"\ndata: "
        + orjson.dumps({"type": name, "sequence_number": n, **data})
        + b"\n\n"
        for n, (name, data) in enumerate(events)
    ]


def _message(content: list[dict[str, Any]], stop: str | None, output_tokens: int) -> dict[str, Any]:
    """An Anthropic `message` object."""
    return {
        "id": "msg_01bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**MESSAGES_INPUT_USAGE, "output_tokens": output_tokens},
    }


def _messages_events() -> list[bytes]:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": _message([], None, 1)}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {}),
    ]
    for word in WORDS:
        delta = {"type": "text_delta", "text": word}
        events.append(("content_block_delta", {"index": 0, "delta": delta}))
    events += [
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(WORDS)},
            },
        ),
        ("message_stop", {}),
    ]
    return [
        b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"
        for name, data in events
    ]


COMPLETION = _completion()
EVENTS = {flag: _events(flag) for flag in (False, True)}
RESPONSE = orjson.dumps(_response("completed", [_responses_message("".join(WORDS), "completed")]))
RESPONSE_EVENTS = _responses_events()
MESSAGE = orjson.dumps(_message([{"type": "text", "text": "".join(WORDS)}], "end_turn", len(WORDS)))
MESSAGE_EVENTS = _messages_events()


# Path suffix of each API (the Anthropic upstream is a base URL: the proxy calls .../v1/messages).
ROUTES = (
    ("chat", b"/chat/completions"),
    ("responses", b"/responses"),
    ("messages", b"/messages"),
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Connection(asyncio.Protocol):
    def __init__(self, stats: dict[str, int]) -> None:
        self.stats = stats
        self.buf = bytearray()
        self.head: tuple[bytes, bytes, dict[bytes, bytes]] | None = None
        self.transport: asyncio.Transport | None = None
        self.chunked: bytearray | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        for _ in range(10_000):  # bounded: a pipelining client cannot spin us
            if not self._step():
                return

    def _step(self) -> bool:
        if self.head is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            lines = bytes(self.buf[:end]).split(b"\r\n")
            del self.buf[: end + 4]
            method, path, _ = [*lines[0].split(b" ", 2), b"", b""][:3]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            self.head = (method, path, headers)
            if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                self.chunked = bytearray()
        method, path, headers = self.head
        if self.chunked is not None:
            body = self._read_chunked()
            if body is None:
                return False
        else:
            size = int(headers.get(b"content-length", b"0") or 0)
            if len(self.buf) < size:
                return False
            body = bytes(self.buf[:size])
            del self.buf[:size]
        self.head, self.chunked = None, None
        self._respond(method, path, headers, body)
        return True

    def _read_chunked(self) -> bytes | None:
        assert self.chunked is not None
        while True:
            end = self.buf.find(b"\r\n")
            if end < 0:
                return None
            size = int(bytes(self.buf[:end]).split(b";")[0] or b"0", 16)
            if len(self.buf) < end + 2 + size + 2:
                return None
            self.chunked += self.buf[end + 2 : end + 2 + size]
            del self.buf[: end + 2 + size + 2]
            if size == 0:
                return bytes(self.chunked)

    def _send(self, status: str, ctype: bytes, body: bytes, close: bool) -> None:
        assert self.transport is not None
        head = (
            b"HTTP/1.1 "
            + status.encode()
            + b"\r\ncontent-type: "
            + ctype
            + b"\r\ncontent-length: "
            + str(len(body)).encode()
            + (b"\r\nconnection: close" if close else b"")
            + b"\r\nx-request-id: req_bench\r\n\r\n"
        )
        self.transport.write(head + body)
        if close:
            self.transport.close()

    def _respond(
        self, method: bytes, path: bytes, headers: dict[bytes, bytes], body: bytes
    ) -> None:
        close = headers.get(b"connection", b"").lower() == b"close"
        path = path.split(b"?")[0]
        if method == b"GET" and (path == b"/health" or path.endswith(b"/models")):
            data = b'{"object":"list","data":[{"id":"gpt-4o","object":"model","owned_by":"bench"}]}'
            self._send("200 OK", b"application/json", data, close)
            return
        api = next((a for a, suffix in ROUTES if path.endswith(suffix)), None)
        if method != b"POST" or api is None:
            self.stats["other"] = self.stats.get("other", 0) + 1
            err = NOT_FOUND
            self._send("404 Not Found", b"application/json", err, close)
            return
        self.stats[api] = self.stats.get(api, 0) + 1
        if not STREAM.search(body):
            reply = {"chat": COMPLETION, "responses": RESPONSE, "messages": MESSAGE}[api]
            self._send("200 OK", b"application/json", reply, close)
            return
        if api == "chat":
            events = EVENTS[bool(INCLUDE_USAGE.search(body))]
        else:
            events = RESPONSE_EVENTS if api == "responses" else MESSAGE_EVENTS
        slow = SLOW.search(body)
        if slow is not None and slow.group(2) and api == "chat":
            count = int(slow.group(2))  # bench-slow-<ms>-<n>: n content chunks " tok0" ...
            words = [f" tok{i}" for i in range(count)]
            events = _events(bool(INCLUDE_USAGE.search(body)), words)
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\nx-request-id: req_bench\r\n\r\n"
        )
        if slow is None:
            self.transport.write(b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
            if close:
                self.transport.close()
            return
        gap = int(slow.group(1)) / 1000
        loop = asyncio.get_running_loop()
        for i, event in enumerate(events):
            loop.call_later(i * gap, self._write_if_open, _chunk(event))
        loop.call_later(len(events) * gap, self._write_if_open, b"0\r\n\r\n")

    def _write_if_open(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


async def serve(port: int, seconds: float) -> None:
    stats: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(stats), "127.0.0.1", port, backlog=1024)
    async with server:
        await asyncio.sleep(seconds)  # bounded: the benchmark stops us long before this


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.max_seconds))


if __name__ == "__main__":
    main()
