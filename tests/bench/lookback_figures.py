"""The look-back benchmark's figures (`tests.bench.lookback`): coverage and billing per
trajectory that compacts, their totals, the issue's targets, and the tables printed."""

from __future__ import annotations

from typing import Any

from tests.bench import coverage
from tests.bench.common import print_header, table
from tests.bench.coverage import Tally
from tests.bench.economy import Config
from tests.bench.lookback_model import LookUpstream

TARGETS = {"visible": 92.0, "visible_or_read": 97.0, "reachable": 99.5}
LOOK_TARGET_PCT = 10.0  # what looking back may add to the billed prompt tokens, at most


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
        for model in ("plain", "look"):
            more = pct(row[f"{field}_{model}"], row[f"{field}_direct"])
            row[f"saving_{field}_{model}_pct"] = None if more is None else -more


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
            low = lowest(fig["per_trajectory"], model)
            print(
                "\nlowest visible: " + "; ".join(f"{r['trajectory']} {r['visible']} %" for r in low)
            )
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
    for name, checks in targets(tot).items():
        if "target" in checks:
            checks = {"added billed %": checks}
        shown = ", ".join(
            f"{k} {v['got']} (target {v['target']}: {'holds' if v['holds'] else 'fails'})"
            for k, v in checks.items()
        )
        print(f"targets, {name}: {shown}")


def report_block(run: dict[str, Any]) -> str:
    """The lab notes' tables of a `tests.bench.lookback` results file: coverage per trajectory
    (Chat Completions; the other wires' totals after it), the targets, and the cost of looking
    back, as `python -m tests.bench.report` writes them into docs/bench/lookback.md."""
    detail = run["wires_detail"]
    chat = detail["chat"]
    rows = coverage_rows(chat["per_trajectory"], chat["total"], "plain")
    rows[-1][0] = "**total, chat**"
    for wire in ("responses", "messages"):
        if wire in detail:
            c = detail[wire]["total"]["coverage_plain"]
            p = c["pct"]
            rows.append([f"**total, {wire}**", c["literals"], *(p[k] for k in coverage.CATEGORIES)])
    c = run["all_wires"]["coverage_plain"]
    rows.append(
        ["**total, three wires**", c["literals"], *(c["pct"][k] for k in coverage.CATEGORIES)]
    )
    out = [
        f"Run: {run['machine'].get('date', '?')}, commit {run.get('commit', '?')}, "
        f"threshold {run.get('threshold')}, {run.get('trajectories')} trajectories "
        "that compact.",
        "",
        "**Coverage, the model that never looks back** (Chat Completions per trajectory)",
        "",
        table(COVERAGE_HEADS, rows),
        "",
        "**Targets**",
        "",
    ]
    checks = []
    for model, group in run["targets"].items():
        if not isinstance(group, dict) or "target" in group:
            continue
        for name, t in group.items():
            checks.append([f"{model}: {name}", f">= {t['target']}", t["got"], t["holds"]])
    added = run["targets"].get("look_back_added_billed_pct")
    if isinstance(added, dict):
        checks.append(
            ["look-back: added billed %", f"<= {added['target']}", added["got"], added["holds"]]
        )
    out += [table(["target", "wanted", "measured", "holds"], checks), ""]
    out += [
        "**What looking back costs** (Chat Completions; billed = prompt + summary tokens)",
        "",
        table(COST_HEADS, cost_rows(chat["per_trajectory"], chat["total"])),
    ]
    return "\n".join(out)
