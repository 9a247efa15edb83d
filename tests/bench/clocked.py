"""xun-proxy on the replay's clock (benchmarks only): each request's `x-bench-now` header
(epoch seconds) is what the proxy's clock reads while it serves that request, so a replay can
give each turn its recorded time (or a fixed pause) and the proxy judges its prompt cache
cold or warm as it would have then (`proxy.compaction.cache_life`), without anyone waiting.

    python -m tests.bench.clocked serve --upstream ...   # the flags of `xun-proxy serve`

The proxy's code is not edited: the app `create_app` makes gets `app.state.clock` (which the
pipeline reads, as the tests set it) and a pure ASGI middleware that reads the header.

Reproducible figures: a turn's bookkeeping (the session's save, the next summary written
ahead) runs after its answer is out, so a replay that sends the next turn at once races it,
and the same run could give other totals. The middleware also answers `POST /bench/settle`
once the proxy has nothing in flight: no request (`app.state.drain.in_flight`, which counts a
request until its background work is done), no save (`app.state.writer.idle()`) and no
summary being written ahead (`app.state.ahead.idle()`); the replay calls it before each turn.
And how long a summary took, which decides whether the next one is written ahead (under
`proxy.turn.summary_ahead.QUICK_SUMMARY_SECONDS`, the crossing turn writes it), is read on the
replay's clock, as everything the request does: the replay's local summariser takes 0 s
however loaded the machine is, so that choice no longer depends on the machine's load.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from typing import Any

NOW: contextvars.ContextVar[float | None] = contextvars.ContextVar("bench_now", default=None)
HEADER = b"x-bench-now"
SETTLE = "/bench/settle"
SETTLE_TIMEOUT = 300.0  # seconds: a hung summary fails the replay instead of hanging it


def clock() -> float:
    now = NOW.get()
    return time.time() if now is None else now


async def settled(state: Any) -> None:
    """Return once the proxy has no request, save or summary ahead in flight."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_TIMEOUT
    while loop.time() < deadline:
        drain, writer, ahead = state.drain, state.writer, state.ahead
        if drain.in_flight:
            await asyncio.sleep(0.002)
            continue
        await writer.idle()
        await ahead.idle()
        if not drain.in_flight and not ahead.tasks:
            return
    raise TimeoutError(f"the proxy was still busy after {SETTLE_TIMEOUT:.0f} s")


class ReplayClock:
    """Sets `NOW` from the request's header for everything that serves the request, and
    answers `POST /bench/settle` (see the module's docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == SETTLE:
            await settled(scope["app"].state)
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == HEADER:
                    try:
                        NOW.set(float(value))
                    except ValueError:
                        pass
                    break
        await self.app(scope, receive, send)


def main() -> int:
    from proxy.server import app as app_module

    original = app_module.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        app = original(*args, **kwargs)
        app.state.clock = clock
        app.add_middleware(ReplayClock)
        return app

    app_module.create_app = create_app  # type: ignore[assignment]
    from proxy.turn import summary_ahead_job

    summary_ahead_job.monotonic = clock  # type: ignore[attr-defined]  # a summary's time, on the replay's clock
    print("xun-proxy on the replay's clock (x-bench-now)", file=sys.stderr, flush=True)
    from proxy.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
