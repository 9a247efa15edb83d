"""Run an ASGI app under real uvicorn on a free loopback port, in a background thread.

In-process transports buffer whole responses, so streaming, disconnects and timeouts are
only observable through a real server; every end-to-end test goes through this helper.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class UvicornThread:
    """Serve `app` on 127.0.0.1:<port> until `stop()`; usable as a context manager."""

    def __init__(self, app: Any, port: int | None = None, **config: Any) -> None:
        self.port = port or free_port()
        config.setdefault("log_level", "warning")
        config.setdefault("lifespan", "on")
        # Like the proxy's CLI: longer than clients' pool expiry, so reuse never races a close.
        config.setdefault("timeout_keep_alive", 75)
        self.config = uvicorn.Config(app, host="127.0.0.1", port=self.port, **config)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve()

    def settle(self) -> None:
        """Wait until the proxy app's saves have landed: a turn's last save is written just
        after its answer went out, so a test that reads the store itself waits first."""
        writer = getattr(getattr(self.config.app, "state", None), "writer", None)
        if writer is not None and self.loop is not None:
            self.call(writer.idle())

    def call(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the server's event loop and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> UvicornThread:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def __enter__(self) -> UvicornThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
