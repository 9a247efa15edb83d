"""Profile xun-proxy under load with py-spy: where does the per-request time go?

    python -m tests.bench.profile_proxy --size 50KB --target xun-session --seconds 15

Starts the fast upstream and `python -m proxy serve` (SQLite store), samples the proxy with
`py-spy record --format raw` while one client sends the overhead benchmark's request in a
loop, and prints the functions with the largest inclusive and exclusive share of samples.
py-spy comes from PyPI (`pip install py-spy`); it is a dev tool, not a dependency.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import time
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
    args = parser.parse_args(argv)
    if shutil.which("py-spy") is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    scratch = run_dir("profile")
    upstream = fast_upstream(scratch)
    proxy = xun_proxy(
        "xun-proxy",
        upstream.url + "/v1",
        scratch,
        python=args.proxy_python,
        patches=args.patches,
        store=args.store or f"sqlite:///{scratch / 'xun.db'}",
        token_threshold=10**9,
    )
    messages = history(*SIZES[args.size])
    payload = orjson.dumps(body(messages, stream=args.stream))
    threshold = compaction_threshold(messages)
    session = {"xun-pass": None, "xun-session": "worker", "xun-compact": "request"}[args.target]
    with running([upstream, proxy]):
        upstream.start()
        upstream.wait_ready("/health")
        proxy.start()
        proxy.wait_ready("/healthz")
        assert proxy.proc is not None
        target = Target(args.target, proxy.url, session=session)
        common: dict[str, Any] = {"stream": args.stream, "concurrency": args.concurrency}
        asyncio.run(
            run_slice(
                target,
                payload,
                seconds=1.0,
                cell="warm",
                threshold=threshold,
                samples=None,
                **common,
            )
        )
        out = scratch / "profile.txt"
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(proxy.proc.pid),
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
        asyncio.run(
            run_slice(
                target,
                payload,
                seconds=args.seconds - 2,
                cell="prof",
                threshold=threshold,
                samples=samples,
                **common,
            )
        )
        spy.wait(timeout=args.seconds + 30)
    inc, exc, total = top(out.read_text())
    n = len(samples.latency)
    print(f"{n} requests, {n / samples.wall:.1f}/s, {total} samples; raw stacks in {out}")
    print_header("proxy/ functions, inclusive (share of busy samples in or under them)")
    print(table(["function", "samples", "%"], inc))
    print_header("Exclusive (share of busy samples in the function itself)")
    print(table(["function", "samples", "%"], exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
