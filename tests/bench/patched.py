"""Run xun-proxy with experimental hot-path changes applied at start-up (benchmarks only).

    XUN_BENCH_PATCHES=nogc,gclog python -m tests.bench.patched serve --upstream ...

The proxy's code is not edited: each patch replaces one function in the running process, so
the overhead benchmark can measure a proposed change end to end (`overhead.py --patches`)
before anyone applies it to `proxy/`. Patches:

  nogc          no cyclic garbage collection at all once serving (gc.disable): what the
                collector costs the tail
  noreclaim     the idle reclaimer never runs (no full collection and malloc_trim when the
                proxy goes idle between bursts)
  switch        the GIL's switch interval at 0.5 ms instead of 5 ms: how long the loop waits
                for a worker thread (the SQLite writer) that holds the GIL
  gcsave        cyclic garbage is kept (gc.DEBUG_SAVEALL) and SIGUSR1 writes what kinds of
                objects it holds to stderr: what makes reference cycles per request
  gclog         every collection over 0.5 ms is written to stderr with its generation and
                duration (for the proxy's log)
  nockpt        the SQLite store never checkpoints its WAL (it grows without bound): what
                the checkpoint costs the tail
  passive       the SQLite store's checkpoint is PASSIVE (writes go on inline meanwhile),
                with a RESTART only once 16 MiB are left behind
  turns8        a session keeps its last 8 turn records instead of 300: what writing the
                turn log inside the state on every request costs
  cprofile      the event loop's thread runs under cProfile; SIGUSR2 writes its stats to
                $XUN_BENCH_PROFILE (a pstats file) and starts counting afresh
  stages        the time of each of the request's stages (`STAGES`: an awaited call counts
                its awaits), wall clock, or the thread's CPU with XUN_BENCH_STAGES_CLOCK=cpu;
                SIGUSR2 writes each stage's mean, percentiles and max to stderr and starts
                afresh
  lines         line_profiler on the functions $XUN_BENCH_LINES names (module:Qual.name,
                comma-separated); SIGUSR2 writes their per-line times since start to stderr

`python -m tests.bench.profile_proxy --report stages` (or `lines`, `cprofile`) runs the
load and sends the signals.
  settlelog     every wait of a request for its session's earlier save over 0.5 ms is
                written to stderr with its duration
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def _nogc() -> None:
    import gc

    from proxy.server import allocator

    original = allocator.tune_collector

    def tune_collector(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        gc.disable()

    allocator.tune_collector = tune_collector


def _noreclaim() -> None:
    from proxy.server import allocator

    allocator.IdleReclaimer.tick = lambda self: False  # type: ignore[method-assign]


def _switch() -> None:
    sys.setswitchinterval(0.0005)


def _gclog() -> None:
    import gc

    started: list[float] = [0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - started[0]) * 1000
        if ms > 0.5:
            gen, n = info.get("generation"), info.get("collected")
            frame, idle = sys._getframe(1), False
            while frame is not None and not idle:
                idle = frame.f_code.co_name == "reclaim"
                frame = frame.f_back
            sizes = [len(gc.get_objects(g)) for g in range(3)] if gen == 2 else ""
            print(
                f"gc gen={gen} ms={ms:.2f} collected={n} idle={idle} {sizes}",
                file=sys.stderr,
                flush=True,
            )

    gc.callbacks.append(callback)


def _nockpt() -> None:
    from proxy.store import sqlite_reader

    sqlite_reader.CHECKPOINT_BYTES = 2**62


def _passive() -> None:
    import sqlite3

    from proxy.store import sqlite

    def checkpoint(conn: sqlite3.Connection) -> None:
        _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames > 4096:
            conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()

    def allowed(self: Any, size: int) -> bool:
        return bool(size <= sqlite.INLINE_WRITE_MAX_BYTES and self._conn is not None)

    sqlite.checkpoint = checkpoint  # type: ignore[assignment]
    sqlite.SQLiteStore._inline_write_allowed = allowed  # type: ignore[method-assign]


def _turns8() -> None:
    from proxy.session.turn_log import TurnLog

    original = TurnLog.append

    def append(self: Any, record: dict[str, Any], *, keep: int = 8) -> None:
        original(self, record, keep=min(keep, 8))

    TurnLog.append = append  # type: ignore[method-assign]


def _settlelog() -> None:
    from proxy.turn.persist import SessionWriter

    original = SessionWriter.settled

    async def settled(self: Any, session_id: str, wait: float | None = None) -> bool:
        started = time.perf_counter()
        try:
            return await original(self, session_id, wait)
        finally:
            ms = (time.perf_counter() - started) * 1000
            if ms > 0.5:
                print(f"settle ms={ms:.2f}", file=sys.stderr, flush=True)

    SessionWriter.settled = settled  # type: ignore[method-assign]


def _gcsave() -> None:
    import collections
    import gc
    import signal

    gc.set_debug(gc.DEBUG_SAVEALL)

    def dump(signum: int, frame: Any) -> None:
        gc.collect()
        kinds = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        print(f"gc garbage {len(gc.garbage)}: {kinds.most_common(40)}", file=sys.stderr, flush=True)
        gc.garbage.clear()

    signal.signal(signal.SIGUSR1, dump)


def _cprofile() -> None:
    import cProfile
    import signal

    profile = cProfile.Profile()

    def dump(signum: int, frame: Any) -> None:
        profile.disable()
        profile.dump_stats(os.environ.get("XUN_BENCH_PROFILE", "proxy.pstats"))
        profile.clear()
        profile.enable()

    signal.signal(signal.SIGUSR2, dump)
    profile.enable()


STAGES = (
    "proxy.server.logging:RequestLogMiddleware.__call__",
    "proxy.server.model_routes:_serve",
    "proxy.server.model_routes:_parsed",
    "proxy.server.model_routes:_neutral",
    "proxy.server.model_routes:read_body",
    "proxy.turn.pipeline:Pipeline.__init__",
    "proxy.turn.pipeline:Pipeline.prepare",
    "proxy.turn.pipeline:Pipeline.cache_cold",
    "proxy.turn.session_turn:Turn.load",
    "proxy.turn.session_turn:Turn.rebuild_from",
    "proxy.turn.whole_answer:complete",
    "proxy.turn.pipeline:Pipeline.open",
    "proxy.upstream.client:Upstream.send",
    "proxy.turn.pipeline:read_response",
    "proxy.turn.whole_answer:read_response",
    "proxy.turn.pipeline:Pipeline.finish",
    "proxy.turn.persist:save_turn",
    "proxy.store.sqlite:SQLiteStore.put",
    "proxy.store.sqlite_worker:SQLiteWorker._run",
    "proxy.store.sqlite_reader:InlineWriter.run",
    "proxy.store.cache:CachedStore.get",
    "proxy.turn.persist:SessionWriter.settled",
    "proxy.session.state:SessionState.to_bytes",
    "proxy.turn.summary_ahead:TurnAhead.after_turn",
    "proxy.server.metrics:Metrics.observe_request",
    "logging:Logger.handle",
)


def _replace(path: str, wrap: Any) -> None:
    """Replace the function `module:Qual.name` names with `wrap(function)`."""
    import importlib

    module_name, _, attrs = path.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, last = attrs.split(".")
    for attr in parents:
        owner = getattr(owner, attr)
    setattr(owner, last, wrap(getattr(owner, last)))


def _stages() -> None:
    import functools
    import inspect
    import signal

    taken: dict[str, list[float]] = {}  # each call's time, by stage
    # XUN_BENCH_STAGES_CLOCK=cpu: the thread's CPU time instead (for plain calls: an awaited
    # one would count whatever ran on the loop while it waited)
    clock = (
        time.thread_time if os.environ.get("XUN_BENCH_STAGES_CLOCK") == "cpu" else time.perf_counter
    )

    def wrapped(name: str, fn: Any) -> Any:
        times = taken.setdefault(name, [])
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = clock()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    times.append(clock() - started)

            return timed_async

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                times.append(clock() - started)

        return timed

    for path in STAGES:
        _replace(path, lambda fn, path=path: wrapped(path.rsplit(":", 1)[1], fn))

    def dump(signum: int, frame: Any) -> None:
        for name, times in taken.items():
            if times:
                took = sorted(times)
                us = sum(took) / len(took) * 1e6
                p50, p90, p99 = (took[int(len(took) * q)] * 1e6 for q in (0.5, 0.9, 0.99))
                print(
                    f"stage {name} calls={len(took)} us={us:.1f}"
                    f" p50={p50:.1f} p90={p90:.1f} p99={p99:.1f} max={took[-1] * 1e6:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
            times.clear()

    signal.signal(signal.SIGUSR2, dump)


def _lines() -> None:
    import io
    import signal

    from line_profiler import LineProfiler  # a dev tool: pip install line_profiler

    profiler = LineProfiler()
    for path in filter(None, os.environ.get("XUN_BENCH_LINES", "").split(",")):
        _replace(path, profiler)

    def dump(signum: int, frame: Any) -> None:
        out = io.StringIO()
        profiler.print_stats(stream=out, output_unit=1e-6)
        print(out.getvalue(), file=sys.stderr, flush=True)

    signal.signal(signal.SIGUSR2, dump)


PATCHES = {
    "lines": _lines,
    "stages": _stages,
    "cprofile": _cprofile,
    "gcsave": _gcsave,
    "nogc": _nogc,
    "noreclaim": _noreclaim,
    "switch": _switch,
    "gclog": _gclog,
    "nockpt": _nockpt,
    "passive": _passive,
    "settlelog": _settlelog,
    "turns8": _turns8,
}


def main() -> int:
    names = [n for n in os.environ.get("XUN_BENCH_PATCHES", "").split(",") if n]
    for name in names:
        PATCHES[name]()
    print(f"xun-proxy with bench patches: {names or 'none'}", file=sys.stderr, flush=True)
    from proxy.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
