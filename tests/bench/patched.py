"""Run xun-proxy with experimental hot-path changes applied at start-up (benchmarks only).

    XUN_BENCH_PATCHES=state_bytes,view python -m tests.bench.patched serve --upstream ...

The proxy's code is not edited: each patch replaces one function in the running process, so
the overhead benchmark can measure a proposed change end to end (`overhead.py --patches`)
before anyone applies it to `proxy/`. Patches:

  state_bytes   SessionState.to_bytes serialises the dataclass with orjson directly instead
                of `dataclasses.asdict` (which deep-copies the state, its 300 kept turns
                included, on every save)
  view          record_turn stops re-compressing the whole history into `state.view` on
                every turn (keep_view=False); the inspection view would then be built on
                demand, e.g. by the admin route from the client's messages
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _state_bytes() -> None:
    import orjson

    from proxy import session_state as session  # in proxy.session before it had a module

    def to_bytes(self: session.SessionState) -> bytes:
        return orjson.dumps({"state_version": session.STATE_VERSION, **self.__dict__})

    session.SessionState.to_bytes = to_bytes  # type: ignore[method-assign]


def _view() -> None:
    from proxy import session

    original = session.record_turn

    def record_turn(*args: Any, **kwargs: Any) -> Any:
        kwargs["keep_view"] = False
        return original(*args, **kwargs)

    session.record_turn = record_turn
    # chat.py imported the name; rebind it there too.
    from proxy.routes import chat

    chat.record_turn = record_turn  # type: ignore[attr-defined]


PATCHES = {"state_bytes": _state_bytes, "view": _view}


def main() -> int:
    names = [n for n in os.environ.get("XUN_BENCH_PATCHES", "").split(",") if n]
    for name in names:
        PATCHES[name]()
    print(f"xun-proxy with bench patches: {names or 'none'}", file=sys.stderr, flush=True)
    from proxy.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
