"""Seed against cost-aware compaction, per trajectory, from two economy runs.

    XUN_CACHE_READ_FACTORS='{"": 0.1}' python -m tests.bench.economy --skip headroom \\
        --compactor seed=proxy.compact:AutoCompactor --compactor cache-aware=cache-aware \\
        --cache-factor 0.1 --tag compactors-c01
    XUN_CACHE_READ_FACTORS='{"": 0.5}' python -m tests.bench.economy --skip headroom \\
        --compactor cache-aware=cache-aware --cache-factor 0.5 --tag compactors-c05
    python -m tests.bench.compactors        # prints the markdown for BENCHMARKS.md

The cost-aware strategy is told the price the replay upstream bills (as an operator sets
`auto_compact.cache_read_factors`), so each price gets its own run; the seed's rules do not
look at prices, so one run gives both of its columns. Headroom's column comes from the main
economy run (`economy.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
THRESHOLDS = ("16k", "32k", "64k")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def pct(value: Any) -> str:
    return "" if value is None else f"{value:.1f}"


def main() -> None:
    c01, c05 = load("economy-compactors-c01.json"), load("economy-compactors-c05.json")
    main_run = load("economy.json")
    headroom = {e["trajectory"]: e["configs"].get("headroom") for e in main_run["per_trajectory"]}
    at05 = {e["trajectory"]: e["configs"] for e in c05["per_trajectory"]}
    print(
        "| trajectory | threshold | direct peak | headroom 0.1x / 0.5x | seed 0.1x / 0.5x | "
        "cost-aware 0.1x / 0.5x | cost-aware raw % | seed L1+L2 (close) | "
        "cost-aware L1+L2 (close) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for entry in c01["per_trajectory"]:
        configs = entry["configs"]
        peak = configs["direct"]["peak"]
        if entry["source"].startswith("tau") or peak <= 16_000:
            continue
        hr = headroom.get(entry["trajectory"]) or {}
        for t in THRESHOLDS:
            if peak <= int(t[:-1]) * 1000:
                continue
            seed, ca = configs[f"seed@{t}"], configs[f"cache-aware@{t}"]
            ca05 = at05[entry["trajectory"]][f"cache-aware@{t}"]
            print(
                f"| {entry['trajectory']} | {t} | {peak:,} | "
                f"{pct(hr.get('saving_cost_0.1_pct'))} / {pct(hr.get('saving_cost_0.5_pct'))} | "
                f"{pct(seed['saving_cost_0.1_pct'])} / {pct(seed['saving_cost_0.5_pct'])} | "
                f"{pct(ca['saving_cost_0.1_pct'])} / {pct(ca05['saving_cost_0.5_pct'])} | "
                f"{pct(ca['saving_pct'])} | {seed['level1']}+{seed['level2']} "
                f"({seed.get('close_summaries', '?')}) | {ca['level1']}+{ca['level2']} "
                f"({ca.get('close_summaries', '?')}) |"
            )
    print()
    print(
        "| totals | threshold | seed 0.1x / 0.5x | cost-aware 0.1x / 0.5x | seed raw % | "
        "cost-aware raw % |"
    )
    print("|---|---|---|---|---|---|")
    for subset in ("long", "all"):
        tot01, tot05 = c01["totals"][subset], c05["totals"][subset]
        for t in THRESHOLDS:
            seed, ca, ca05 = (
                tot01[f"seed@{t}"],
                tot01[f"cache-aware@{t}"],
                tot05[f"cache-aware@{t}"],
            )
            print(
                f"| {subset} | {t} | {pct(seed['saving_cost_0.1_pct'])} / "
                f"{pct(seed['saving_cost_0.5_pct'])} | {pct(ca['saving_cost_0.1_pct'])} / "
                f"{pct(ca05['saving_cost_0.5_pct'])} | {pct(seed['saving_pct'])} | "
                f"{pct(ca['saving_pct'])} |"
            )


if __name__ == "__main__":
    main()
