"""The token economy with cache-write prices: the default strategy told each price, side by side.

    for w in 1.0 1.25 2.0; do
      XUN_CACHE_READ_FACTORS='{"": 0.1}' XUN_CACHE_WRITE_FACTORS="{\\"\\": $w}" \\
        python -m tests.bench.economy --skip headroom --cache-factor 0.1 --write-factor $w \\
        --tag writes-w$w
    done
    python -m tests.bench.cache_writes      # prints the block; `tests.bench.report` fills it in

Each run replays the corpus as `tests.bench.economy` does, with every uncached prompt token
billed as a cache write at the run's factor (1.0: writes free, today's figures; 1.25:
Anthropic's 5-minute cache and OpenAI from GPT-5.6 on; 2.0: Anthropic's 1-hour cache), and
the proxy told that factor (`auto_compact.cache_write_factors`), as an operator would tell it.
"""

from __future__ import annotations

from typing import Any

from tests.bench.common import read_result, table

WRITE_FACTORS = ("1.0", "1.25", "2.0")
THRESHOLDS = ("16k", "32k", "64k")
READ = "0.1"


def runs(tag: str = "writes") -> dict[str, dict[str, Any]]:
    found = {w: read_result(f"economy-{tag}-w{w}") for w in WRITE_FACTORS}
    return {w: data for w, data in found.items() if data}


def pct(value: Any) -> str:
    return "" if value is None else f"{value:.1f}"


def costlier(data: dict[str, Any], config: str) -> tuple[list[str], list[str]]:
    """(trajectories that compacted and cost more than direct, those that never compacted
    and cost more), each as `name (+x.x %)`."""
    compacted: list[str] = []
    untouched: list[str] = []
    for entry in data["per_trajectory"]:
        row = entry["configs"].get(config) or {}
        saving = row.get(f"saving_cost_{READ}_pct")
        if saving is None or saving >= 0:
            continue
        label = f"{entry['trajectory']} (+{-saving:.1f} %)"
        (compacted if row["level1"] + row["level2"] else untouched).append(label)
    return compacted, untouched


def totals(data: dict[str, dict[str, Any]], ws: list[str]) -> str:
    """Cost and raw savings against direct, and the trajectories that cost more, by price."""
    heads = ["subset", "threshold"]
    heads += [f"cost saving {w}x %" for w in ws]
    heads += [f"raw saving {w}x %" for w in ws]
    heads += [f"costlier than direct {w}x: compacted + never compacted" for w in ws]
    rows = []
    for subset in ("long", "all"):
        for t in THRESHOLDS:
            name = f"xun@{t}"
            tots = [data[w]["totals"][subset].get(name) or {} for w in ws]
            row: list[Any] = [subset, t]
            row += [pct(tot.get(f"saving_cost_{READ}_pct")) for tot in tots]
            row += [pct(tot.get("saving_pct")) for tot in tots]
            for w in ws:
                picked = [
                    e
                    for e in data[w]["per_trajectory"]
                    if subset == "all" or e["source"] in LONG_SOURCES
                ]
                compacted, untouched = costlier({**data[w], "per_trajectory": picked}, name)
                row.append(f"{len(compacted)} + {len(untouched)}")
            rows.append(row)
    return table(heads, rows)


def notes(data: dict[str, dict[str, Any]], ws: list[str]) -> list[str]:
    """One line per price: the trajectories that cost more than direct, compacted or not."""
    out = []
    for w in ws:
        compacted: list[str] = []
        counts: list[str] = []
        worst: list[tuple[float, str]] = []
        for t in THRESHOLDS:
            lost, untouched = costlier(data[w], f"xun@{t}")
            compacted += [f"{label} at {t}" for label in lost]
            counts.append(f"{len(untouched)} at {t}")
            worst += [(float(u.rsplit("+", 1)[1].split()[0]), u) for u in untouched]
        line = f"- {w}x: compacted and costlier than direct: " + ("; ".join(compacted) or "none")
        if worst:
            line += (
                "; never compacted and costlier (the extract tool's definition in their"
                f" requests): {' / '.join(counts)}, at most {max(worst)[1]}"
            )
        out.append(line + ".")
    return out


def header(data: dict[str, dict[str, Any]], ws: list[str]) -> str:
    first = data[ws[0]]
    return (
        f"{first['trajectories']} trajectories per run; runs at "
        + ", ".join(f"{w}x ({data[w]['seconds']:.0f} s, commit {data[w]['commit']})" for w in ws)
        + "."
    )


def block() -> str:
    data = runs()
    if not data:
        return "(no `economy-writes-w*` results yet)"
    ws = [w for w in WRITE_FACTORS if w in data]
    first = data[ws[0]]
    out = [
        "**Default settings** (`extract_tool: after_compaction`, break-even patience 1). "
        + header(data, ws)
        + f" Token counts: {first['token_counts']}. Cache reads {READ}x; cost = write factor x"
        f" uncached prompt + {READ} x cached prompt + summary completions, direct calls billed"
        " the same way.",
        "",
        totals(data, ws),
        "",
    ]
    heads = ["trajectory", "threshold", "direct peak"]
    heads += [f"cost saving {w}x %" for w in ws]
    heads += [f"L1+L2 {w}x" for w in ws]
    rows = []
    for entry in first["per_trajectory"]:
        peak = entry["configs"]["direct"]["peak"]
        for t in THRESHOLDS:
            if peak <= int(t[:-1]) * 1000:
                continue
            name = f"xun@{t}"
            cells = [by_name(data[w], entry["trajectory"])[name] for w in ws]
            row = [entry["trajectory"], t, f"{peak:,}"]
            row += [pct(c.get(f"saving_cost_{READ}_pct")) for c in cells]
            row += [f"{c['level1']}+{c['level2']}" for c in cells]
            rows.append(row)
    out += [table(heads, rows), "", *notes(data, ws)]
    before = runs("writes-before")
    if before:
        was = [w for w in WRITE_FACTORS if w in before]
        out += [
            "",
            "**Before** (`extract_tool: always`, patience 2: the defaults until this run). "
            + header(before, was),
            "",
            totals(before, was),
        ]
    return "\n".join(out)


LONG_SOURCES = frozenset(
    {"mini-swe-agent-v1", "mini-swe-agent-v2", "claude-code", "openhands", "swe-agent"}
)


def by_name(data: dict[str, Any], trajectory: str) -> dict[str, Any]:
    for entry in data["per_trajectory"]:
        if entry["trajectory"] == trajectory:
            configs: dict[str, Any] = entry["configs"]
            return configs
    raise KeyError(trajectory)


if __name__ == "__main__":
    print(block())
