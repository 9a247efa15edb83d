"""A minimal HTTP/1.1 keep-alive client for the benchmarks' load loops.

An httpx request costs the client 0.3-0.5 ms of Python and allocates enough to trigger its
own garbage collections: at concurrency 1 that lands in every target's latency, and in the
p99 of all of them. This client writes the request in one call and reads the answer with
asyncio's stream reader (Content-Length or chunked), so what the client adds is small and
alike for every target. `stream` also times the arrival of each SSE event of a chunked
answer, for the gaps between chunks.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


class HTTPError(Exception):
    """The server answered with something this client cannot read."""


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    events: list[float] = field(default_factory=list)  # perf_counter of each SSE event
    event_data: list[bytes] = field(default_factory=list)  # each event's bytes (if kept)


class Connection:
    """One keep-alive connection to host:port; reconnects when the server closes it."""

    def __init__(self, host: str, port: int, *, timeout: float = 120.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, limit=2**22
            )
        return self.reader, self.writer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], *, keep_events: bool = False
    ) -> Answer:
        return await asyncio.wait_for(self._post(path, body, headers, keep_events), self.timeout)

    async def _post(
        self, path: str, body: bytes, headers: dict[str, str], keep_events: bool
    ) -> Answer:
        reader, writer = await self._open()
        head = f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
        head += f"content-length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode() + b"\r\n" + body)
        try:
            return await self._read(reader, keep_events)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            await self.close()
            raise HTTPError(f"connection lost: {type(exc).__name__}") from exc

    async def _read(self, reader: asyncio.StreamReader, keep_events: bool) -> Answer:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise HTTPError(f"bad status line {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        answer = Answer(int(parts[1]), headers, b"")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            answer.body = await self._chunked(reader, answer, keep_events)
        elif "content-length" in headers:
            answer.body = await reader.readexactly(int(headers["content-length"]))
        else:  # read to close
            answer.body = await reader.read()
            await self.close()
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return answer

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader, answer: Answer, keep_events: bool) -> bytes:
        body = bytearray()
        pending = b""
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                return bytes(body)
            chunk = data[:size]
            now = time.perf_counter()
            body += chunk
            # SSE events end with a blank line; an event split over chunks counts when whole.
            pending += chunk
            while True:
                end = pending.find(b"\n\n")
                if end < 0:
                    break
                answer.events.append(now)
                if keep_events:
                    answer.event_data.append(pending[:end])
                pending = pending[end + 2 :]
