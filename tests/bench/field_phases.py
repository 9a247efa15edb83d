"""The phases of `tests.bench.field`, each measured on every target in turn, in rounds that
rotate the order, so that load on the shared machine hits all of them alike."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.bench.common import LOOPBACK, Child, percentile, print_header, rnd, table
from tests.bench.histories import body, history
from tests.bench.rawhttp import Connection, HTTPError

PATH = "/v1/chat/completions"
SESSION_HEADER = "x-session-id"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
GROW_SIZES = {"50KB": (50 * 1024, 200), "400KB": (400 * 1024, 400), "4MB": (4 * 2**20, 1000)}
TOKEN = re.compile(rb" tok(\d+)")


@dataclass
class Target:
    name: str
    child: Child
    upstream: Child
    key: str = "sk-bench"
    session: bool = False  # send a session header (xun-proxy's compacting path)
    peer: bool = False

    def headers(self, session: str) -> dict[str, str]:
        out = {"authorization": f"Bearer {self.key}", "content-type": "application/json"}
        if self.session:
            out[SESSION_HEADER] = session
        return out

    def connection(self) -> Connection:
        return Connection(LOOPBACK, self.child.port)


def _group(pid: int) -> list[int]:
    """The pids of the process group a benchmark child leads (its workers included)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == pid:  # the session id: children start in a session of their own
            pids.append(int(entry))
    return pids


def cpu_s(target: Target) -> float:
    """User + system seconds of the target's processes (direct: the upstream's)."""
    assert target.child.proc is not None
    total = 0.0
    for pid in _group(target.child.proc.pid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def memory_of(target: Target) -> float | None:
    """Resident MiB of the target's processes together."""
    if target.child.proc is None:
        return None
    total = 0
    for pid in _group(target.child.proc.pid):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return round(total / 2**20, 1)


def rotated(targets: list[Target], n: int) -> list[Target]:
    k = n % len(targets)
    return targets[k:] + targets[:k]


def _quiet() -> None:
    """Before a timed slice: the client's garbage now, not during it."""
    gc.collect()
    gc.disable()


async def latency_c1(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    """Concurrency 1, a 50 KB history, the same body every request (one session a target)."""
    payload = orjson.dumps(body(history(50 * 1024, 200)))
    conns = {t.name: t.connection() for t in targets}
    lat: dict[str, list[float]] = {t.name: [] for t in targets}
    p99s: dict[str, list[float]] = {t.name: [] for t in targets}
    errors: dict[str, int] = {t.name: 0 for t in targets}
    for t in targets:  # warm up: connections, caches, the session's first (cold) turn
        for _ in range(10):
            await conns[t.name].post(PATH, payload, t.headers("field-c1"))
    cpu = {t.name: cpu_s(t) for t in targets}
    # Request by request, every target in turn: a burst of load on the shared machine then
    # hits every target's samples alike (slices of 300 requests would give the fast direct
    # upstream a 30 ms slice and the proxy a 400 ms one, and bursts mostly the proxy's).
    for r in range(args.rounds):
        order = rotated(targets, r)
        times: dict[str, list[float]] = {t.name: [] for t in targets}
        _quiet()
        try:
            for i in range(args.requests):
                for t in order:
                    if t.peer and i >= args.peer_requests:
                        continue
                    start = time.perf_counter()
                    try:
                        answer = await conns[t.name].post(PATH, payload, t.headers("field-c1"))
                    except (TimeoutError, HTTPError, OSError):
                        errors[t.name] += 1
                        continue
                    if answer.status != 200:
                        errors[t.name] += 1
                        continue
                    times[t.name].append((time.perf_counter() - start) * 1000)
        finally:
            gc.enable()
        for t in targets:
            lat[t.name] += times[t.name]
            p99s[t.name].append(percentile(times[t.name], 99) or 0.0)
    cpu = {t.name: cpu_s(t) - cpu[t.name] for t in targets}
    for c in conns.values():
        await c.close()
    return {
        t.name: {
            "n": len(lat[t.name]),
            "errors": errors[t.name],
            "cpu_us": round(cpu[t.name] / max(1, len(lat[t.name]) + errors[t.name]) * 1e6),
            "p50": rnd(percentile(lat[t.name], 50), 3),
            "p99": rnd(percentile(lat[t.name], 99), 3),
            "round_p99": [rnd(v, 2) for v in p99s[t.name]],
        }
        for t in targets
    }


async def _load(
    t: Target, payload: bytes, concurrency: int, *, seconds: float = 0.0, count: int = 0
) -> tuple[int, int, float]:
    """`concurrency` workers for `seconds` or until `count` requests: (done, errors, wall)."""
    conns = [t.connection() for _ in range(concurrency)]
    done = errors = 0
    started = time.perf_counter()
    deadline = started + seconds if seconds else float("inf")

    async def worker(w: int) -> None:
        nonlocal done, errors
        headers = t.headers(f"field-load-w{w}")
        while time.perf_counter() < deadline and (not count or done + errors < count):
            try:
                answer = await conns[w].post(PATH, payload, headers)
                ok = answer.status == 200
            except (TimeoutError, HTTPError, OSError):
                ok = False
            if ok:
                done += 1
            else:
                errors += 1
                await asyncio.sleep(0.05)

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        for c in conns:
            await c.close()
    return done, errors, time.perf_counter() - started


async def _sample_memory(t: Target, peak: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak.append(memory_of(t) or 0.0)
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except TimeoutError:
            pass


async def throughput(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    """Requests a second at concurrency 16 (peak memory meanwhile); CPU a request at 8."""
    payload = orjson.dumps(body(history(50 * 1024, 200)))
    rates: dict[str, list[float]] = {t.name: [] for t in targets}
    cpu: dict[str, list[float]] = {t.name: [] for t in targets}
    peak: dict[str, list[float]] = {t.name: [] for t in targets}
    errors: dict[str, int] = {t.name: 0 for t in targets}
    for t in targets:
        await _load(t, payload, 16, count=64)  # warm: every worker's session exists
    for r in range(max(2, args.rounds // 2)):
        for t in rotated(targets, r):
            stop = asyncio.Event()
            sampler = asyncio.create_task(_sample_memory(t, peak[t.name], stop))
            done, errs, wall = await _load(t, payload, 16, seconds=args.seconds)
            stop.set()
            await sampler
            rates[t.name].append(done / wall)
            errors[t.name] += errs
            n = 80 if t.peer else 400
            before = cpu_s(t)
            done, errs, wall = await _load(t, payload, 8, count=n)
            cpu[t.name].append((cpu_s(t) - before) * 1e6 / max(1, done))
            errors[t.name] += errs
    return {
        t.name: {
            "rps": rnd(statistics.median(rates[t.name]), 1),
            "rps_range": [rnd(min(rates[t.name]), 1), rnd(max(rates[t.name]), 1)],
            "cpu_us": rnd(statistics.median(cpu[t.name]), 0),
            "cpu_us_range": [rnd(min(cpu[t.name]), 0), rnd(max(cpu[t.name]), 0)],
            "memory_load_mib": max(peak[t.name]) if peak[t.name] else None,
            "errors": errors[t.name],
        }
        for t in targets
    }


async def _one_stream(
    t: Target, payload: bytes, session: str, chunks: int
) -> tuple[bool, list[float]]:
    conn = t.connection()
    try:
        answer = await conn.post(PATH, payload, t.headers(session), keep_events=True)
    except (TimeoutError, HTTPError, OSError):
        return False, []
    finally:
        await conn.close()
    seen = [int(m.group(1)) for e in answer.event_data for m in TOKEN.finditer(e)]
    whole = answer.status == 200 and seen == list(range(chunks))
    gaps = [(b - a) * 1000 for a, b in zip(answer.events, answer.events[1:], strict=False)]
    return whole, gaps


async def streams(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    """`args.streams` streams at once, `args.chunks` chunks `args.gap_ms` apart, per target."""
    user = f"bench-slow-{args.gap_ms}-{args.chunks}"
    payload = orjson.dumps(body(history(2 * 1024, 6), stream=True, user=user))
    gaps: dict[str, list[float]] = {t.name: [] for t in targets}
    round_p99: dict[str, list[float]] = {t.name: [] for t in targets}
    whole: dict[str, int] = {t.name: 0 for t in targets}
    total: dict[str, int] = {t.name: 0 for t in targets}
    for r in range(args.stream_rounds):
        for t in rotated(targets, r):
            _quiet()
            try:
                results = await asyncio.gather(
                    *(
                        _one_stream(t, payload, f"field-stream-{i}", args.chunks)
                        for i in range(args.streams)
                    )
                )
            finally:
                gc.enable()
            these = [g for _, gs in results for g in gs]
            gaps[t.name] += these
            round_p99[t.name].append(rnd(percentile(these, 99), 2) or 0.0)
            whole[t.name] += sum(ok for ok, _ in results)
            total[t.name] += len(results)
    return {
        t.name: {
            "streams": total[t.name],
            "whole": whole[t.name],
            "gap_p50": rnd(percentile(gaps[t.name], 50), 2),
            "gap_p99": rnd(percentile(gaps[t.name], 99), 2),
            "round_gap_p99": round_p99[t.name],
        }
        for t in targets
    }


def _turn(k: int) -> list[dict[str, Any]]:
    """One more tool turn, a few hundred bytes, as an agent appends it."""
    args = {"command": f"sed -n '{k},{k + 20}p' src/parser/grow_{k}.py"}
    return [
        {
            "role": "assistant",
            "content": f"Looking at grow_{k}.",
            "tool_calls": [
                {
                    "id": f"call_g{k:05d}",
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": orjson.dumps(args).decode(),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_g{k:05d}", "content": f"line {k}: ok\n" * 12},
    ]


async def growing(targets: list[Target], args: argparse.Namespace) -> dict[str, Any]:
    """Histories that grow by one tool turn a request; every target gets the same bodies."""
    out: dict[str, Any] = {}
    tag = os.getpid()
    for size in args.sizes:
        messages = history(*GROW_SIZES[size])
        conns = {t.name: t.connection() for t in targets}
        lat: dict[str, list[float]] = {t.name: [] for t in targets}
        before = {t.name: memory_of(t) for t in targets}
        trace: dict[str, list[float | None]] = {t.name: [] for t in targets}
        peer_every = max(1, args.grow // 8)
        warm = 3
        for i in range(args.grow + warm):
            if i >= warm and (i - warm) % max(1, args.grow // 4) == 0:
                for t in targets:  # resident memory along the way: flat, or growing?
                    trace[t.name].append(memory_of(t))
            messages += _turn(i)
            payload = orjson.dumps(body(messages))
            for t in rotated(targets, i):
                if t.peer and i >= warm and (i - warm) % peer_every:
                    continue
                _quiet()
                try:
                    start = time.perf_counter()
                    answer = await conns[t.name].post(
                        PATH, payload, t.headers(f"grow-{size}-{tag}")
                    )
                    ms = (time.perf_counter() - start) * 1000
                except (TimeoutError, HTTPError, OSError):
                    continue
                finally:
                    gc.enable()
                if answer.status == 200 and i >= warm:
                    lat[t.name].append(ms)
        for c in conns.values():
            await c.close()
        out[size] = {
            "bytes_last": len(payload),
            "requests": args.grow,
            **{
                t.name: {
                    "n": len(lat[t.name]),
                    "p50": rnd(percentile(lat[t.name], 50), 2),
                    "p90": rnd(percentile(lat[t.name], 90), 2),
                    "memory_before_mib": before[t.name],
                    "memory_trace_mib": [*trace[t.name], memory_of(t)],
                    "memory_after_mib": memory_of(t),
                }
                for t in targets
            },
        }
    return out


def _added(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "n/a"
    return f"+{value - base:.2f}" if value >= base else f"{value - base:.2f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "n/a" if value is None or not base else f"{value / base:.2f}x"


def print_report(summary: dict[str, Any]) -> None:
    print_header("The field's metric set (each against direct, same run)")
    print(report_table(summary["results"]))


def report_block(summary: dict[str, Any] | None) -> str:
    """The BENCHMARKS.md block of a `tests.bench.field` result (`tests.bench.report`)."""
    if not summary:
        return "(no results yet: run `python -m tests.bench.field`)"
    m = summary["machine"]
    lines = [
        f"Run at commit {summary.get('commit')}, {m['date']}, load average "
        f"{m.get('loadavg_at_start')} at its start; `python -m tests.bench.field "
        + " ".join(summary.get("argv") or [])
        + "`. Targets:"
    ]
    for name, info in summary["setup"].items():
        state = info.get("version") or "ok" if info.get("ok") else f"not run: {info.get('error')}"
        where = f" (the proxy of `{info['cwd']}`)" if name == "xun-base" else ""
        lines.append(f"- {name}: {state}{where}")
    return "\n".join(lines) + "\n\n" + report_table(summary["results"])


def _vs(res: dict[str, Any], key: str, names: list[str]) -> list[str]:
    """A row of `key`: direct's own value, then each target's difference from it."""
    d = res["direct"][key]
    return [str(d) if n == "direct" else _added(res[n][key], d) for n in names]


def _span(values: list[float]) -> str:
    return f"{min(values)}-{max(values)}" if values else "n/a"


def report_table(res: dict[str, Any]) -> str:
    names = list(res["memory_idle_mib"])
    rows: list[list[Any]] = []
    c1 = res.get("c1")
    if c1:
        rows.append(["c=1, 50 KB: p50 ms (added)", *_vs(c1, "p50", names)])
        rows.append(["c=1, 50 KB: p99 ms (added)", *_vs(c1, "p99", names)])
        rows.append(["c=1: p99 of each round, ms", *(_span(c1[n]["round_p99"]) for n in names)])
        rows.append(
            ["c=1: CPU us a request (direct: upstream's)"]
            + [c1[n].get("cpu_us", "n/a") for n in names]
        )
        rows.append(
            ["c=1: requests (errors)", *(f"{c1[n]['n']} ({c1[n]['errors']})" for n in names)]
        )
    tp = res.get("throughput")
    if tp:
        base = tp["direct"]["rps"]
        rows.append(
            ["c=16, 50 KB: req/s (x direct)"]
            + [f"{tp[n]['rps']} ({_ratio(tp[n]['rps'], base)})" for n in names]
        )
        rows.append(
            ["c=8: CPU us a request (direct: upstream's)"] + [tp[n]["cpu_us"] for n in names]
        )
        rows.append(["resident MiB idle"] + [res["memory_idle_mib"][n] for n in names])
        rows.append(["resident MiB under load (peak)"] + [tp[n]["memory_load_mib"] for n in names])
        after = res.get("memory_after_mib", {})
        rows.append(["resident MiB after"] + [after.get(n) for n in names])
    st = res.get("streams")
    if st:
        base = st["direct"]["gap_p99"]
        rows.append(
            ["streams with every chunk"] + [f"{st[n]['whole']}/{st[n]['streams']}" for n in names]
        )
        rows.append(["p99 gap between chunks, ms (added)", *_vs(st, "gap_p99", names)])
        rows.append(
            ["p99 gap x direct (p99 of each round, ms)"]
            + [f"{_ratio(st[n]['gap_p99'], base)} ({_span(st[n]['round_gap_p99'])})" for n in names]
        )
    for size, h in (res.get("histories") or {}).items():
        rows.append([f"{size} growing: p50 ms (added)", *_vs(h, "p50", names)])
        rows.append(
            [f"{size} growing: MiB before, then each quarter"]
            + [
                " -> ".join(
                    str(v)
                    for v in [
                        h[n]["memory_before_mib"],
                        *h[n].get("memory_trace_mib", [h[n]["memory_after_mib"]]),
                    ]
                )
                for n in names
            ]
        )
    return table(["figure", *names], rows)
