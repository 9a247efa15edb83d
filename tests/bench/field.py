"""The field's metric set: what gateway benchmarks report, each figure against the direct
upstream measured in the same run, with LiteLLM and Headroom side by side.

    python -m tests.bench.field                 # about 12 minutes with both peers
    python -m tests.bench.field --quick         # about 3 minutes
    python -m tests.bench.field --skip litellm headroom --compare /path/to/other/checkout

Targets: `direct` (the fast fake upstream itself), `xun` (xun-proxy on its session path:
a session header, SQLite store unless `XUN_BENCH_STORE` names another, below the
threshold), `xun-base` (with `--compare DIR`: the
proxy of another checkout, for A/B of a change in one run), `litellm`, `headroom`. The load
comes from `tests.bench.rawhttp` (a lean client: what it adds is small and alike for all).

Figures (`tests.bench.field_phases` measures them):
- added p50 and p99 at concurrency 1 (50 KB history, every target's requests interleaved in
  rounds);
- throughput at concurrency 16 (x direct), and CPU microseconds per request at concurrency 8
  (the process group's user + system time from /proc; direct: the fake upstream's own);
- streams sustained: 128 concurrent streams of 60 chunks 20 ms apart, streams with every chunk
  delivered, and the p99 gap between chunks (added, and x direct);
- resident memory idle (started, nothing sent), under load (the largest seen during the
  throughput phase) and after (2 s after it);
- added p50 for 50 KB, 400 KB and 4 MB histories that grow by one tool turn a request, as an
  agent's do, and the proxy's resident memory before and after the 4 MB requests.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from pathlib import Path
from typing import Any

from tests.bench import peers
from tests.bench.common import (
    Child,
    fast_upstream,
    git_commit,
    machine,
    run_dir,
    running,
    write_result,
    xun_proxy,
)
from tests.bench.field_phases import (
    Target,
    growing,
    latency_c1,
    memory_of,
    print_report,
    streams,
    throughput,
)


def start(
    scratch: Path, args: argparse.Namespace
) -> tuple[list[Child], list[Target], dict[str, Any]]:
    upstream = fast_upstream(scratch)
    upstream.start()
    upstream.wait_ready("/health", timeout=20)
    children = [upstream]
    setup: dict[str, Any] = {}
    targets = [Target("direct", upstream, upstream)]
    proxies = [("xun", None, "")] + ([("xun-base", args.compare, "")] if args.compare else [])
    for spec in args.variant:  # LABEL=PATCHES: the proxy with tests.bench.patched patches
        label, _, patches = spec.partition("=")
        proxies.append((f"xun-{label}", None, patches))
    for name, where, patches in proxies:
        proxy = xun_proxy(
            name,
            upstream.url + "/v1",
            scratch,
            patches=patches,
            store=os.environ.get("XUN_BENCH_STORE") or f"sqlite:///{scratch / f'{name}.db'}",
            token_threshold=10**9,
        )
        if where:
            proxy.cwd = Path(where).resolve()  # `python -m proxy` imports from there
        proxy.start()
        children.append(proxy)
        proxy.wait_ready("/healthz", timeout=30)
        setup[name] = {"ok": True, "command": " ".join(proxy.argv), "cwd": str(proxy.cwd)}
        targets.append(Target(name, proxy, upstream, session=True))
    for name, factory in (("litellm", peers.litellm_child), ("headroom", peers.headroom_child)):
        if name in args.skip:
            setup[name] = {"ok": False, "error": "skipped by --skip"}
            continue
        info = peers.ensure(name, install=not args.no_install)
        setup[name] = {"ok": info.ok, "version": info.version, "error": info.error}
        if not info.ok:
            print(f"{name}: cannot install: {info.error}", flush=True)
            continue
        child = factory(upstream.url, scratch)
        try:
            child.start()
            children.append(child)
            child.wait_ready("/health/liveliness" if name == "litellm" else "/health", 180)
        except (RuntimeError, OSError) as exc:
            setup[name] = {**setup[name], "ok": False, "error": f"did not start: {exc}"}
            print(f"{name}: {setup[name]['error']}", flush=True)
            continue
        key = peers.LITELLM_KEY if name == "litellm" else "sk-bench"
        targets.append(Target(name, child, upstream, key=key, peer=True))
        setup[name]["command"] = " ".join(child.argv)
    return children, targets, setup


async def run(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"memory_idle_mib": {t.name: memory_of(t) for t in targets}}
    phases = set(args.phases)
    if "c1" in phases:
        out["c1"] = await latency_c1(targets, args)
    if "throughput" in phases:
        out["throughput"] = await throughput(targets, args)
        await asyncio.sleep(2.0)
        out["memory_after_mib"] = {t.name: memory_of(t) for t in targets}
    if "streams" in phases:
        out["streams"] = await streams(targets, args)
    if "histories" in phases:
        out["histories"] = await growing(targets, args)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300, help="c=1: per target per round")
    parser.add_argument("--peer-requests", type=int, default=60, help="c=1: per peer per round")
    parser.add_argument("--seconds", type=float, default=3.0, help="c=16: per slice")
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--chunks", type=int, default=60)
    parser.add_argument("--gap-ms", type=int, default=20)
    parser.add_argument("--stream-rounds", type=int, default=5)
    parser.add_argument("--grow", type=int, default=40, help="requests per history size")
    parser.add_argument("--sizes", nargs="+", default=["50KB", "400KB", "4MB"])
    parser.add_argument(
        "--phases",
        nargs="+",
        default=["c1", "throughput", "streams", "histories"],
        choices=["c1", "throughput", "streams", "histories"],
    )
    parser.add_argument("--compare", metavar="DIR", help="another checkout's proxy, as xun-base")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=PATCHES",
        help="another xun-proxy with patches from tests.bench.patched, as xun-LABEL",
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["litellm", "headroom"])
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--tag", default="field", help="results file name")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests, args.peer_requests = 4, 150, 20
        args.seconds, args.stream_rounds, args.grow = 1.5, 2, 15
    scratch = run_dir(args.tag)
    at_start = machine()
    children: list[Child] = []
    with running(children):
        started, targets, setup = start(scratch, args)
        children.extend(started)
        gc.collect()
        gc.freeze()  # the client's own collections stay out of every target's tail
        result = asyncio.run(run(targets, args))
    summary = {
        "machine": at_start,
        "commit": git_commit(),
        "argv": sys.argv[1:],
        "setup": setup,
        "results": result,
    }
    path = write_result(args.tag, summary)
    print_report(summary)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
