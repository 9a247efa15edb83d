"""Resident memory does not grow with the number of sessions: 10,000 sessions, one process.

A `xun-proxy` process with a small session cache (XUN_STORE_CACHE_ENTRIES / _BYTES) on a
Redis namespace serves one request for each of 10,000 sessions, each storing a state of a
few kilobytes (about 45 MB in all, far more than the cache may hold). Its VmRSS after 1,000
sessions and after 10,000 must be about the same, and the cache, read from
`/readyz?verbose`, must never be over its bounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from proxy.store import open_store
from tests.scale.conftest import REPO, ProxyProcess, rss_kib, wait_until
from tests.scale.tiny import RawClient
from tests.support.servers import free_port

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.timeout(300),  # 10,000 requests: about a minute on a busy two-core machine
]

CACHE_ENTRIES = 400
CACHE_BYTES = 1 * 2**20  # about 170 states: the byte bound is the one that binds
SESSIONS = 10_000
CHECKPOINT = 1_000
CONCURRENCY = 16
CONTENT_BYTES = 3000  # random, so the state's compressed view stays ~4.5 KB


async def touch(proxy: ProxyProcess, sessions: range) -> None:
    """One chat request for each session, CONCURRENCY at a time over keep-alive connections."""
    queue = list(reversed(sessions))

    async def worker() -> None:
        client = RawClient(proxy.port)
        try:
            while queue:
                n = queue.pop()
                text = f"session {n}: {os.urandom(CONTENT_BYTES).hex()}"
                messages = [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": text},
                ]
                body = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
                headers = {"x-session-id": f"mem-{n}", "authorization": "Bearer sk-mem"}
                status, reply = await client.post("/v1/chat/completions", body, headers)
                assert status == 200, reply[:500]
        finally:
            await client.close()

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


@pytest.fixture
def tiny_upstream() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.scale.tiny", str(port)], cwd=REPO)

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    try:
        wait_until(listening, 10, "the tiny upstream")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def cache_stats(proxy: ProxyProcess) -> dict[str, int]:
    body = proxy.readyz(verbose="1").json()
    stats: dict[str, int] = body["cache"]
    assert stats["entries"] <= CACHE_ENTRIES and stats["bytes"] <= CACHE_BYTES, stats
    return stats


async def test_resident_memory_stays_flat(
    tiny_upstream: str,
    proxy_processes: Callable[..., ProxyProcess],
    redis_store_url: str,
) -> None:
    proxy = proxy_processes(
        store=redis_store_url,
        upstream=tiny_upstream,
        threshold=10**9,
        env={
            "XUN_STORE_CACHE_ENTRIES": str(CACHE_ENTRIES),
            "XUN_STORE_CACHE_BYTES": str(CACHE_BYTES),
        },
    )
    started = time.monotonic()
    await touch(proxy, range(CHECKPOINT))
    first = await asyncio.to_thread(cache_stats, proxy)
    rss_first = rss_kib(proxy.pid)
    samples = [rss_first]
    for start in range(CHECKPOINT, SESSIONS, 1500):
        await touch(proxy, range(start, min(start + 1500, SESSIONS)))
        await asyncio.to_thread(cache_stats, proxy)
        samples.append(rss_kib(proxy.pid))
    last = await asyncio.to_thread(cache_stats, proxy)
    rss_last = samples[-1]
    elapsed = time.monotonic() - started
    print(
        f"\nRSS after {CHECKPOINT} sessions: {rss_first / 1024:.1f} MiB; after {SESSIONS}: "
        f"{rss_last / 1024:.1f} MiB; samples {[round(s / 1024, 1) for s in samples]}; "
        f"cache {last}; {elapsed:.1f}s"
    )

    store = open_store(redis_store_url)
    try:
        assert await store.count() == SESSIONS  # every session was stored
    finally:
        await store.close()
    # The cache filled up to a bound and stayed there: entries come and go, memory does not.
    assert first["entries"] > 0 and last["evictions"] > first["evictions"]
    assert last["bytes"] > CACHE_BYTES * 0.9 and last["entries"] < CACHE_ENTRIES
    # About 45 MB of state went through the process; its resident memory did not follow.
    assert rss_last <= rss_first * 1.10 + 4096, (rss_first, rss_last)
    assert max(samples) <= rss_first * 1.10 + 4096, samples
