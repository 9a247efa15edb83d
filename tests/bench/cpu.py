"""CPU time the proxy process spends per request, by path: a measure that load on the machine
barely moves, unlike latency.

One fast fake upstream and one xun-proxy, each its own process; a single client sends the same
request N times to each path in turn (pass-through, session below the threshold, and a session
whose state was compacted), in several interleaved rounds, and reads the proxy's user + system
CPU time from /proc before and after each batch. Reported per path: median CPU ms a request
over the rounds, and the wall-clock p50 of the same requests for reference.

    python -m tests.bench.cpu [--sizes 50KB] [--requests 300] [--rounds 5] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.bench.common import (
    Child,
    fast_upstream,
    git_commit,
    machine,
    print_header,
    rnd,
    run_dir,
    running,
    table,
    write_result,
    xun_proxy,
)
from tests.bench.histories import history
from tests.bench.overhead import SESSION_HEADER, SIZES

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


async def batch(
    client: httpx.AsyncClient, url: str, payload: bytes, headers: dict[str, str], n: int
) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        resp = await client.post(url, content=payload, headers=headers)
        await resp.aread()
        if resp.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status_code} {resp.text[:200]}")
        times.append((time.perf_counter() - start) * 1000)
    return times


async def measure(
    args: argparse.Namespace, proxies: dict[str, Child], upstream: Child
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        for size in args.sizes:
            target_bytes, n_messages = SIZES[size]
            messages = history(target_bytes, n_messages)
            body = {"model": "gpt-4o-mini", "messages": messages, "stream": args.stream}
            payload = orjson.dumps(body)
            base = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
            paths: dict[str, tuple[Child | None, str, dict[str, str]]] = {
                "direct": (None, upstream.url + "/v1/chat/completions", base)
            }
            for label, proxy in proxies.items():
                url = proxy.url + "/v1/chat/completions"
                session = {**base, SESSION_HEADER: f"cpu-{size}"}
                paths[f"{label}pass"] = (proxy, url, base)
                paths[f"{label}session"] = (proxy, url, session)
            cpu: dict[str, list[float]] = {p: [] for p in paths}
            sys_share: dict[str, list[float]] = {p: [] for p in paths}
            wall: dict[str, list[float]] = {p: [] for p in paths}
            for _, url, headers in paths.values():  # warm up
                await batch(client, url, payload, headers, 20)
            for _ in range(args.rounds):
                for name, (proxy, url, headers) in paths.items():
                    pid = (upstream if proxy is None else proxy).proc.pid  # type: ignore[union-attr]
                    before = cpu_seconds(pid)
                    times = await batch(client, url, payload, headers, args.requests)
                    after = cpu_seconds(pid)
                    user, system = after[0] - before[0], after[1] - before[1]
                    cpu[name].append((user + system) * 1000 / args.requests)
                    sys_share[name].append(system / max(user + system, 1e-9))
                    wall[name].extend(times)
            out[size] = {
                name: {
                    "proxy_cpu_ms": rnd(statistics.median(cpu[name]), 3),
                    "proxy_cpu_ms_rounds": [rnd(c, 3) for c in cpu[name]],
                    "kernel_share": rnd(statistics.median(sys_share[name]), 2),
                    "wall_p50_ms": rnd(statistics.median(wall[name]), 3),
                }
                for name in paths
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["2KB", "50KB", "800KB"], choices=SIZES)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the proxy")
    parser.add_argument(
        "--compare",
        metavar="DIR",
        help="also run the proxy of another checkout (e.g. a git worktree of an earlier "
        "commit), measured interleaved with this one as base-pass / base-session",
    )
    parser.add_argument("--compare-python", default=sys.executable, help="its interpreter")
    args = parser.parse_args(argv)
    scratch = run_dir("cpu")
    upstream = fast_upstream(scratch)

    def proxy(name: str, python: str) -> Child:
        return xun_proxy(
            name,
            upstream.url + "/v1",
            scratch,
            python=python,
            store=f"sqlite:///{scratch / f'{name}.db'}",
            token_threshold=10**9,
        )

    proxies = {"": proxy("xun-proxy", args.python)}
    if args.compare:
        other = proxy("xun-base", args.compare_python)
        other.cwd = Path(args.compare).resolve()  # `python -m proxy` imports from there
        proxies["base-"] = other
    with running([upstream, *proxies.values()]):
        upstream.start()
        upstream.wait_ready("/health", timeout=20)
        for child in proxies.values():
            child.start()
            child.wait_ready("/healthz", timeout=30)
        result = asyncio.run(measure(args, proxies, upstream))
    summary = {
        "machine": machine(),
        "commit": git_commit(),
        "argv": sys.argv[1:],
        "compare": args.compare,
        "results": result,
    }
    path = write_result("cpu", summary)
    print_header("CPU per request of the process that answered (ms, median of rounds), wall p50")
    rows = []
    for size, paths in result.items():
        for name, r in paths.items():
            rows.append([size, name, r["proxy_cpu_ms"], r["kernel_share"], r["wall_p50_ms"]])
    print(table(["size", "path", "CPU ms/request", "of it in the kernel", "wall p50 ms"], rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
