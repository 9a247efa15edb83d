"""Overhead: what the proxy adds to a chat request, against direct calls, LiteLLM and Headroom.

    python -m tests.bench.overhead            # full run, about 10-15 minutes
    python -m tests.bench.overhead --quick    # about 2 minutes

A fast fake upstream runs in its own process (`tests.bench.fast_upstream`); one xun-proxy
process (`python -m proxy serve`, SQLite store) serves three of the targets; LiteLLM and
Headroom run from their own venvs. For each cell (history size x streaming x concurrency) the
same request bodies go to every target, interleaved: several rounds, each giving every target
a short time slice in a rotating order, so drifts in machine load hit all targets alike.

Targets:
  direct        the upstream itself (the physical limit of this client and upstream)
  xun-pass      xun-proxy, no session header (pass-through)
  xun-session   xun-proxy with a session header, below the threshold: fingerprints, state
                read and write, rebuild (one session per client worker, same history each turn)
  xun-compact   xun-proxy on a turn that compacts at level 1 (a fresh session per request,
                threshold set per request with x-xun-token-threshold; checked through the
                x-xun-compaction response header); 200-message histories only
  litellm       LiteLLM's proxy, a plain OpenAI pass-through to the same upstream
  headroom      Headroom's proxy (`headroom proxy --openai-api-url`), rate limit and cache off
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import ssl
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.bench import peers
from tests.bench.common import (
    Child,
    fast_upstream,
    git_commit,
    machine,
    percentile,
    print_header,
    rnd,
    run_dir,
    running,
    table,
    write_result,
    xun_proxy,
)
from tests.bench.histories import body, history

SIZES = {"2KB": (2 * 1024, 6), "50KB": (50 * 1024, 200), "800KB": (800 * 1024, 200)}
CONCURRENCY = (1, 16, 64)
TARGETS = ("direct", "xun-pass", "xun-session", "xun-compact", "litellm", "headroom")
SESSION_HEADER = "X-Session-Id"
UPSTREAM_KEY = "sk-bench"
MAX_PER_SLICE = 5000
REQUEST_TIMEOUT = 120.0
SLOW_GAP_MS = 150


@dataclass
class Target:
    name: str
    url: str
    key: str = UPSTREAM_KEY
    session: str | None = None  # "worker" or "request"
    error: str | None = None


@dataclass
class Samples:
    latency: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    errors: int = 0
    error_example: str | None = None
    wall: float = 0.0
    wrong_compaction: int = 0


def compaction_threshold(messages: list[dict[str, Any]]) -> int | None:
    """A per-request threshold at which this history compacts at level 1 and stops there.

    Computed with the proxy's own rebuild and estimates: above the projected size, and high
    enough that the estimate after reclaiming stays under ESCALATION_RATIO of it.
    """
    from proxy.compact import ESCALATION_RATIO
    from proxy.session.rebuild import rebuild

    rb = rebuild(messages, None)
    projected = rb.projected_tokens()
    conv = rb.conversation
    before = conv.estimated_message_length()
    if conv.compact_toolcall(keep_max=12).reclaimed_count == 0:
        return None
    after = projected * conv.estimated_message_length() / before
    threshold = int((projected + after / ESCALATION_RATIO) / 2)
    if not (after < ESCALATION_RATIO * threshold and threshold < projected):
        return None
    return threshold


def headers_for(target: Target, worker: int, cell: str, threshold: int | None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {target.key}", "content-type": "application/json"}
    if target.session == "worker":
        headers[SESSION_HEADER] = f"bench-{cell}-w{worker}"
    elif target.session == "request":
        headers[SESSION_HEADER] = f"bench-compact-{uuid.uuid4().hex}"
        headers["x-xun-token-threshold"] = str(threshold)
    return headers


async def one_request(
    client: httpx.AsyncClient, url: str, payload: bytes, headers: dict[str, str], stream: bool
) -> tuple[float, float | None, httpx.Headers]:
    start = time.perf_counter()
    first: float | None = None
    if stream:
        async with client.stream("POST", url, content=payload, headers=headers) as resp:
            async for chunk in resp.aiter_raw():
                if first is None and chunk:
                    first = time.perf_counter()
            status, resp_headers = resp.status_code, resp.headers
    else:
        resp = await client.post(url, content=payload, headers=headers)
        status, resp_headers = resp.status_code, resp.headers
    end = time.perf_counter()
    if status != 200:
        raise RuntimeError(f"HTTP {status}")
    ttfb = None if first is None else (first - start) * 1000
    return (end - start) * 1000, ttfb, resp_headers


async def run_slice(
    target: Target,
    payload: bytes,
    *,
    stream: bool,
    concurrency: int,
    seconds: float,
    cell: str,
    threshold: int | None,
    samples: Samples | None,
) -> None:
    """`concurrency` workers send `payload` for `seconds` (bounded count); record into samples."""
    url = target.url + "/v1/chat/completions"
    # One client (one connection) per worker: httpx's shared pool slows down sharply as
    # concurrency grows (pool bookkeeping per request), which would cap every target alike
    # and hide the differences. The clients share one SSL context: loopback is plain HTTP,
    # and building a context per client costs ~20 ms.
    clients = [
        httpx.AsyncClient(
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            timeout=httpx.Timeout(REQUEST_TIMEOUT),
            verify=ssl_context(),
        )
        for _ in range(concurrency)
    ]
    deadline = time.perf_counter() + seconds
    count = itertools.count()

    async def worker(w: int) -> None:
        client = clients[w]
        while time.perf_counter() < deadline and next(count) < MAX_PER_SLICE:
            headers = headers_for(target, w, cell, threshold)
            try:
                latency, ttfb, resp_headers = await one_request(
                    client, url, payload, headers, stream
                )
            except (httpx.HTTPError, RuntimeError) as exc:
                if samples is not None:
                    samples.errors += 1
                    samples.error_example = samples.error_example or repr(exc)[:300]
                await asyncio.sleep(0.05)  # a failing target must not spin
                continue
            if samples is None:
                continue
            samples.latency.append(latency)
            if ttfb is not None:
                samples.ttfb.append(ttfb)
            if target.session == "request" and resp_headers.get("x-xun-compaction") != "toolcall":
                samples.wrong_compaction += 1

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        if samples is not None:
            samples.wall += time.perf_counter() - started
    finally:
        for client in clients:
            await client.aclose()


@functools.cache
def ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def summarise(s: Samples) -> dict[str, Any]:
    n = len(s.latency)
    return {
        "n": n,
        "errors": s.errors,
        "error_example": s.error_example,
        "throughput_rps": rnd(n / s.wall if s.wall else None, 1),
        "p50_ms": rnd(percentile(s.latency, 50)),
        "p99_ms": rnd(percentile(s.latency, 99)),
        "ttfb_p50_ms": rnd(percentile(s.ttfb, 50)),
        "ttfb_p99_ms": rnd(percentile(s.ttfb, 99)),
        "wrong_compaction": s.wrong_compaction,
    }


def compare(cell: dict[str, dict[str, Any]]) -> None:
    """Add, per target, what it adds over direct and its throughput ratios."""
    direct = cell.get("direct") or {}
    for row in cell.values():
        if row.get("n", 0) == 0 or not direct.get("n"):
            continue
        for q in ("p50", "p99"):
            row[f"added_{q}_ms"] = rnd(row[f"{q}_ms"] - direct[f"{q}_ms"])
        if row.get("ttfb_p50_ms") is not None and direct.get("ttfb_p50_ms") is not None:
            row["added_ttfb_p50_ms"] = rnd(row["ttfb_p50_ms"] - direct["ttfb_p50_ms"])
            row["added_ttfb_p99_ms"] = rnd(row["ttfb_p99_ms"] - direct["ttfb_p99_ms"])
        if direct.get("throughput_rps"):
            row["throughput_vs_direct"] = rnd(row["throughput_rps"] / direct["throughput_rps"], 3)
    for name, row in cell.items():
        for peer in ("litellm", "headroom"):
            other = cell.get(peer) or {}
            if name == peer or not other.get("n") or not row.get("n"):
                continue
            if other.get("throughput_rps"):
                row[f"throughput_vs_{peer}"] = rnd(
                    row["throughput_rps"] / other["throughput_rps"], 2
                )
            mine, theirs = row.get("added_p50_ms"), other.get("added_p50_ms")
            if mine is not None and theirs:
                row[f"added_p50_share_of_{peer}"] = rnd(mine / theirs, 3)


async def buffering_check(targets: list[Target], payload: bytes) -> dict[str, Any]:
    """Stream one reply whose events the upstream spaces SLOW_GAP_MS apart: a relay that
    buffers delivers them together; one that does not keeps the spacing."""
    out: dict[str, Any] = {}
    headers_base = {"content-type": "application/json"}
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        for target in targets:
            if target.error:
                continue
            headers = {**headers_base, "authorization": f"Bearer {target.key}"}
            if target.session == "worker":
                headers[SESSION_HEADER] = "bench-buffering"
            arrivals: list[float] = []
            pending = b""
            start = time.perf_counter()
            try:
                url = target.url + "/v1/chat/completions"
                async with client.stream("POST", url, content=payload, headers=headers) as resp:
                    async for chunk in resp.aiter_raw():
                        pending += chunk
                        while b"\n\n" in pending:
                            event, pending = pending.split(b"\n\n", 1)
                            if b'"content"' in event and b'"content":""' not in event:
                                arrivals.append((time.perf_counter() - start) * 1000)
            except httpx.HTTPError as exc:
                out[target.name] = {"error": repr(exc)[:300]}
                continue
            spread = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
            expected = SLOW_GAP_MS * (len(arrivals) - 1)
            out[target.name] = {
                "content_events": len(arrivals),
                "first_ms": rnd(arrivals[0]) if arrivals else None,
                "spread_ms": rnd(spread),
                "expected_spread_ms": expected,
                "streams_unbuffered": bool(arrivals) and spread >= 0.8 * expected,
            }
    return out


def start_all(
    scratch: Path, args: argparse.Namespace
) -> tuple[list[Child], list[Target], dict[str, Any]]:
    upstream = fast_upstream(scratch)
    upstream.start()
    upstream.wait_ready("/health", timeout=20)
    children = [upstream]
    setup: dict[str, Any] = {}
    store = args.store or f"sqlite:///{scratch / 'xun.db'}"
    proxy = xun_proxy(
        "xun-proxy",
        upstream.url + "/v1",
        scratch,
        python=args.proxy_python or sys.executable,
        patches=args.patches,
        store=store,
        token_threshold=10**9,  # b and c stay below it; d sets its own per request
        # d measures a level-1 compaction on a fresh session. The default cost-aware strategy
        # rightly waits on a session with no history to amortise a rewrite over, so d pins
        # the seed's rules, which reclaim at once (b and c never reach a compaction).
        compactor="seed",
    )
    proxy.start()
    children.append(proxy)
    proxy.wait_ready("/healthz", timeout=30)
    setup["xun-proxy"] = {
        "ok": True,
        "store": store,
        "python": args.proxy_python or sys.executable,
        "patches": args.patches or None,
        "command": " ".join(proxy.argv),
    }
    targets = [
        Target("direct", upstream.url),
        Target("xun-pass", proxy.url),
        Target("xun-session", proxy.url, session="worker"),
        Target("xun-compact", proxy.url, session="request"),
    ]
    for spec in args.variant:
        # LABEL=PATCHES[@PYTHON]: another xun-proxy process, for experiments side by side.
        label, _, rest = spec.partition("=")
        patches, _, python = rest.partition("@")
        variant = xun_proxy(
            f"xun-{label}",
            upstream.url + "/v1",
            scratch,
            python=python or sys.executable,
            patches=patches,
            store=f"sqlite:///{scratch / f'xun-{label}.db'}",
            token_threshold=10**9,
            compactor="seed",
        )
        variant.start()
        children.append(variant)
        variant.wait_ready("/healthz", timeout=30)
        setup[f"xun-proxy[{label}]"] = {"ok": True, "command": " ".join(variant.argv)}
        targets.append(Target(f"xun-pass[{label}]", variant.url))
        targets.append(Target(f"xun-session[{label}]", variant.url, session="worker"))
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
        key = peers.LITELLM_KEY if name == "litellm" else UPSTREAM_KEY
        targets.append(Target(name, child.url, key=key))
        setup[name]["command"] = " ".join(child.argv)
    return children, targets, setup


async def measure(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    rounds, seconds = (1, 0.5) if args.quick else (args.rounds, args.seconds)
    sizes = [s for s in SIZES if s in args.sizes]
    for size in sizes:
        nbytes, n_messages = SIZES[size]
        messages = history(nbytes, n_messages)
        threshold = compaction_threshold(messages) if n_messages >= 200 else None
        for stream in (False, True):
            payload = orjson.dumps(body(messages, stream=stream))
            for conc in args.concurrency:
                key = f"{size}/{'stream' if stream else 'json'}/c{conc}"
                samples = {t.name: Samples() for t in targets}
                active = [t for t in targets if t.session != "request" or threshold]
                began = time.perf_counter()
                for r in range(rounds):
                    shift = r % len(active)
                    for target in active[shift:] + active[:shift]:
                        common = {"stream": stream, "concurrency": conc, "cell": key}
                        if r == 0:  # warm-up, not recorded
                            await run_slice(
                                target,
                                payload,
                                seconds=0.2,
                                threshold=threshold,
                                samples=None,
                                **common,
                            )
                        await run_slice(
                            target,
                            payload,
                            seconds=seconds,
                            threshold=threshold,
                            samples=samples[target.name],
                            **common,
                        )
                cell = {t.name: summarise(samples[t.name]) for t in active}
                compare(cell)
                cells[key] = {
                    "size": size,
                    "bytes": len(payload),
                    "messages": n_messages,
                    "stream": stream,
                    "concurrency": conc,
                    "compact_threshold": threshold,
                    "targets": cell,
                }
                took = time.perf_counter() - began
                print(f"{key}: {took:.1f}s  " + cell_line(cell), flush=True)
    return cells


def cell_line(cell: dict[str, Any]) -> str:
    parts = []
    for name, row in cell.items():
        parts.append(f"{name} {row.get('throughput_rps')}/s p50 {row.get('p50_ms')}")
    return "; ".join(parts)


def targets_check(cells: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and met / missed."""
    checks: list[dict[str, Any]] = []

    def get(size: str, stream: bool, conc: int, target: str, field_: str) -> Any:
        cell = cells.get(f"{size}/{'stream' if stream else 'json'}/c{conc}")
        return ((cell or {}).get("targets", {}).get(target) or {}).get(field_)

    added = get("50KB", False, 1, "xun-session", "added_p50_ms")
    checks.append(
        {
            "target": "compacting path (c) adds <= 2 ms p50 over direct, 50 KB, concurrency 1",
            "value": added,
            "met": added is not None and added <= 2.0,
        }
    )
    for conc in CONCURRENCY:
        for stream in (False, True):
            share = get("50KB", stream, conc, "xun-session", "added_p50_share_of_litellm")
            mode = "stream" if stream else "json"
            checks.append(
                {
                    "target": f"(c) adds <= 1/3 of LiteLLM's added p50, 50 KB, {mode}, c={conc}",
                    "value": share,
                    "met": share is not None and share <= 1 / 3,
                }
            )
    for conc in (16, 64):
        for size in SIZES:
            ratio = get(size, False, conc, "xun-session", "throughput_vs_litellm")
            checks.append(
                {
                    "target": f"(c) throughput >= 3x LiteLLM's, {size}, json, c={conc}",
                    "value": ratio,
                    "met": ratio is not None and ratio >= 3,
                }
            )
    for target in ("xun-pass", "xun-session"):
        ttfb = get("50KB", True, 1, target, "added_ttfb_p50_ms")
        checks.append(
            {
                "target": f"streaming: {target} adds <= 2 ms to TTFB p50, 50 KB, c=1",
                "value": ttfb,
                "met": ttfb is not None and ttfb <= 2.0,
            }
        )
    return checks


def print_tables(result: dict[str, Any]) -> None:
    print_header("Overhead: added latency over direct (ms) and throughput (req/s)")
    rows = []
    for key, cell in result["cells"].items():
        for name, row in cell["targets"].items():
            rows.append(
                [
                    key,
                    name,
                    row.get("n"),
                    row.get("errors"),
                    row.get("throughput_rps"),
                    row.get("throughput_vs_direct"),
                    row.get("p50_ms"),
                    row.get("p99_ms"),
                    row.get("added_p50_ms"),
                    row.get("added_p99_ms"),
                    row.get("added_ttfb_p50_ms"),
                ]
            )
    heads = ["cell", "target", "n", "err", "req/s", "x direct", "p50", "p99", "+p50", "+p99"]
    print(table([*heads, "+TTFB p50"], rows))
    print_header("Targets")
    print(
        table(
            ["target", "value", "met"],
            [[c["target"], c["value"], c["met"]] for c in result["checks"]],
        )
    )
    print_header(f"Streaming without buffering (events spaced {SLOW_GAP_MS} ms by the upstream)")
    buf = result.get("buffering") or {}
    print(
        table(
            ["target", "content events", "first (ms)", "spread (ms)", "expected", "unbuffered"],
            [
                [
                    k,
                    v.get("content_events"),
                    v.get("first_ms"),
                    v.get("spread_ms"),
                    v.get("expected_spread_ms"),
                    v.get("streams_unbuffered", v.get("error")),
                ]
                for k, v in buf.items()
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="xun-proxy overhead benchmark")
    parser.add_argument("--quick", action="store_true", help="one short round per cell (~2 min)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell")
    parser.add_argument("--seconds", type=float, default=1.0, help="time slice per target")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--concurrency", nargs="+", type=int, default=list(CONCURRENCY))
    parser.add_argument("--skip", nargs="*", default=[], choices=["litellm", "headroom"])
    parser.add_argument("--no-install", action="store_true", help="do not pip-install peers")
    parser.add_argument("--store", help="xun-proxy store URL (default: SQLite in a temp dir)")
    parser.add_argument("--proxy-python", help="interpreter for xun-proxy (experiments)")
    parser.add_argument(
        "--patches", default="", help="experimental hot-path patches (tests.bench.patched)"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=PATCHES[@PYTHON]",
        help="also run another xun-proxy (patches from tests.bench.patched and/or another "
        "interpreter) as targets xun-pass[LABEL] and xun-session[LABEL]; repeatable",
    )
    parser.add_argument("--tag", default="", help="suffix of the result file (experiments)")
    args = parser.parse_args(argv)
    scratch = run_dir("overhead")
    started = time.time()
    info = {"machine": machine(), "commit": git_commit(), "argv": sys.argv[1:]}
    children, targets, setup = start_all(scratch, args)
    with running(children):
        cells = asyncio.run(measure(targets, args))
        slow = orjson.dumps(
            body(history(*SIZES["50KB"]), stream=True, user=f"bench-slow-{SLOW_GAP_MS}")
        )
        buffering = asyncio.run(
            buffering_check([t for t in targets if t.session != "request"], slow)
        )
        rss = {c.name: c.rss_mib() for c in children}
    if "headroom" in setup and setup["headroom"].get("ok"):
        setup["headroom"]["notes"] = peers.headroom_notes(scratch)
    result = {
        **info,
        "mode": "quick" if args.quick else "full",
        "seconds": round(time.time() - started, 1),
        "setup": setup,
        "rss_mib_at_end": rss,
        "cells": cells,
        "buffering": buffering,
        "scratch": str(scratch),
    }
    result["checks"] = targets_check(cells)
    print_tables(result)
    name = "overhead" + (f"-{args.tag}" if args.tag else "") + ("-quick" if args.quick else "")
    path = write_result(name, result)
    print(f"\nwrote {path} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
