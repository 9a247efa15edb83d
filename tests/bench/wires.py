"""The three wire formats side by side, and one session under concurrency, in one run.

    python -m tests.bench.wires             # about 4 minutes
    python -m tests.bench.wires --quick     # about 1 minute
    python -m tests.bench.wires --full --compare before=../other-checkout   # ~7 minutes

`--full` adds streams at 16 connections; `--compare LABEL=DIR` runs the proxy of another
checkout (DIR holds its `proxy/` package) beside this one, as `WIRE/session[LABEL]`,
`shared[LABEL]` and `shared-over[LABEL]`, so a change is measured against its baseline in
the same run.

One fast fake upstream (`tests.bench.fast_upstream`, which answers Chat Completions,
Responses and Messages at once) and one xun-proxy process (`python -m proxy serve`, SQLite
store, its Anthropic upstream the same fake server). Every cell sends the same request bodies
to each of its targets, interleaved as in `overhead.py` (several rounds, each giving every
target a short slice in a rotating order), so drifts in machine load hit all alike.

Part 1, per wire (`chat` = POST /v1/chat/completions, `responses` = POST /v1/responses,
stateless, `messages` = POST /v1/messages), 50 KB history (`tests.bench.histories`):

  WIRE/direct    the fake upstream itself, same path
  WIRE/pass      xun-proxy without a session header (pass-through)
  WIRE/session   xun-proxy with the session header the wire's agents send (X-Session-Id,
                 Codex's session_id, Claude Code's x-claude-code-session-id), below the
                 threshold: the compacting path (parse, neutral messages, fingerprints, state
                 read and write); one session per client worker, the same history each turn

measured as JSON at concurrency 1 (added p50 / p90), streamed at concurrency 1 (added time to
the first byte), and JSON at concurrency 16 (throughput against direct).

Part 2, one session under concurrency (issue 16), Chat Completions, 50 KB, JSON, c=16:

  direct          the upstream
  per-worker      one session per client worker (16 sessions), below the threshold
  shared          one session for all 16 workers, below the threshold
  per-worker-over one session per worker, over its threshold (x-xun-token-threshold), where
                  the cost-aware strategy declines to compact (see PRICE below)
  shared-over     one session for all 16 workers, over the threshold, declining likewise

The proxy runs the default cost-aware strategy told that cached prompt tokens cost nothing
(`XUN_CACHE_READ_FACTORS='{"": 0}'`): removing tokens from a fully cached prompt then saves
nothing, so every turn over the threshold weighs a compaction and waits (no rewrite is worth
paying), which is the state issue 16 asks about. Every answer of an `-over` target is checked
to say `x-xun-compaction: none`. The proxy's own JSON access log gives, per target, its time
(`proxy_ms`, the request's time minus the upstream's) and how the compaction lease went.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.bench.common import (
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
from tests.bench.cpu import cpu_seconds
from tests.bench.histories import body, history, messages_body, responses_body
from tests.bench.overhead import REQUEST_TIMEOUT, one_request, ssl_context

SIZE = (50 * 1024, 200)  # bytes, messages (Chat Completions; see histories._sized)
MAX_PER_SLICE = 5000
OVER_THRESHOLD = 500  # below the fake upstream's 1,005 tokens of usage: every turn is over
PRICE = '{"": 0.0}'  # cache-read factor for every model: see the module docstring
WIRES = ("chat", "responses", "messages")
SHARED_TARGETS = ("direct", "per-worker", "shared", "per-worker-over", "shared-over")
SLOW_GAP_MS = 150


@dataclass(frozen=True)
class WireSpec:
    name: str
    path: str
    session_header: str
    build: Callable[..., dict[str, Any]]
    auth: dict[str, str]


def _chat(nbytes: int, n: int, *, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return body(history(nbytes, n), stream=stream, **extra)


SPECS = {
    "chat": WireSpec(
        "chat",
        "/v1/chat/completions",
        "X-Session-Id",
        _chat,
        {"authorization": "Bearer sk-bench"},
    ),
    "responses": WireSpec(
        "responses",
        "/v1/responses",
        "session_id",
        responses_body,
        {"authorization": "Bearer sk-bench"},
    ),
    "messages": WireSpec(
        "messages",
        "/v1/messages",
        "x-claude-code-session-id",
        messages_body,
        {
            "x-api-key": "sk-ant-bench",
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "interleaved-thinking-2025-05-14",
        },
    ),
}


class ProxyLog:
    """New JSON access-log lines of the proxy since the last read (slices run one at a time,
    so the lines read after a slice are that slice's), and the proxy process's CPU time."""

    def __init__(self, path: Path, pid: int) -> None:
        self.path = path
        self.pid = pid
        self.offset = path.stat().st_size if path.exists() else 0

    def cpu(self) -> float:
        """CPU seconds (user + system) the proxy has used so far."""
        return sum(cpu_seconds(self.pid))

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        lines = []
        for line in data[:end].splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                record = orjson.loads(line)
                if isinstance(record, dict) and record.get("msg") == "request":
                    lines.append(record)
        return lines


@dataclass
class Target:
    name: str
    url: str
    spec: WireSpec
    session: str | None = None  # None, "worker" or "shared"
    threshold: int | None = None  # x-xun-token-threshold
    expect_compaction: str | None = None  # checked on every answer when set
    watch: ProxyLog | None = None  # the proxy process behind it (access log, CPU time)

    def headers(self, worker: int, run: str) -> dict[str, str]:
        headers = {**self.spec.auth, "content-type": "application/json"}
        if self.session == "worker":
            headers[self.spec.session_header] = f"{run}-{self.name}-w{worker}"
        elif self.session == "shared":
            headers[self.spec.session_header] = f"{run}-{self.name}"
        if self.threshold is not None:
            headers["x-xun-token-threshold"] = str(self.threshold)
        return headers


@dataclass
class Samples:
    latency: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    errors: int = 0
    error_example: str | None = None
    wall: float = 0.0
    cpu: float = 0.0  # the proxy's CPU seconds during the recorded slices
    unexpected: Counter[str] = field(default_factory=Counter)
    log: list[dict[str, Any]] = field(default_factory=list)


async def run_slice(
    target: Target,
    payload: bytes,
    *,
    stream: bool,
    concurrency: int,
    seconds: float,
    run: str,
    samples: Samples | None,
) -> None:
    """`concurrency` workers, one connection each, send `payload` for `seconds`."""
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
        headers = target.headers(w, run)
        while time.perf_counter() < deadline and next(count) < MAX_PER_SLICE:
            try:
                latency, ttfb, resp_headers = await one_request(
                    client, target.url, payload, headers, stream
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
            if target.expect_compaction is not None:
                seen = resp_headers.get("x-xun-compaction")
                if seen != target.expect_compaction:
                    samples.unexpected[str(seen)] += 1

    log = target.watch
    try:
        if log is not None:
            log.read()  # skip what came before (a warm-up, another target)
        cpu = log.cpu() if log is not None else 0.0
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        if samples is not None:
            samples.wall += time.perf_counter() - started
            if log is not None:
                samples.cpu += log.cpu() - cpu
                await asyncio.sleep(0.02)  # the last answers' log lines
                samples.log.extend(log.read())
    finally:
        for client in clients:
            await client.aclose()


def summarise(s: Samples) -> dict[str, Any]:
    n = len(s.latency)
    out: dict[str, Any] = {
        "n": n,
        "errors": s.errors,
        "error_example": s.error_example,
        "throughput_rps": rnd(n / s.wall if s.wall else None, 1),
        "p50_ms": rnd(percentile(s.latency, 50)),
        "p90_ms": rnd(percentile(s.latency, 90)),
        "p99_ms": rnd(percentile(s.latency, 99)),
        "ttfb_p50_ms": rnd(percentile(s.ttfb, 50)),
        "ttfb_p90_ms": rnd(percentile(s.ttfb, 90)),
    }
    if s.unexpected:
        out["unexpected_compaction"] = dict(s.unexpected)
    if s.cpu and n:
        out["proxy_cpu_ms_per_request"] = rnd(1000 * s.cpu / n)
    if s.log:
        proxy_ms = [r["proxy_ms"] for r in s.log if isinstance(r.get("proxy_ms"), int | float)]
        out["log_lines"] = len(s.log)
        out["proxy_ms_p50"] = rnd(percentile(proxy_ms, 50))
        out["proxy_ms_p90"] = rnd(percentile(proxy_ms, 90))
        for key in ("lease", "degraded", "compaction", "wire"):
            tally = Counter(str(r.get(key)) for r in s.log if key in r)
            if tally:
                out[key] = dict(tally)
    return out


def compare(cell: dict[str, dict[str, Any]], direct_of: Callable[[str], str]) -> None:
    """What each target adds over its own direct target, and its throughput ratio."""
    for name, row in cell.items():
        direct = cell.get(direct_of(name)) or {}
        if name == direct_of(name) or not row.get("n") or not direct.get("n"):
            continue
        for q in ("p50", "p90", "p99"):
            row[f"added_{q}_ms"] = rnd(row[f"{q}_ms"] - direct[f"{q}_ms"])
        for q in ("p50", "p90"):
            mine, theirs = row.get(f"ttfb_{q}_ms"), direct.get(f"ttfb_{q}_ms")
            if mine is not None and theirs is not None:
                row[f"added_ttfb_{q}_ms"] = rnd(mine - theirs)
        if direct.get("throughput_rps"):
            row["throughput_vs_direct"] = rnd(row["throughput_rps"] / direct["throughput_rps"], 3)


async def measure_cell(
    targets: list[Target],
    payloads: dict[str, bytes],
    *,
    stream: bool,
    concurrency: int,
    rounds: int,
    seconds: float,
    run: str,
) -> dict[str, dict[str, Any]]:
    samples = {t.name: Samples() for t in targets}
    for r in range(rounds):
        shift = r % len(targets)
        for target in targets[shift:] + targets[:shift]:
            payload = payloads[target.spec.name]
            common = {"stream": stream, "concurrency": concurrency, "run": run}
            if r == 0:  # warm-up, not recorded
                await run_slice(target, payload, seconds=0.2, samples=None, **common)
            await run_slice(
                target, payload, seconds=seconds, samples=samples[target.name], **common
            )
    return {t.name: summarise(samples[t.name]) for t in targets}


def wire_targets(upstream: str, proxy: str, log: ProxyLog, others: list[Other]) -> list[Target]:
    targets = []
    for wire in WIRES:
        spec = SPECS[wire]
        targets.append(Target(f"{wire}/direct", upstream + spec.path, spec))
        targets.append(Target(f"{wire}/pass", proxy + spec.path, spec, watch=log))
        targets.append(
            Target(
                f"{wire}/session",
                proxy + spec.path,
                spec,
                session="worker",
                expect_compaction="none",
                watch=log,
            )
        )
        for other in others:
            targets.append(
                Target(
                    f"{wire}/session[{other.label}]",
                    other.url + spec.path,
                    spec,
                    session="worker",
                    expect_compaction="none",
                    watch=other.log,
                )
            )
    return targets


@dataclass
class Other:
    """Another checkout's proxy, run beside this one (`--compare LABEL=DIR`)."""

    label: str
    url: str
    log: ProxyLog


def shared_targets(
    upstream: str, proxy: str, log: ProxyLog, wire: str, others: list[Other]
) -> list[Target]:
    spec = SPECS[wire]
    url = proxy + spec.path
    targets = [
        Target("direct", upstream + spec.path, spec),
        Target("per-worker", url, spec, session="worker", expect_compaction="none", watch=log),
        Target("shared", url, spec, session="shared", expect_compaction="none", watch=log),
    ]
    over = {"expect_compaction": "none", "threshold": OVER_THRESHOLD}
    targets += [
        Target("per-worker-over", url, spec, session="worker", watch=log, **over),  # type: ignore[arg-type]
        Target("shared-over", url, spec, session="shared", watch=log, **over),  # type: ignore[arg-type]
    ]
    for other in others:
        where = other.url + spec.path
        targets += [
            Target(
                f"shared[{other.label}]",
                where,
                spec,
                session="shared",
                expect_compaction="none",
                watch=other.log,
            ),
            Target(
                f"shared-over[{other.label}]",
                where,
                spec,
                session="shared",
                watch=other.log,
                **over,  # type: ignore[arg-type]
            ),
        ]
    return targets


async def buffering_check(targets: list[Target], run: str) -> dict[str, Any]:
    """A stream whose events the upstream spaces SLOW_GAP_MS apart, through each target: a
    relay that buffers delivers them together, one that does not keeps the spacing."""
    marks = {
        "chat": b'"content":"',
        "responses": b"response.output_text.delta",
        "messages": b'"text_delta"',
    }
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        for target in targets:
            spec = target.spec
            slow = {"user": f"bench-slow-{SLOW_GAP_MS}"}
            if spec.name == "messages":
                slow = {"metadata": {"user_id": f"bench-slow-{SLOW_GAP_MS}"}}
            payload = orjson.dumps(spec.build(*SIZE, stream=True, **slow))
            arrivals: list[float] = []
            pending = b""
            start = time.perf_counter()
            try:
                headers = target.headers(0, run + "-buffering")
                async with client.stream("POST", target.url, content=payload, headers=headers) as r:
                    async for chunk in r.aiter_raw():
                        pending += chunk
                        while b"\n\n" in pending:
                            event, pending = pending.split(b"\n\n", 1)
                            if marks[spec.name] in event and b'"content":""' not in event:
                                arrivals.append((time.perf_counter() - start) * 1000)
            except httpx.HTTPError as exc:
                out[target.name] = {"error": repr(exc)[:300]}
                continue
            spread = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
            expected = SLOW_GAP_MS * (len(arrivals) - 1)
            out[target.name] = {
                "content_events": len(arrivals),
                "spread_ms": rnd(spread),
                "expected_spread_ms": expected,
                "streams_unbuffered": bool(arrivals) and spread >= 0.8 * expected,
            }
    return out


async def measure(
    upstream: str, proxy: str, log: ProxyLog, others: list[Other], args: argparse.Namespace
) -> Any:
    rounds, seconds = (1, 0.5) if args.quick else (args.rounds, args.seconds)
    run = f"r{int(time.time())}"
    payloads = {
        stream: {w: orjson.dumps(SPECS[w].build(*SIZE, stream=stream)) for w in WIRES}
        for stream in (False, True)
    }
    sizes = {
        w: {
            "bytes": len(payloads[False][w]),
            "messages": len(_neutral(w, orjson.loads(payloads[False][w]))),
        }
        for w in WIRES
    }
    targets = wire_targets(upstream, proxy, log, others)
    cells: dict[str, Any] = {}

    def direct_of(name: str) -> str:
        return name.split("/")[0] + "/direct"

    for stream, conc in [(False, 1), (True, 1), (False, 16), *([(True, 16)] if args.full else [])]:
        key = f"{'stream' if stream else 'json'}/c{conc}"
        began = time.perf_counter()
        cell = await measure_cell(
            targets,
            payloads[stream],
            stream=stream,
            concurrency=conc,
            rounds=rounds,
            seconds=seconds,
            run=run,
        )
        compare(cell, direct_of)
        cells[key] = {"stream": stream, "concurrency": conc, "targets": cell}
        print(f"{key}: {time.perf_counter() - began:.1f}s  {line(cell)}", flush=True)
    shared: dict[str, Any] = {}
    for wire in args.shared_wires:
        began = time.perf_counter()
        cell = await measure_cell(
            shared_targets(upstream, proxy, log, wire, others),
            payloads[False],
            stream=False,
            concurrency=16,
            rounds=rounds,
            seconds=seconds,
            run=run,
        )
        compare(cell, lambda _: "direct")
        shared[wire] = {"stream": False, "concurrency": 16, "targets": cell}
        print(f"one session, {wire}: {time.perf_counter() - began:.1f}s  {line(cell)}", flush=True)
    buffering = await buffering_check([t for t in targets if t.session != "shared"], run)
    return sizes, cells, shared, buffering


def _neutral(wire: str, data: dict[str, Any]) -> list[Any]:
    from proxy.wire.chat.adapter import ChatWire
    from proxy.wire.messages.adapter import MessagesWire
    from proxy.wire.responses.adapter import ResponsesWire

    adapter = {"chat": ChatWire, "responses": ResponsesWire, "messages": MessagesWire}[wire]()
    return adapter.messages(data)


def line(cell: dict[str, Any]) -> str:
    return "; ".join(
        f"{name} {row.get('throughput_rps')}/s p50 {row.get('p50_ms')}"
        for name, row in cell.items()
    )


def targets_check(cells: dict[str, Any], shared: dict[str, Any]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []

    def get(key: str, target: str, field_: str) -> Any:
        return ((cells.get(key) or {}).get("targets", {}).get(target) or {}).get(field_)

    for wire in WIRES:
        added = get("json/c1", f"{wire}/session", "added_p50_ms")
        checks.append(
            {
                "target": f"{wire}: compacting path adds <= 2 ms p50 over direct, 50 KB, c=1",
                "value": added,
                "met": added is not None and added <= 2.0,
            }
        )
    chat = get("json/c1", "chat/session", "added_p50_ms")
    for wire in WIRES[1:]:
        mine = get("json/c1", f"{wire}/session", "added_p50_ms")
        diff = None if mine is None or chat is None else rnd(mine - chat)
        checks.append(
            {
                "target": f"{wire}: added p50 within 0.5 ms of chat's, 50 KB, c=1",
                "value": diff,
                "met": diff is not None and diff <= 0.5,
            }
        )
    for wire, data in shared.items():
        for name in ("shared", "shared-over"):
            ratio = (data["targets"].get(name) or {}).get("throughput_vs_direct")
            checks.append(
                {
                    "target": f"one session ({name}), {wire}, c=16: throughput >= 0.5x direct",
                    "value": ratio,
                    "met": ratio is not None and ratio >= 0.5,
                }
            )
    return checks


def _rows(groups: dict[str, Any], fields: list[str]) -> list[list[Any]]:
    """One row per target of each group (a cell, or a wire): the group, the target, `fields`."""
    return [
        [group, name, *(r.get(f) for f in fields)]
        for group, data in groups.items()
        for name, r in data["targets"].items()
    ]


def print_tables(result: dict[str, Any]) -> None:
    print_header("Wires: added latency over direct (ms) and throughput (req/s)")
    fields = ["n", "errors", "throughput_rps", "throughput_vs_direct", "p50_ms", "added_p50_ms"]
    rows = _rows(
        result["cells"],
        [*fields, "added_p90_ms", "added_ttfb_p50_ms", "proxy_ms_p50", "proxy_cpu_ms_per_request"],
    )
    heads = ["cell", "target", "n", "err", "req/s", "x direct", "p50", "+p50", "+p90"]
    print(table([*heads, "+TTFB p50", "proxy_ms p50", "CPU ms/req"], rows))
    print_header("One session under concurrency (c=16, JSON)")
    rows = _rows(
        result["shared"],
        [*fields, "proxy_ms_p50", "proxy_cpu_ms_per_request", "lease", "unexpected_compaction"],
    )
    heads = ["wire", "target", "n", "err", "req/s", "x direct", "p50", "+p50", "proxy_ms p50"]
    print(table([*heads, "CPU ms/req", "lease", "unexpected"], rows))
    print_header("Targets")
    print(
        table(
            ["target", "value", "met"],
            [[c["target"], c["value"], c["met"]] for c in result["checks"]],
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="xun-proxy: the three wires side by side")
    parser.add_argument("--quick", action="store_true", help="one short round per cell")
    parser.add_argument("--full", action="store_true", help="also streamed at c=16")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per cell")
    parser.add_argument("--seconds", type=float, default=1.0, help="time slice per target")
    parser.add_argument(
        "--shared-wires",
        nargs="*",
        default=["chat"],
        choices=list(WIRES),
        help="wires measured with one session under concurrency (part 2)",
    )
    parser.add_argument("--store", help="xun-proxy store URL (default: SQLite in a temp dir)")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also run the proxy of another checkout (e.g. a worktree of an earlier commit) "
        "as targets WIRE/session[LABEL] in part 1 and shared[LABEL], shared-over[LABEL] in "
        "part 2; repeatable",
    )
    parser.add_argument("--tag", default="", help="suffix of the result file")
    args = parser.parse_args(argv)
    scratch = run_dir("wires")
    started = time.time()
    info = {"machine": machine(), "commit": git_commit(), "argv": argv or []}
    upstream = fast_upstream(scratch)
    upstream.start()
    children = [upstream]
    compared: dict[str, Any] = {}
    with running(children):
        upstream.wait_ready("/health", timeout=20)
        store = args.store or f"sqlite:///{scratch / 'xun.db'}"
        proxy = xun_proxy(
            "xun-proxy",
            upstream.url + "/v1",
            scratch,
            store=store,
            anthropic_upstream=upstream.url,
            token_threshold=10**9,  # part 1 and the -below targets never reach it
        )
        proxy.env["XUN_CACHE_READ_FACTORS"] = PRICE
        proxy.start()
        children.append(proxy)
        proxy.wait_ready("/healthz", timeout=30)
        assert proxy.proc is not None
        log = ProxyLog(proxy.log, proxy.proc.pid)
        others = []
        for spec in args.compare:
            label, _, where = spec.partition("=")
            directory = Path(where).expanduser().resolve()
            other = xun_proxy(
                f"xun-{label}",
                upstream.url + "/v1",
                scratch,
                store=f"sqlite:///{scratch / f'xun-{label}.db'}",
                anthropic_upstream=upstream.url,
                token_threshold=10**9,
            )
            # `python -m proxy` from that checkout: its directory first on the path.
            other.cwd = directory
            other.env.update(PYTHONPATH=str(directory), XUN_CACHE_READ_FACTORS=PRICE)
            other.start()
            children.append(other)
            other.wait_ready("/healthz", timeout=30)
            assert other.proc is not None
            others.append(Other(label, other.url, ProxyLog(other.log, other.proc.pid)))
            compared[label] = {"dir": str(directory), "commit": git_commit(directory)}
        sizes, cells, shared, buffering = asyncio.run(
            measure(upstream.url, proxy.url, log, others, args)
        )
        rss = {c.name: c.rss_mib() for c in children}
    result: dict[str, Any] = {
        **info,
        "mode": "quick" if args.quick else "full" if args.full else "default",
        "seconds": round(time.time() - started, 1),
        "command": " ".join(proxy.argv),
        "env": {"XUN_CACHE_READ_FACTORS": PRICE},
        "compared": compared,
        "over_threshold": OVER_THRESHOLD,
        "sizes": sizes,
        "rss_mib_at_end": rss,
        "cells": cells,
        "shared": shared,
        "buffering": buffering,
        "scratch": str(scratch),
    }
    result["checks"] = targets_check(cells, shared)
    print_tables(result)
    name = "wires" + (f"-{args.tag}" if args.tag else "") + ("-quick" if args.quick else "")
    path = write_result(name, result)
    print(f"\nwrote {path} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
