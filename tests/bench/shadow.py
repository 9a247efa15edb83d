"""Shadow mode's cost: what a shadowed request adds, beside a pass-through and a compacting one.

    python -m tests.bench.shadow            # under a minute (1,600 requests)
    python -m tests.bench.shadow --quick    # about 15 seconds

One xun-proxy process (SQLite store) in front of the fast fake upstream
(`tests.bench.fast_upstream`); the same Chat Completions bodies (a 50 KB, 200-message agent
history, streamed and not) go, one at a time and interleaved in a rotating order so drifts
in machine load hit all alike, to:

  direct       the upstream itself
  xun-pass     xun-proxy, no session header (pass-through)
  xun-session  xun-proxy, a session below its threshold (load, rebuild, record, save)
  xun-shadow   xun-proxy, the same with `X-Xun-Compact: shadow` (a pass-through of the
               client's bytes, the same session work beside it, the answer read for usage)

Reported: each target's median latency, what it adds to `direct`, and the shadow's added
time as a ratio of the compacting path's (a ratio within the run, not a timing to compare
across machines). Results go to `tests/bench/results/shadow.json`.
"""

from __future__ import annotations

import argparse
import time
import uuid
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
from tests.bench.histories import body, history

TARGETS = ("direct", "xun-pass", "xun-session", "xun-shadow")
KEY = "sk-bench"


def headers_for(target: str, session: str) -> dict[str, str]:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    if target in ("xun-session", "xun-shadow"):
        headers["x-session-id"] = session
    if target == "xun-shadow":
        headers["x-xun-compact"] = "shadow"
    return headers


def one(client: httpx.Client, url: str, payload: bytes, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    with client.stream("POST", url, content=payload, headers=headers) as response:
        for _ in response.iter_raw():
            pass
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
    return (time.perf_counter() - started) * 1000


def cell(
    client: httpx.Client, urls: dict[str, str], stream: bool, rounds: int, per_slice: int
) -> dict[str, list[float]]:
    messages = history(50 * 1024, 200)
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
    payload = orjson.dumps(body(messages, stream=stream, **extra))
    sessions = {t: f"bench-{t}-{stream}-{uuid.uuid4().hex[:8]}" for t in TARGETS}
    samples: dict[str, list[float]] = {t: [] for t in TARGETS}
    order = list(TARGETS)
    for n in range(rounds):
        shift = n % len(order)
        for target in order[shift:] + order[:shift]:
            url = urls[target]
            headers = headers_for(target, sessions[target])
            for _ in range(per_slice):
                samples[target].append(one(client, url, payload, headers))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, per_slice = (6, 5) if args.quick else (20, 10)
    scratch = run_dir("shadow")
    upstream = fast_upstream(scratch)
    upstream.start()
    upstream.wait_ready("/health")
    proxy = xun_proxy(
        "xun",
        f"{upstream.url}/v1",
        scratch,
        store=f"sqlite:///{scratch / 'xun.db'}",
        token_threshold=1_000_000_000,
        log_level="warning",
    )
    rows: list[list[Any]] = []
    cells: dict[str, Any] = {}
    with running([upstream, proxy]):
        proxy.start()
        proxy.wait_ready("/healthz")
        path = "/v1/chat/completions"
        urls = {t: (upstream.url if t == "direct" else proxy.url) + path for t in TARGETS}
        with httpx.Client(timeout=60) as client:
            for stream in (False, True):
                cell(client, urls, stream, 1, 3)  # warm-up: connections, first parses
                samples = cell(client, urls, stream, rounds, per_slice)
                p50 = {t: percentile(samples[t], 50) or 0.0 for t in TARGETS}
                added = {t: p50[t] - p50["direct"] for t in TARGETS}
                ratio = added["xun-shadow"] / added["xun-session"] if added["xun-session"] else None
                name = "stream" if stream else "json"
                cells[name] = {
                    "p50_ms": {t: rnd(v) for t, v in p50.items()},
                    "added_p50_ms": {t: rnd(v) for t, v in added.items()},
                    "shadow_vs_session": rnd(ratio),
                    "samples": len(samples["direct"]),
                }
                rows.append(
                    [name, *(f"{p50[t]:.2f} (+{added[t]:.2f})" for t in TARGETS), rnd(ratio)]
                )
    print_header("Shadow mode: median latency in ms (added to direct)")
    print(table(["body", *TARGETS, "shadow/session added"], rows))
    result = {"commit": git_commit(), "machine": machine(), "quick": args.quick, "cells": cells}
    print(f"\nwritten: {write_result('shadow', result)}")


if __name__ == "__main__":
    main()
