"""xun-proxy on the replay's clock (benchmarks only): each request's `x-bench-now` header
(epoch seconds) is what the proxy's clock reads while it serves that request, so a replay can
give each turn its recorded time (or a fixed pause) and the proxy judges its prompt cache
cold or warm as it would have then (`proxy.compaction.cache_life`), without anyone waiting.

    python -m tests.bench.clocked serve --upstream ...   # the flags of `xun-proxy serve`

The proxy's code is not edited: the app `create_app` makes gets `app.state.clock` (which the
pipeline reads, as the tests set it) and a pure ASGI middleware that reads the header.
"""

from __future__ import annotations

import contextvars
import sys
import time
from typing import Any

NOW: contextvars.ContextVar[float | None] = contextvars.ContextVar("bench_now", default=None)
HEADER = b"x-bench-now"


def clock() -> float:
    now = NOW.get()
    return time.time() if now is None else now


class ReplayClock:
    """Sets `NOW` from the request's header for everything that serves the request."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
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
    print("xun-proxy on the replay's clock (x-bench-now)", file=sys.stderr, flush=True)
    from proxy.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
