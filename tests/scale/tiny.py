"""A bare-bones HTTP/1.1 upstream and client for load: thousands of requests cost little CPU.

`python -m tests.scale.tiny PORT` answers every POST with one fixed chat completion (with
usage), over keep-alive connections. `RawClient` sends pre-encoded requests over one
keep-alive connection. Neither is a general HTTP implementation: both rely on
Content-Length bodies, which is what the proxy and this upstream send each other.
"""

from __future__ import annotations

import asyncio
import json
import sys

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-tiny",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 1, "total_tokens": 901},
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    + f"content-length: {len(COMPLETION)}\r\n\r\n".encode()
    + COMPLETION
)


async def read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One request or response: (head, body); None when the peer closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length)
    return head, body


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while await read_message(reader) is not None:
            writer.write(RESPONSE)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(_serve_connection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


class RawClient:
    """Keep-alive POSTs to one host, with a pre-encoded head; answers (status, body)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        lines = [f"POST {path} HTTP/1.1", f"host: 127.0.0.1:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines += ["content-type: application/json", f"content-length: {len(body)}", "", ""]
        self.writer.write("\r\n".join(lines).encode() + body)
        message = await read_message(self.reader)
        if message is None:
            raise ConnectionError("the server closed the connection")
        head, reply = message
        return int(head.split(b" ", 2)[1]), reply

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
