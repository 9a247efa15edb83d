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
import sys
import time
import uuid
from typing import Any

import httpx

from tests.bench import coverage, economy, local_summary, replay_wires
from tests.bench.common import (
    git_commit,
    machine,
    print_header,
    run_dir,
    running,
    table,
    write_result,
    xun_proxy,
)
from tests.bench.coverage import Tally
from tests.bench.economy import Config, TurnClock
from tests.bench.lookback_model import LookUpstream
from tests.bench.tokens import Counter
from tests.support.servers import UvicornThread

THRESHOLD = 32_000
TARGETS = {"visible": 92.0, "visible_or_read": 97.0, "reachable": 99.5}
LOOK_TARGET_PCT = 10.0
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
    trajectories: list[Any], counter: Counter, threshold: int, wires: list[str], settle: bool
) -> dict[str, Any]:
    """One replay of every configuration on fresh proxies: books, coverage and look-back."""
    by_wire = configs_for(wires, threshold, settle)
    configs = [c for cs in by_wire.values() for c in cs]
    upstream = LookUpstream(trajectories, counter)
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


def figures(configs: list[Config], up: LookUpstream, books: dict[str, Any]) -> dict[str, Any]:
    """Per trajectory that compacts (under either model): coverage of both, billing of all."""
    direct, plain, look = (c.name for c in configs)
    names = {"direct": direct, "plain": plain, "look": look}
    rows = []
    for ti, entry in enumerate(books["per_trajectory"]):
        if (plain, ti) not in up.compacted and (look, ti) not in up.compacted:
            continue
        row: dict[str, Any] = {"trajectory": entry["trajectory"], "source": entry["source"]}
        for model in ("plain", "look"):
            tally = up.tallies.get((names[model], ti)) or Tally()
            shown = up.misses.get((names[model], ti)) or []
            row[f"coverage_{model}"] = {**tally.as_dict(), "not_visible": shown}
        for model, name in names.items():
            b = entry["configs"][name]
            row[f"billed_{model}"], row[f"cost_0.1_{model}"] = b["billed"], b["cost_0.1"]
            row[f"errors_{model}"] = b["errors"]
        row["look"] = dict(up.looks.get((look, ti)) or {})
        rounds = [r for r in up.records if r["cfg"] == look and r["ti"] == ti and r.get("round")]
        prompt, cached = sum(r["prompt"] for r in rounds), sum(r["cached"] for r in rounds)
        row["look"]["rounds_billed"] = prompt
        row["look"]["rounds_cost_0.1"] = round(prompt - cached + 0.1 * cached, 1)
        rows.append(row)
    return {"configs": names, "per_trajectory": rows, "total": total(rows)}


def total(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"trajectories": len(rows)}
    for model in ("plain", "look"):
        tally = Tally()
        for row in rows:
            part = Tally()
            for name in coverage.CATEGORIES:
                part.counts[name] = row[f"coverage_{model}"][name]
            part.examples = list(row[f"coverage_{model}"]["ex"])
            tally.merge(part)
        out[f"coverage_{model}"] = tally.as_dict()
    for field in ("billed", "cost_0.1", "errors"):
        for model in ("direct", "plain", "look"):
            out[f"{field}_{model}"] = round(sum(r[f"{field}_{model}"] for r in rows), 1)
    looks: dict[str, float] = {}
    for row in rows:
        for name, n in row["look"].items():
            looks[name] = round(looks.get(name, 0) + n, 1)
    out["look"] = looks
    add_costs(out)
    for row in rows:
        add_costs(row)
    return out


def add_costs(row: dict[str, Any]) -> None:
    for field in ("billed", "cost_0.1"):
        row[f"added_{field}_pct"] = pct(row[f"{field}_look"], row[f"{field}_plain"])
        row[f"saving_{field}_plain_pct"] = pct(row[f"{field}_plain"], row[f"{field}_direct"])
        row[f"saving_{field}_look_pct"] = pct(row[f"{field}_look"], row[f"{field}_direct"])


def overall(wires: dict[str, Any]) -> dict[str, Any]:
    rows = [r for w in wires.values() for r in w["per_trajectory"]]
    return total(rows)


def pct(value: float, base: float) -> float | None:
    return round(100 * (value / base - 1), 2) if base else None


def targets(tot: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in ("plain", "look"):
        shares = tot[f"coverage_{model}"]["pct"]
        out[model] = {
            k: {"target": v, "got": shares[k], "holds": (shares[k] or 0) >= v}
            for k, v in TARGETS.items()
        }
    added = tot["added_billed_pct"]
    out["look_back_added_billed_pct"] = {
        "target": LOOK_TARGET_PCT,
        "got": added,
        "holds": added is not None and added <= LOOK_TARGET_PCT,
    }
    return out


def lowest(rows: list[dict[str, Any]], model: str, n: int = 3) -> list[dict[str, Any]]:
    key = f"coverage_{model}"
    ranked = sorted(
        (r for r in rows if r[key]["literals"]),
        key=lambda r: (r[key]["pct"]["visible"], r[key]["pct"]["reachable"], r["trajectory"]),
    )
    return [
        {"trajectory": r["trajectory"], "literals": r[key]["literals"], **r[key]["pct"]}
        for r in ranked[:n]
    ]


def coverage_rows(rows: list[dict[str, Any]], tot: dict[str, Any], model: str) -> list[Any]:
    out = []
    for r in [*rows, {"trajectory": "**total**", **tot}]:
        c = r[f"coverage_{model}"]
        p = c["pct"]
        out.append(
            [r["trajectory"], c["literals"], p["visible"], p["read"], p["search"], p["unreachable"]]
        )
    return out


def cost_rows(rows: list[dict[str, Any]], tot: dict[str, Any]) -> list[Any]:
    out = []
    for r in [*rows, {"trajectory": "**total**", **tot}]:
        lk = r["look"]
        out.append(
            [
                r["trajectory"],
                r["billed_direct"],
                r["billed_plain"],
                r["billed_look"],
                r["added_billed_pct"],
                r["cost_0.1_plain"],
                r["cost_0.1_look"],
                r["added_cost_0.1_pct"],
                *(lk.get(k, 0) for k in LOOK_FIELDS),
            ]
        )
    return out


COVERAGE_HEADS = ["trajectory", "literals", "visible %", "read %", "search %", "unreachable %"]
COST_HEADS = [
    "trajectory",
    "billed direct",
    "billed never looks",
    "billed looks back",
    "added %",
    "cost 0.1x never looks",
    "cost 0.1x looks back",
    "added %",
    "turns looking",
    "rounds",
    "rounds billed",
    "rounds cost 0.1x",
    "reads",
    "searches",
    "found",
    "missed",
]
LOOK_FIELDS = (
    "turns",
    "rounds",
    "rounds_billed",
    "rounds_cost_0.1",
    "reads",
    "searches",
    "found",
    "missed",
)


def print_tables(run: dict[str, Any]) -> None:
    for wire, fig in run["wires"].items():
        for model in ("plain", "look"):
            name = fig["configs"][model]
            print_header(
                f"Future-reference coverage, {name} (from each session's first compaction)"
            )
            print(table(COVERAGE_HEADS, coverage_rows(fig["per_trajectory"], fig["total"], model)))
        print_header(f"What looking back costs, {wire} (billed = prompt + summary tokens)")
        print(table(COST_HEADS, cost_rows(fig["per_trajectory"], fig["total"])))
    tot = run["all_wires"]
    print_header("All wires")
    rows = []
    for model in ("plain", "look"):
        c = tot[f"coverage_{model}"]
        rows.append([model, c["literals"], *(c["pct"][k] for k in coverage.CATEGORIES)])
    print(table(["model", "literals", "visible %", "read %", "search %", "unreachable %"], rows))
    print(
        f"look-back adds {tot['added_billed_pct']} % billed, {tot['added_cost_0.1_pct']} % at 0.1x"
    )


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
    parser.add_argument("--tag", default="", help="suffix of the result files")
    args = parser.parse_args(argv)
    from tests.support.corpus import load_all

    started = time.time()
    counter = Counter.create()
    trajectories = load_all()
    if args.only:
        trajectories = [t for t in trajectories if any(s in t.name for s in args.only)]
    runs = []
    for n in range(max(1, args.repeat)):
        print(f"run {n + 1}/{args.repeat}: {len(trajectories)} trajectories", flush=True)
        runs.append(run_once(trajectories, counter, args.threshold, args.wires, args.settle))
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
