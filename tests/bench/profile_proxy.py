"""Profile xun-proxy under load: where does the per-request time go?

    python -m tests.bench.profile_proxy --size 50KB --target xun-session --seconds 15
    python -m tests.bench.profile_proxy --report stages [--cpu]
    python -m tests.bench.profile_proxy --report lines --lines-of proxy.turn.pipeline:Pipeline.open
    python -m tests.bench.profile_proxy --report cprofile

Starts the fast upstream and `python -m proxy serve` (SQLite store) and has one client send
the overhead benchmark's request in a loop. By default it samples the proxy with `py-spy
record --format raw` and prints the functions with the largest inclusive and exclusive share
of samples. With `--report`, the proxy runs with that bench patch (`tests.bench.patched`) and
is asked for its figures after the load: each stage's time (`stages`, wall clock or with
`--cpu` the loop thread's CPU), line by line (`lines`), or cProfile's (`cprofile`). py-spy and
line_profiler come from PyPI; they are dev tools, not dependencies.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import pstats
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tests.bench.common import fast_upstream, print_header, run_dir, running, table, xun_proxy
from tests.bench.histories import body, history
from tests.bench.overhead import SIZES, Samples, Target, compaction_threshold, run_slice

IDLE = ("EpollSelector.select", "_worker (concurrent/futures/thread.py")


def _name(frame: str) -> str:
    """`func (path/file.py:line)` -> `func (file.py)`: lines merged, so a function is one row."""
    func, _, where = frame.partition(" (")
    return f"{func} ({where.rsplit(':', 1)[0].rstrip(')')})"


def top(collapsed: str, n: int = 25) -> tuple[list[list[Any]], list[list[Any]], int]:
    """(inclusive rows of proxy/ functions, exclusive rows, busy samples) from py-spy's
    collapsed stacks; samples of an idle event loop or worker thread are left out."""
    inclusive: collections.Counter[str] = collections.Counter()
    exclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = stack.split(";")
        if frames[-1].startswith(IDLE):
            continue
        count = int(count_text)
        total += count
        for frame in {_name(f) for f in frames if "proxy/" in f and "__main__" not in f}:
            inclusive[frame] += count
        exclusive[_name(frames[-1])] += count
    skip = ("main (cli.py)", "_serve (cli.py)", "serve (lifecycle.py)", "<module> (__main__.py)")
    inc = [
        [f, c, round(100 * c / total, 1)] for f, c in inclusive.most_common(n + 4) if f not in skip
    ]
    exc = [[f, c, round(100 * c / total, 1)] for f, c in exclusive.most_common(n)]
    return inc[:n], exc, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="py-spy profile of xun-proxy under load")
    parser.add_argument("--size", default="50KB", choices=list(SIZES))
    parser.add_argument(
        "--target", default="xun-session", choices=["xun-pass", "xun-session", "xun-compact"]
    )
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--store", help="store URL (default SQLite in a temp dir)")
    parser.add_argument("--proxy-python", default=sys.executable)
    parser.add_argument("--patches", default="", help="experimental patches (tests.bench.patched)")
    parser.add_argument("--native", action="store_true", help="py-spy --native: C frames too")
    parser.add_argument("--report", choices=["py-spy", "stages", "lines", "cprofile"])
    parser.add_argument("--cpu", action="store_true", help="stages: the thread's CPU time")
    parser.add_argument("--lines-of", default="", help="lines: module:Qual.name,...")
    args = parser.parse_args(argv)
    if args.report not in (None, "py-spy"):
        return patched_report(args)
    if shutil.which("py-spy") is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    scratch = run_dir("profile")
    with _serving(args, scratch, args.patches) as (proxy, load):
        asyncio.run(run_slice(seconds=1.0, cell="warm", samples=None, **load))
        out = scratch / "profile.txt"
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(proxy.pid),
                "--format",
                "raw",
                "--rate",
                "250",
                "--duration",
                str(int(args.seconds)),
                "--output",
                str(out),
                # --native reads C frames (uvloop, orjson, sqlite3), which needs the process
                # paused for each sample
                *(["--native"] if args.native else ["--nonblocking"]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        samples = Samples()
        asyncio.run(run_slice(seconds=args.seconds - 2, cell="prof", samples=samples, **load))
        spy.wait(timeout=args.seconds + 30)
    inc, exc, total = top(out.read_text())
    n = len(samples.latency)
    print(f"{n} requests, {n / samples.wall:.1f}/s, {total} samples; raw stacks in {out}")
    print_header("proxy/ functions, inclusive (share of busy samples in or under them)")
    print(table(["function", "samples", "%"], inc))
    print_header("Exclusive (share of busy samples in the function itself)")
    print(table(["function", "samples", "%"], exc))
    return 0


@contextlib.contextmanager
def _serving(
    args: argparse.Namespace, scratch: Path, patches: str
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    """The fast upstream and the proxy (with `patches`), running: the proxy's process and the
    keyword arguments of `run_slice` for the load `args` asks for."""
    upstream = fast_upstream(scratch)
    proxy = xun_proxy(
        "xun-proxy",
        upstream.url + "/v1",
        scratch,
        python=args.proxy_python,
        patches=patches,
        store=args.store or f"sqlite:///{scratch / 'xun.db'}",
        token_threshold=10**9,
    )
    messages = history(*SIZES[args.size])
    session = {"xun-pass": None, "xun-session": "worker", "xun-compact": "request"}[args.target]
    with running([upstream, proxy]):
        upstream.start()
        upstream.wait_ready("/health")
        proxy.start()
        proxy.wait_ready("/healthz")
        assert proxy.proc is not None
        yield (
            proxy.proc,
            {
                "target": Target(args.target, proxy.url, session=session),
                "payload": orjson.dumps(body(messages, stream=args.stream)),
                "threshold": compaction_threshold(messages),
                "stream": args.stream,
                "concurrency": args.concurrency,
            },
        )


def patched_report(args: argparse.Namespace) -> int:
    """The load with a bench patch that reports on SIGUSR2 (`tests.bench.patched`)."""
    scratch = run_dir(f"profile-{args.report}")
    os.environ["XUN_BENCH_PROFILE"] = str(scratch / "proxy.pstats")
    os.environ["XUN_BENCH_LINES"] = args.lines_of
    os.environ["XUN_BENCH_STAGES_CLOCK"] = "cpu" if args.cpu else "wall"
    patches = ",".join(filter(None, [args.patches, args.report]))
    log = scratch / "xun-proxy.log"
    with _serving(args, scratch, patches) as (proxy, load):
        asyncio.run(run_slice(seconds=2.0, cell="warm", samples=None, **load))
        proxy.send_signal(signal.SIGUSR2)  # the warm-up's figures, left out
        time.sleep(1.0)
        mark = len(log.read_bytes())
        samples = Samples()
        asyncio.run(run_slice(seconds=args.seconds, cell="prof", samples=samples, **load))
        time.sleep(0.5)
        proxy.send_signal(signal.SIGUSR2)
        time.sleep(1.5)
        text = log.read_bytes()[mark:].decode("utf-8", "replace")
    latency = sorted(samples.latency)
    n = len(latency)
    p50, p99 = latency[n // 2], latency[int(n * 0.99)]
    print(f"{n} requests, {n / samples.wall:.1f}/s, p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    if args.report == "cprofile":
        pstats.Stats(str(scratch / "proxy.pstats")).sort_stats("cumulative").print_stats(40)
        return 0
    for line in text.splitlines():
        if args.report == "lines" and not line.startswith("{"):
            print(line)
        elif line.startswith("stage "):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
