"""Upstreams that misbehave at the socket level, with exact timing.

`TimedUpstream` is a bare HTTP/1.1 server: it waits `header_delay` seconds before the status
line (the first byte), then sends the body parts with `gap` seconds between them. `Blackhole`
is a listener whose accept backlog is full, so a connection attempt hangs (connect timeout).
Both run on loopback only and stop at `close()`.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from typing import Any


def chunk(text: str, index: int = 0, finish: str | None = None) -> dict[str, Any]:
    delta = {"content": text} if text else {}
    return {
        "id": "chatcmpl-timed",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-timed",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def stream_parts(words: list[str]) -> list[bytes]:
    parts = [sse(chunk(word)) for word in words]
    return [*parts, sse(chunk("", finish="stop")), b"data: [DONE]\n\n"]


class TimedUpstream:
    """Answers every request the same scripted way; counts requests."""

    def __init__(self) -> None:
        self.header_delay = 0.0
        self.gap = 0.0
        self.stream = True
        self.parts: list[bytes] = stream_parts(["one ", "two ", "three"])
        self.requests = 0
        self._stop = threading.Event()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                return
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            got = sock.recv(65536)
            if not got:
                return
            body += got
        self.requests += 1
        if self._stop.wait(self.header_delay):
            return
        try:
            if self.stream:
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for number, part in enumerate(self.parts):
                    if number and self._stop.wait(self.gap):
                        return
                    sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                sock.sendall(b"0\r\n\r\n")
            else:
                payload = json.dumps(completion("timed reply")).encode()
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


class Blackhole:
    """A loopback port that never completes a TCP handshake: its accept queue is full."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)
        self.port = int(self._listener.getsockname()[1])
        self._fillers: list[socket.socket] = []
        for _ in range(4):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self._fillers.append(filler)
        time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        for sock in [*self._fillers, self._listener]:
            sock.close()
