"""Scale: resident memory against sessions stored, and per-request CPU against history size.

    python -m tests.bench.scale            # 100 / 1,000 / 10,000 sessions; 1k..200k tokens
    python -m tests.bench.scale --quick    # 100 / 1,000 sessions; fewer repeats

1. Memory. A real `python -m proxy serve` process (SQLite file, then Redis at
   127.0.0.1:6379 db 12 under a unique key prefix, removed afterwards with SCAN + DEL) gets
   one chat turn for each of N new sessions through the fast fake upstream; after 100, 1,000
   and 10,000 sessions its resident memory (VmRSS) and the store's size are read.
2. CPU. In this process, the proxy's per-request pure work on a history of 1k..200k tokens
   (about 4 characters a token, one message per ~250 tokens, as an agent session grows):
   fingerprinting (`PrefixChain`), `rebuild` of a known session, and the whole turn
   (parse + rebuild + upstream body + record + state bytes). CPU time (process_time), best of
   several runs; a least-squares fit in log-log space gives the growth exponent (1 = linear).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.bench.common import (
    Child,
    free_port,
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
from tests.bench.histories import body, history

SESSION_STEPS = (100, 1_000, 10_000)
TOKEN_SIZES = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000)
REDIS = "redis://127.0.0.1:6379/12"


async def add_sessions(
    url: str, payload: bytes, first: int, count: int, tag: str, concurrency: int = 16
) -> int:
    """One chat turn for each of `count` new sessions (numbered from `first`); returns the
    failures."""
    failures = 0
    queue = iter(range(first, first + count))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0)) as client:

        async def worker() -> None:
            nonlocal failures
            for n in queue:
                headers = {
                    "authorization": "Bearer sk-bench",
                    "content-type": "application/json",
                    "X-Session-Id": f"scale-{tag}-{n}",
                }
                try:
                    resp = await client.post(
                        url + "/v1/chat/completions", content=payload, headers=headers
                    )
                    failures += resp.status_code != 200
                except httpx.HTTPError:
                    failures += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failures


def sqlite_count(path: Path) -> int | None:
    """Sessions in the SQLite file, read with the proxy's own store."""
    from proxy.store import open_store

    async def count() -> int:
        store = open_store(f"sqlite:///{path}")
        try:
            return await store.count()
        finally:
            await store.close()

    try:
        return asyncio.run(count())
    except Exception:  # a check only: the table still reports the rest
        return None


def redis_usage(prefix: str) -> tuple[int, int]:
    """(keys, bytes by MEMORY USAGE) under our prefix in db 12."""
    import redis

    client = redis.Redis.from_url(REDIS)
    keys = total = 0
    for key in client.scan_iter(match=prefix + "*", count=1000):
        keys += 1
        total += int(client.memory_usage(key) or 0)
    client.close()
    return keys, total


def redis_cleanup(prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(REDIS)
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=prefix + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            removed += int(client.delete(*batch))
            batch = []
    if batch:
        removed += int(client.delete(*batch))
    client.close()
    return removed


def memory(backend: str, steps: tuple[int, ...], scratch: Path) -> dict[str, Any]:
    port = free_port()
    upstream = Child(
        "fast-upstream",
        [sys.executable, "-m", "tests.bench.fast_upstream", "--port", str(port)],
        port,
        scratch / f"upstream-{backend}.log",
    )
    prefix = f"xunbench-{uuid.uuid4().hex[:10]}:"
    if backend == "sqlite":
        db = scratch / "scale.db"
        store = f"sqlite:///{db}"
    else:
        store = f"{REDIS}?prefix={prefix}"
    proxy = xun_proxy(
        f"xun-{backend}", upstream.url + "/v1", scratch, store=store, token_threshold=10**9
    )
    payload = orjson.dumps(body(history(2 * 1024, 6)))
    rows: list[dict[str, Any]] = []
    try:
        with running([upstream, proxy]):
            upstream.start()
            upstream.wait_ready("/health")
            proxy.start()
            proxy.wait_ready("/healthz")
            time.sleep(0.5)
            rows.append({"sessions": 0, "rss_mib": proxy.rss_mib(), "failures": 0})
            stored = 0
            for target in steps:
                started = time.perf_counter()
                failures = asyncio.run(
                    add_sessions(proxy.url, payload, stored, target - stored, backend + prefix)
                )
                took = time.perf_counter() - started
                stored = target
                time.sleep(1.0)
                row: dict[str, Any] = {
                    "sessions": target,
                    "rss_mib": proxy.rss_mib(),
                    "failures": failures,
                    "seconds": rnd(took, 1),
                }
                if backend == "sqlite":
                    files = scratch.glob("scale.db*")  # not the fixed 1 MiB kept in reserve
                    size = sum(p.stat().st_size for p in files if not p.name.endswith("-reserve"))
                    row["store_mib"] = rnd(size / 2**20)
                    row["stored_sessions"] = sqlite_count(db)
                else:
                    keys, used = redis_usage(prefix)
                    row["store_keys"] = keys
                    row["store_mib"] = rnd(used / 2**20)
                rows.append(row)
                print(f"{backend}: {row}", flush=True)
    finally:
        if backend == "redis":
            removed = redis_cleanup(prefix)
            print(f"redis: removed {removed} keys under {prefix}", flush=True)
    by = {r["sessions"]: r for r in rows}
    flat = None
    if 1_000 in by and 10_000 in by and by[1_000]["rss_mib"]:
        flat = rnd(100 * (by[10_000]["rss_mib"] / by[1_000]["rss_mib"] - 1))
    return {"store": store.split("?")[0], "rows": rows, "rss_growth_1k_to_10k_pct": flat}


def rebuild_known(messages: list[dict[str, Any]], state: bytes) -> None:
    from proxy.session.rebuild import rebuild
    from proxy.session.state import SessionState

    rebuild(messages, SessionState.from_bytes(state))


def whole_turn(raw: bytes, state: bytes, tokens: int) -> None:
    """The pure work of one request: parse, rebuild, upstream body, record, state bytes."""
    from proxy.session.rebuild import rebuild, record_turn
    from proxy.session.state import SessionState

    data = orjson.loads(raw)
    rb = rebuild(data["messages"], SessionState.from_bytes(state))
    orjson.dumps({**data, "messages": rb.upstream_messages()})
    record_turn(rb, total_tokens=tokens)
    rb.state.to_bytes()


def full_chain(messages: list[dict[str, Any]]) -> str:
    from proxy.session.fingerprint import PrefixChain

    return PrefixChain(messages).prefix(len(messages))


def cpu(repeats: int) -> dict[str, Any]:
    from proxy.session.rebuild import rebuild, record_turn

    rows = []
    for tokens in TOKEN_SIZES:
        n_messages = max(6, tokens // 250)
        messages = history(tokens * 4, n_messages)
        raw = orjson.dumps(body(messages))
        first = rebuild(messages, None)
        record_turn(first, total_tokens=tokens)
        state_bytes = first.state.to_bytes()
        for n in range(299):  # a long-lived session: the state keeps its last 300 turns
            record_turn(first, total_tokens=tokens + n, keep_view=False)
        long_state = first.state.to_bytes()

        row: dict[str, Any] = {"tokens": tokens, "messages": n_messages, "body_bytes": len(raw)}
        steps = (
            # The whole canonical chain: what a first turn, or a client that re-serialises its
            # history, costs (a history resent unchanged only hashes its new messages).
            ("fingerprint", functools.partial(full_chain, messages)),
            ("rebuild", functools.partial(rebuild_known, messages, state_bytes)),
            ("turn", functools.partial(whole_turn, raw, state_bytes, tokens)),
            ("turn300", functools.partial(whole_turn, raw, long_state, tokens)),
        )
        for name, fn in steps:
            best = math.inf
            for _ in range(repeats):
                start = time.process_time()
                fn()
                best = min(best, time.process_time() - start)
            row[f"{name}_ms"] = rnd(best * 1000, 3)
            row[f"{name}_us_per_ktok"] = rnd(best * 1e6 / (tokens / 1000), 1)
        rows.append(row)
        print(f"cpu: {row}", flush=True)
    fits = {
        name: loglog_fit(rows, f"{name}_ms")
        for name in ("fingerprint", "rebuild", "turn", "turn300")
    }
    return {"rows": rows, "fits": fits}


def loglog_fit(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Exponent b of time = a * tokens^b (least squares on logs), over sizes >= 5k tokens where
    fixed costs no longer dominate, and the per-token cost ratio 200k vs 10k."""
    pts = [
        (math.log(r["tokens"]), math.log(r[key]))
        for r in rows
        if r["tokens"] >= 5_000 and r[key] > 0
    ]
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    ss_res = sum((y - (my + slope * (x - mx))) ** 2 for x, y in pts)
    by = {r["tokens"]: r for r in rows}
    ratio = None
    if 10_000 in by and 200_000 in by:
        ratio = (by[200_000][key] / 200) / (by[10_000][key] / 10)
    return {
        "exponent": rnd(slope, 3),
        "r2": rnd(1 - ss_res / ss_tot if ss_tot else 1.0, 4),
        "per_token_ratio_200k_vs_10k": rnd(ratio, 2),
        "linear": slope <= 1.15,
    }


def print_tables(result: dict[str, Any]) -> None:
    print_header("Resident memory of the proxy against sessions stored")
    rows = []
    for backend, data in result["memory"].items():
        if "error" in data:
            rows.append([backend, None, None, None, data["error"]])
            continue
        for r in data["rows"]:
            rows.append(
                [backend, r["sessions"], r["rss_mib"], r.get("store_mib"), r.get("failures")]
            )
    print(table(["store", "sessions", "proxy RSS (MiB)", "store size (MiB)", "failures"], rows))
    for backend, data in result["memory"].items():
        growth = data.get("rss_growth_1k_to_10k_pct")
        print(f"{backend}: RSS growth 1,000 -> 10,000 sessions: {growth} %")
    print_header("Per-request CPU time against history size (best of runs)")
    rows = [
        [
            r["tokens"],
            r["messages"],
            r["body_bytes"],
            r["fingerprint_ms"],
            r["rebuild_ms"],
            r["turn_ms"],
            r["turn_us_per_ktok"],
            r["turn300_ms"],
        ]
        for r in result["cpu"]["rows"]
    ]
    heads = [
        "tokens",
        "messages",
        "bytes",
        "fingerprint ms",
        "rebuild ms",
        "turn ms",
        "turn us/ktok",
        "turn ms, 300-turn session",
    ]
    print(table(heads, rows))
    fits = result["cpu"]["fits"]
    print(
        table(
            ["measure", "exponent", "R2", "per-token cost 200k / 10k", "linear"],
            [
                [k, v["exponent"], v["r2"], v["per_token_ratio_200k_vs_10k"], v["linear"]]
                for k, v in fits.items()
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="xun-proxy scale benchmark")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["sqlite", "redis", "memory", "cpu"]
    )
    args = parser.parse_args(argv)
    started = time.time()
    scratch = run_dir("scale")
    steps = SESSION_STEPS[:2] if args.quick else SESSION_STEPS
    result: dict[str, Any] = {"machine": machine(), "commit": git_commit(), "argv": sys.argv[1:]}
    result["memory"] = {}
    if "memory" not in args.skip:
        for backend in ("sqlite", "redis"):
            if backend in args.skip:
                continue
            try:
                result["memory"][backend] = memory(backend, steps, scratch)
            except Exception as exc:  # a missing Redis server is a result to report, not a crash
                result["memory"][backend] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
                print(f"{backend}: {result['memory'][backend]['error']}", flush=True)
    if "cpu" not in args.skip:
        result["cpu"] = cpu(3 if args.quick else 7)
    result["seconds"] = round(time.time() - started, 1)
    print_tables(result)
    path = write_result("scale" + ("-quick" if args.quick else ""), result)
    print(f"\nwrote {path} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
