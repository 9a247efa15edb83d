"""`python -m proxy serve` of the working directory, with every collection of the cycle
collector written to stderr (`tests.bench.collector` reads it). Benchmarks only."""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())  # the checkout whose proxy runs
_started = [0.0]


def _log(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _started[0]) * 1000
    gen, freed = info.get("generation"), info.get("collected")
    print(f"gcpause gen={gen} ms={ms:.3f} collected={freed}", file=sys.stderr, flush=True)


def main() -> int:
    gc.callbacks.append(_log)
    if os.environ.get("XUN_GC_SWITCH"):
        sys.setswitchinterval(float(os.environ["XUN_GC_SWITCH"]))
    from proxy.server import allocator

    if os.environ.get("XUN_GC_NORECLAIM"):
        allocator.IdleReclaimer.tick = lambda self: False  # type: ignore[method-assign]
    from proxy.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
