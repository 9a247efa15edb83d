"""A fast fake OpenAI upstream for the overhead benchmark, run in its own process.

    python -m tests.bench.fast_upstream --port 8999

A raw asyncio HTTP/1.1 server (keep-alive, Content-Length or chunked request bodies) that
answers every POST .../chat/completions at once with a fixed reply and a fixed usage, as
JSON or as an SSE stream (chunked), without parsing the request JSON: it only looks for
`"stream": true`, `"include_usage": true` and `"user": "bench-slow-<ms>"` (which spaces the
stream's events <ms> apart, for the no-buffering check). Anything else gets a small JSON 404,
except GET /health and GET .../models.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

import orjson

STREAM = re.compile(rb'"stream"\s*:\s*true')
INCLUDE_USAGE = re.compile(rb'"include_usage"\s*:\s*true')
SLOW = re.compile(rb'"user"\s*:\s*"bench-slow-(\d+)"')
USAGE = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005}
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


def _events(include_usage: bool) -> list[bytes]:
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "gpt-4o",
        "system_fingerprint": "fp_bench",
    }
    deltas = [{"role": "assistant", "content": ""}] + [{"content": w} for w in WORDS]
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


COMPLETION = _completion()
EVENTS = {flag: _events(flag) for flag in (False, True)}


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
        if method != b"POST" or not path.endswith(b"/chat/completions"):
            self.stats["other"] = self.stats.get("other", 0) + 1
            err = NOT_FOUND
            self._send("404 Not Found", b"application/json", err, close)
            return
        self.stats["chat"] = self.stats.get("chat", 0) + 1
        if not STREAM.search(body):
            self._send("200 OK", b"application/json", COMPLETION, close)
            return
        events = EVENTS[bool(INCLUDE_USAGE.search(body))]
        slow = SLOW.search(body)
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
