"""Look-back (issue 35): can the model still reach what it uses next, and what looking costs.

    python -m tests.bench.lookback                          # the corpus at 32k, three wires
    python -m tests.bench.lookback --only 4d5611e5 --wires chat --repeat 2 --tag repeat

The replay is the token economy's (`tests.bench.economy`: recorded turns, the replay upstream
counting tokens with `o200k_base`, the local summariser, the prefix-cache model, the proxy on
the replay's clock), on each wire (`tests.bench.replay_wires`), with three configurations per
wire: `direct`, `xun@32k` (a model that never looks back, the economy's) and `look@32k` (one
that looks back, `tests.bench.lookback_model`), each proxy its own process with default
settings. Coverage is counted for both proxied models; what looking back costs is `look@32k`
against `xun@32k`, billed (prompt + summary tokens) at full price and at a 0.1x cache price.

Reproducible: before each turn the replay waits until the proxy has nothing in flight
(`POST /bench/settle`, `tests.bench.clocked`), and a summary's time is read on the replay's
clock; `--repeat N` runs everything N times on fresh proxies and compares every figure.
Results: `results/coverage[-TAG].json` and `results/lookback[-TAG].json`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
import uuid
from typing import Any

import httpx

from tests.bench import coverage, economy, local_summary, replay_wires
from tests.bench.common import (
    git_commit,
    machine,
    run_dir,
    running,
    write_result,
    xun_proxy,
)
from tests.bench.economy import Config, TurnClock
from tests.bench.lookback_figures import figures, lowest, overall, print_tables, targets
from tests.bench.lookback_model import LookUpstream
from tests.bench.tokens import Counter
from tests.support.servers import UvicornThread

THRESHOLD = 32_000
HOW = (
    "before each turn the replay waits until the proxy has no request, save or summary ahead in "
    "flight (POST /bench/settle, tests/bench/clocked.py), and a summary's time is read on the "
    "replay's clock, so whether the next one is written ahead does not depend on the load"
)


def configs_for(wires: list[str], threshold: int, settle: bool) -> dict[str, list[Config]]:
    k = threshold // 1000
    return {
        w: [
            Config(f"direct-{w}", "direct"),
            Config(f"xun@{k}k-{w}", "xun", threshold, settle=settle),
            Config(f"look@{k}k-{w}", "xun", threshold, settle=settle),
        ]
        for w in wires
    }


def start(configs: list[Config], upstream: str, scratch: Any) -> list[Any]:
    children = []
    for cfg in configs:
        if cfg.kind == "direct":
            cfg.url = upstream
            continue
        name = cfg.name.replace("@", "-")
        child = xun_proxy(
            f"xun-{name}",
            upstream + "/v1",
            scratch,
            store=f"sqlite:///{scratch / (name + '.db')}",
            token_threshold=cfg.threshold,
            max_body_bytes=256 * 2**20,
            anthropic_upstream=upstream,
            module="tests.bench.clocked",
        )
        child.start()
        children.append(child)
        child.wait_ready("/healthz", 180)
        cfg.url = child.url
    return children


async def replay(
    cfg: Config, wire: str, trajectories: list[Any], run_id: str, log: list[dict[str, Any]]
) -> None:
    """The economy's replaying client on a wire: every turn, after the proxy settled."""
    from tests.support.corpus import turns

    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        for ti, traj in enumerate(trajectories):
            session = f"{run_id}-{cfg.name}-{ti}"
            clock = TurnClock(traj, ti, 30.0)
            for k, (history, _) in enumerate(turns(traj)):
                now = clock.at(len(history))
                await economy.settle(client, cfg)
                key = f"{cfg.name}|{ti}|{k}"
                entry: dict[str, Any] = {"cfg": cfg.name, "ti": ti, "turn": str(k), "now": now}
                try:
                    resp = await replay_wires.send_turn(
                        client, cfg.url, wire, key, session, history, traj.tools, now
                    )
                    entry["status"] = resp.status_code
                    entry["compaction"] = resp.headers.get("x-xun-compaction")
                    if resp.status_code != 200:
                        entry["error"] = resp.text[:300]
                except httpx.HTTPError as exc:
                    entry.update(status=None, error=repr(exc)[:300])
                log.append(entry)


def run_once(
    trajectories: list[Any],
    counter: Counter,
    threshold: int,
    wires: list[str],
    settle: bool,
    reader: bool = False,
) -> dict[str, Any]:
    """One replay of every configuration on fresh proxies: books, coverage and look-back."""
    by_wire = configs_for(wires, threshold, settle)
    configs = [c for cs in by_wire.values() for c in cs]
    upstream = LookUpstream(trajectories, counter, reader)
    scratch = run_dir("lookback")
    server = UvicornThread(upstream.app(), log_level="warning", timeout_keep_alive=600)
    server.start()
    run_id = uuid.uuid4().hex[:8]
    log: list[dict[str, Any]] = []
    started = time.time()
    try:
        children = start(configs, server.url, scratch)
        with running(children):

            async def every() -> None:
                await asyncio.gather(
                    *(
                        replay(c, w, trajectories, run_id, log)
                        for w, cs in by_wire.items()
                        for c in cs
                    )
                )

            asyncio.run(every())
    finally:
        server.stop()
    books = economy.account(configs, trajectories, upstream, log, [0.1])
    out = {w: figures(cs, upstream, books) for w, cs in by_wire.items()}
    return {
        "seconds": round(time.time() - started, 1),
        "scratch": str(scratch),
        "unmatched_requests": upstream.unmatched,
        "errors": sum(1 for e in log if e.get("status") != 200),
        "error_examples": [e.get("error") for e in log if e.get("status") != 200][:3],
        "wires": out,
        "all_wires": overall(out),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="future-reference coverage and look-back cost")
    parser.add_argument("--only", nargs="*", help="trajectories whose name contains one of these")
    parser.add_argument("--threshold", type=int, default=THRESHOLD)
    parser.add_argument("--wires", nargs="+", default=list(replay_wires.WIRES))
    parser.add_argument("--repeat", type=int, default=1, help="runs to compare exactly")
    parser.add_argument(
        "--no-settle",
        dest="settle",
        action="store_false",
        help="send each turn at once, racing the proxy's work in flight (to show the race)",
    )
    parser.add_argument(
        "--reader",
        action="store_true",
        help="the looking-back model also reads the hit its search found",
    )
    parser.add_argument("--tag", default="", help="suffix of the result files")
    args = parser.parse_args(argv)
    # A stopped run still stops its proxies (`running`'s finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from tests.support.corpus import load_all

    started = time.time()
    counter = Counter.create()
    trajectories = load_all()
    if args.only:
        trajectories = [t for t in trajectories if any(s in t.name for s in args.only)]
    runs = []
    for n in range(max(1, args.repeat)):
        print(f"run {n + 1}/{args.repeat}: {len(trajectories)} trajectories", flush=True)
        runs.append(
            run_once(trajectories, counter, args.threshold, args.wires, args.settle, args.reader)
        )
    run = runs[0]
    same = [r["wires"] == run["wires"] for r in runs]
    repeat = {
        "runs": len(runs),
        "identical": all(same),
        "how": HOW if args.settle else "no settling (--no-settle): each turn sent at once",
        "totals": [
            {
                w: {k: v for k, v in fig["total"].items() if k.startswith(("billed_", "cost_"))}
                for w, fig in r["wires"].items()
            }
            for r in runs
        ],
    }
    print_tables(run)
    head = {
        "machine": machine(),
        "commit": git_commit(),
        "argv": sys.argv[1:],
        "seconds": round(time.time() - started, 1),
        "runs_seconds": [r["seconds"] for r in runs],
        "token_counts": counter.source,
        "summariser": local_summary.LABEL,
        "threshold": args.threshold,
        "trajectories": len(trajectories),
        "wires": args.wires,
        "repeat": repeat,
        "unmatched_requests": run["unmatched_requests"],
        "errors": run["errors"],
        "error_examples": run["error_examples"],
        "scratch": run["scratch"],
    }
    cover: dict[str, Any] = {**head, "rule": coverage.__doc__, "wires_detail": {}}
    for wire, fig in run["wires"].items():
        rows = fig["per_trajectory"]
        cover["wires_detail"][wire] = {
            "configs": fig["configs"],
            "per_trajectory": [
                {
                    "trajectory": r["trajectory"],
                    "source": r["source"],
                    "plain": r["coverage_plain"],
                    "look": r["coverage_look"],
                }
                for r in rows
            ],
            "total": {m: fig["total"][f"coverage_{m}"] for m in ("plain", "look")},
            "lowest": {m: lowest(rows, m) for m in ("plain", "look")},
            "targets": targets(fig["total"]),
        }
    everything = run["all_wires"]
    cover["all_wires"] = {m: everything[f"coverage_{m}"] for m in ("plain", "look")}
    cover["targets"] = targets(everything)
    look = {
        **head,
        "model": LookUpstream.__doc__,
        "reader": args.reader,
        "wires_detail": run["wires"],
        "all_wires": everything,
        "targets": targets(everything),
    }
    tag = f"-{args.tag}" if args.tag else ""
    print(f"\nrepeat: {repeat['runs']} run(s), identical: {repeat['identical']}")
    print(f"wrote {write_result('coverage' + tag, cover)}")
    print(f"wrote {write_result('lookback' + tag, look)} ({head['seconds']} s)")
    return 0 if run["errors"] == 0 and repeat["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
