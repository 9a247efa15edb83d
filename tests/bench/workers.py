"""Throughput with `--workers`: one proxy process against two, and against direct, in one run.

    python -m tests.bench.workers [--rounds 5] [--seconds 3] [--concurrency 16]

The fast fake upstream (`tests.bench.fast_upstream`) runs in its own process; two xun-proxy
servers share nothing but the machine: `--workers 1` and `--workers 2`, each with an SQLite
file of its own. `--concurrency` clients each drive a session of their own (the session path
below the threshold: fingerprints, the state read and written every turn) with a 20-turn
history. Rounds interleave the targets, each getting `--seconds` of load in a rotating
order, so a drift in the machine's load hits all alike; the figures are medians over rounds.
The client runs in this process, on the same cores: where it and the upstream already take
most of a core, a second worker cannot double anything, and the ratio says how much of the
second core the proxy could use.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from tests.bench.common import fast_upstream, print_header, run_dir, running, table, xun_proxy
from tests.support.agent import SYSTEM, TOOLS, tool_output


def history(turns: int = 20) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read the source files one by one."},
    ]
    for n in range(turns):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "f{n}.py"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        output = tool_output(n, 500)
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": output})
    return messages


async def load(base: str, seconds: float, concurrency: int, tag: str) -> int:
    """Requests answered in `seconds` by `concurrency` agents, each with a session and an
    HTTP client of its own (as agents run), so a session keeps its connection and worker."""
    body = {"model": "gpt-4o", "messages": history(), "tools": TOOLS}
    deadline = time.perf_counter() + seconds

    async def agent(n: int) -> int:
        done = 0
        headers = {"X-Session-Id": f"{tag}-{n}", "Authorization": "Bearer sk-bench"}
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            while time.perf_counter() < deadline:
                response = await client.post("/chat/completions", json=body, headers=headers)
                response.raise_for_status()
                done += 1
        return done

    return sum(await asyncio.gather(*(agent(n) for n in range(concurrency))))


def cpu_seconds(pid: int | None) -> float:
    """CPU time of a process and its children alive (a proxy's workers), from /proc."""
    if pid is None:
        return 0.0
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0.0
    for each in [pid, *map(int, children)]:
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    scratch = run_dir("workers")
    upstream = fast_upstream(scratch)
    one = xun_proxy(
        "workers-1",
        upstream.url + "/v1",
        scratch,
        workers=1,
        store=f"sqlite:///{scratch / 'one.db'}",
        log_level="warning",
    )
    two = xun_proxy(
        "workers-2",
        upstream.url + "/v1",
        scratch,
        workers=2,
        store=f"sqlite:///{scratch / 'two.db'}",
        log_level="warning",
    )
    targets = {"direct": upstream.url + "/v1", "workers 1": one.url + "/v1",
               "workers 2": two.url + "/v1"}  # fmt: skip
    rates: dict[str, list[float]] = {name: [] for name in targets}
    cpu = {name: [0.0, 0] for name in targets}  # proxy CPU seconds, requests
    pids = {"workers 1": one, "workers 2": two}
    with running([upstream, one, two]):
        for child in (upstream, one, two):
            child.start()
        upstream.wait_ready("/health")
        one.wait_ready("/healthz")
        two.wait_ready("/healthz")
        names = list(targets)
        for name in names:  # warm-up: sessions stored, connections open
            asyncio.run(load(targets[name], 1.0, args.concurrency, "warm"))
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                child = pids.get(name)
                pid = child.proc.pid if child is not None and child.proc is not None else None
                before = cpu_seconds(pid)
                served = asyncio.run(load(targets[name], args.seconds, args.concurrency, "s"))
                cpu[name][0] += cpu_seconds(pid) - before
                cpu[name][1] += served
                rates[name].append(served / args.seconds)
    median = {name: statistics.median(values) for name, values in rates.items()}
    print_header(f"Throughput at concurrency {args.concurrency}, requests/s (median of rounds)")
    rows = [
        [name, round(median[name]), f"{median[name] / median['direct']:.2f}x",
         round(cpu[name][0] / max(cpu[name][1], 1) * 1e6) if name in pids else "",
         " ".join(str(round(v)) for v in rates[name])]
        for name in targets
    ]  # fmt: skip
    headers = ["target", "req/s", "vs direct", "proxy CPU us/request", "rounds"]
    print(table(headers, rows))
    ratio = median["workers 2"] / median["workers 1"]
    print(f"\nworkers 2 / workers 1: {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
