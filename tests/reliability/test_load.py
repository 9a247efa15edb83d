"""Load: 200 concurrent sessions for 60 seconds through a proxy process, zero errors, and its
memory back to baseline afterwards.

Everything is on loopback and bounded: the driver is one asyncio loop with 200 session tasks
that stop at the deadline. The proxy (SQLite store, compaction on) and the fake upstream run
as separate processes. `XUN_LOAD_SECONDS` / `XUN_LOAD_SESSIONS` change the size; the numbers
in SECURITY.md are from the default (60 s, 200 sessions).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.conftest import ROOT, SpawnProxy

SECONDS = float(os.environ.get("XUN_LOAD_SECONDS", "60"))
SESSIONS = int(os.environ.get("XUN_LOAD_SESSIONS", "200"))
TOOL_OUTPUT = ("line of tool output " * 4 + "\n") * 20  # ~1.7 KB per tool result
# RSS may stay this far above the warmed-up baseline. It grows with the requests served (about
# 10 KB each on a quiet machine, half that with MALLOC_ARENA_MAX=1): an open question, tracked
# in SECURITY.md's known limits; this bound catches anything worse.
RSS_TOLERANCE_KIB = 96 * 1024
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


async def drive(url: str, sessions: int, seconds: float) -> Counter[str]:
    stats: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=sessions + 10, max_keepalive_connections=sessions + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        deadline = time.monotonic() + seconds
        async with asyncio.TaskGroup() as group:
            for n in range(sessions):
                group.create_task(session(client, url, n, deadline, stats))
    return stats


def test_200_sessions_for_60_seconds(
    upstream_process: str, spawn_proxy: SpawnProxy, tmp_path: Path
) -> None:
    proxy = spawn_proxy(
        upstream=upstream_process,
        store=f"sqlite:///{tmp_path / 'load.db'}",
        token_threshold=2500,
        log_level="warning",
    )
    url = proxy.base_url + "/chat/completions"
    # Warm up (imports, connection pools, the store), then take the baseline.
    warm = asyncio.run(drive(url, 20, 3))
    assert not [k for k in warm if k.startswith(("error", "status", "broken"))], warm
    time.sleep(1)
    baseline = proxy.rss_kib()

    started = time.monotonic()
    stats = asyncio.run(drive(url, SESSIONS, SECONDS))
    elapsed = time.monotonic() - started
    peak = proxy.rss_kib()
    time.sleep(5)  # idle: nothing in flight
    after = proxy.rss_kib()

    errors = {k: v for k, v in stats.items() if k.startswith(("error", "status", "broken"))}
    requests = stats["requests"]
    summary = (
        f"{SESSIONS} sessions, {elapsed:.1f} s: {requests} requests "
        f"({requests / elapsed:.1f}/s, mean {stats['latency_ms'] / max(requests, 1):.0f} ms), "
        f"errors {errors or 0}, compactions "
        f"{ {k[11:]: v for k, v in stats.items() if k.startswith('compaction')} }, "
        f"RSS baseline {baseline / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, "
        f"after {after / 1024:.1f} MiB"
    )
    print(summary)
    (tmp_path / "load-summary.txt").write_text(summary)
    assert not errors, summary
    assert requests >= SESSIONS, summary  # every session got through at least one turn
    assert after <= baseline + RSS_TOLERANCE_KIB, summary
    assert b"Traceback" not in proxy.logs()
