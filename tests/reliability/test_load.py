"""Load: 200 concurrent sessions for 60 seconds through a proxy process, zero errors, and its
memory back to baseline afterwards.

Everything is on loopback and bounded: the driver is one asyncio loop with 200 session tasks
that stop at the deadline. The proxy (SQLite store, compaction on) and the fake upstream run
as separate processes. `XUN_LOAD_SECONDS` / `XUN_LOAD_SESSIONS` change the size; the numbers
in SECURITY.md are from the default (60 s, 200 sessions).

Memory is read once the proxy has gone idle and run its reclaim (proxy.server.allocator; the test
waits for `xun_memory_reclaim_seconds_count` to move). What may stay is what the hot-state cache
holds by design (its accounted bytes, from /readyz?verbose) plus a small allowance for the
allocators' partly used pages; the parsed histories kept to parse on from
(proxy.turn.body_reuse, about five times their raw bytes) are shrunk by the reclaim to the
last few sessions'. A second round of the same load, with sessions of its own, must not add
to it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.turn.body_reuse import IDLE_SESSIONS
from tests.reliability.conftest import ROOT, ProxyProcess, SpawnProxy, wait_until

SECONDS = float(os.environ.get("XUN_LOAD_SECONDS", "60"))
SESSIONS = int(os.environ.get("XUN_LOAD_SESSIONS", "200"))
TOOL_OUTPUT = ("line of tool output " * 4 + "\n") * 20  # ~1.7 KB per tool result
# After the load, RSS may stay this far above the warmed-up baseline, beyond what the hot-state
# cache accounts for. SQLite's page caches are emptied by the idle reclaim (Store.release_memory);
# what stays is CPython's object allocator: an arena (1 MiB) goes back only when wholly empty,
# and the few objects that outlive the burst keep some arenas, and their emptied pools, in
# place (sys._debugmallocstats after a run: live blocks +0.2 to 0.8 MB, 6 more arenas).
# Measured at the defaults: 1.3 to 7.5 MiB stay, of a peak 12 to 25 MiB above the baseline
# (before the page caches were emptied: 5.7 to 8.7 MiB; before the idle reclaim and the fixed
# mmap threshold, 14 to 26 MiB). What stays is fragments, so it grows with the peak: with the
# rest of the suite running beside it on 2 cores, requests pile up, the peak reached 50 MiB
# above the baseline and 17.7 MiB stayed (a second round then added 1.2 MiB: nothing grew).
# So the bound is 16 MiB or 40 % of the peak's rise, whichever is larger; the second round
# below is the check that nothing accumulates.
RSS_SLACK_KIB = 16 * 1024
RSS_SLACK_OF_PEAK = 0.4
# A second round of the same load (half as long) may add this much more: the check that memory
# does not grow with the requests served (measured: -0.8 to +0.8 MiB; before the idle reclaim
# and the fixed mmap threshold, a second 60 s round added 9 MiB).
REPEAT_SLACK_KIB = 4 * 1024
REPEAT_SECONDS = SECONDS / 2
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def upstream_process() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.load_upstream"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().decode().strip()
        assert url.startswith("http://127.0.0.1:")
        yield url
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


async def session(
    client: httpx.AsyncClient, url: str, n: int, deadline: float, stats: Counter[str]
) -> None:
    headers = {"authorization": f"Bearer sk-load-{n % 7}", "x-session-id": f"load-{n}"}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent under load."},
        {"role": "user", "content": f"Session {n}: read the modules one by one."},
    ]
    turn = 0
    while time.monotonic() < deadline:
        stream = (n + turn) % 2 == 0
        body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS, "stream": stream}
        started = time.monotonic()
        try:
            response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            stats[f"error {type(exc).__name__}"] += 1
            return
        stats["latency_ms"] += int((time.monotonic() - started) * 1000)
        if response.status_code != 200:
            stats[f"status {response.status_code}"] += 1
            return
        if stream:
            if not response.content.endswith(b"data: [DONE]\n\n") or b'"error"' in response.content:
                stats["broken stream"] += 1
                return
            calls = response.content.count(b'"read_file"')
            text = b"Done with this step" in response.content.replace(b'","', b"")
        else:
            message = response.json()["choices"][0]["message"]
            calls = len(message.get("tool_calls") or [])
            text = bool(message.get("content"))
        stats["requests"] += 1
        stats[f"compaction {response.headers.get('x-xun-compaction')}"] += 1
        turn += 1
        call_id = f"call_{n}_{turn}"
        if calls:
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path":"x"}'},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": TOOL_OUTPUT})
        else:
            assert text or stream
            messages.append({"role": "assistant", "content": "Done with this step."})
            messages.append({"role": "user", "content": f"Next, turn {turn}."})


async def drive(url: str, sessions: int, seconds: float, first: int = 0) -> Counter[str]:
    stats: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=sessions + 10, max_keepalive_connections=sessions + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        deadline = time.monotonic() + seconds
        async with asyncio.TaskGroup() as group:
            for n in range(first, first + sessions):
                group.create_task(session(client, url, n, deadline, stats))
    return stats


@dataclass(frozen=True)
class Memory:
    rss_kib: int
    cache_kib: int  # what the hot-state cache accounts for holding
    reuse_kib: int  # the raw bytes of the histories kept to parse on from (proxy.turn.body_reuse)

    def __str__(self) -> str:
        return (
            f"{self.rss_kib / 1024:.1f} MiB (cache {self.cache_kib / 1024:.1f} MiB,"
            f" parsed histories {self.reuse_kib / 1024:.1f} MiB)"
        )


def reclaims(proxy: ProxyProcess) -> float:
    for line in httpx.get(proxy.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("xun_memory_reclaim_seconds_count "):
            return float(line.split()[1])
    return 0.0


def settled_memory(proxy: ProxyProcess, reclaims_before: float) -> Memory:
    """The proxy's memory once it has gone idle and reclaimed (probes do not count as traffic)."""
    assert wait_until(lambda: reclaims(proxy) > reclaims_before, 30, step=0.25), "no reclaim"
    ready = httpx.get(proxy.url + "/readyz?verbose", timeout=10).json()
    reuse = ready["body_reuse"]
    # The parsed histories kept for speed are shrunk by the reclaim to the last few sessions.
    assert reuse["sessions"] <= IDLE_SESSIONS, reuse
    return Memory(proxy.rss_kib(), ready["cache"]["bytes"] // 1024, reuse["bytes"] // 1024)


@dataclass(frozen=True)
class Round:
    stats: Counter[str]
    peak_kib: int
    reclaims: float  # reclaims counted when the round ended


def load_round(proxy: ProxyProcess, sessions: int, seconds: float, first: int = 0) -> Round:
    """Drive one round; its stats, the peak RSS seen while it ran, and the reclaim count at its
    end (a stall of the driver may let the proxy reclaim mid-round: only a later one counts)."""
    peak = [proxy.rss_kib()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], proxy.rss_kib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stats = asyncio.run(drive(proxy.base_url + "/chat/completions", sessions, seconds, first))
        count = reclaims(proxy)
    finally:
        done.set()
        sampler.join(timeout=5)
    return Round(stats, max(peak[0], proxy.rss_kib()), count)


def failures(stats: Counter[str]) -> dict[str, int]:
    return {k: v for k, v in stats.items() if k.startswith(("error", "status", "broken"))}


def test_200_sessions_for_60_seconds(
    upstream_process: str, spawn_proxy: SpawnProxy, tmp_path: Path
) -> None:
    proxy = spawn_proxy(
        upstream=upstream_process,
        store=f"sqlite:///{tmp_path / 'load.db'}",
        token_threshold=2500,
        log_level="warning",
    )
    # Warm up (imports, connection pools, the store), then take the baseline.
    warm = load_round(proxy, 20, 3)
    assert not failures(warm.stats), warm.stats
    baseline = settled_memory(proxy, warm.reclaims)

    started = time.monotonic()
    first = load_round(proxy, SESSIONS, SECONDS)
    elapsed = time.monotonic() - started
    after = settled_memory(proxy, first.reclaims)
    # Sessions of their own: what a session leaves behind must not add up either.
    second = load_round(proxy, SESSIONS, REPEAT_SECONDS, first=SESSIONS)
    again = settled_memory(proxy, second.reclaims)

    stats = first.stats
    errors = failures(stats) or failures(second.stats)
    requests = stats["requests"]
    summary = (
        f"{SESSIONS} sessions, {elapsed:.1f} s: {requests} requests "
        f"({requests / elapsed:.1f}/s, mean {stats['latency_ms'] / max(requests, 1):.0f} ms), "
        f"errors {errors or 0}, compactions "
        f"{ {k[11:]: v for k, v in stats.items() if k.startswith('compaction')} }; "
        f"RSS baseline {baseline}, peak {first.peak_kib / 1024:.1f} MiB, after {after}; "
        f"second round ({REPEAT_SECONDS:.0f} s, {second.stats['requests']} requests): "
        f"peak {second.peak_kib / 1024:.1f} MiB, after {again}"
    )
    print(summary)
    (tmp_path / "load-summary.txt").write_text(summary)
    assert not errors, summary
    assert requests >= SESSIONS, summary  # every session got through at least one turn
    cached = max(0, after.cache_kib - baseline.cache_kib)
    slack = max(RSS_SLACK_KIB, RSS_SLACK_OF_PEAK * (first.peak_kib - baseline.rss_kib))
    assert after.rss_kib <= baseline.rss_kib + cached + slack, summary
    cached = max(0, again.cache_kib - after.cache_kib)
    assert again.rss_kib <= after.rss_kib + cached + REPEAT_SLACK_KIB, summary
    assert b"Traceback" not in proxy.logs()
