"""Render the JSON results into the generated blocks of BENCHMARKS.md and its lab notes.

    python -m tests.bench.report

Each block sits between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, in BENCHMARKS.md (the
headline table, `tests.bench.headline`) or in a page of docs/bench/; the text around the blocks
(method, analysis) is written by hand and left alone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.bench import field_phases, headline, lookback_figures
from tests.bench.cache_writes import block as cache_writes_block
from tests.bench.common import ROOT, read_result, table
from tests.bench.trail import report_block as trail_block

DOCS = (ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs" / "bench").glob("*.md")))
TARGET_ORDER = ("direct", "xun-pass", "xun-session", "xun-compact", "litellm", "headroom")


def machine_block() -> str:
    runs = []
    first: dict[str, Any] | None = None
    names = (
        "overhead",
        "overhead-experiments",
        "economy",
        "economy-compactors",
        "scale",
        "wires",
    )
    for name in names:
        data = read_result(name)
        if not data:
            continue
        first = first or data
        m = data["machine"]
        runs.append(
            f"`{name}` at commit {data.get('commit')}, {m['date']}, load average "
            f"{m.get('loadavg_at_start')} at its start"
        )
    if first is None:
        return "(no results yet)"
    m = first["machine"]
    return (
        f"- CPU: {m['cpu']}, {m['nproc']} cores; memory {m.get('memory_gib')} GiB; "
        f"Python {m['python']}; {m['platform']}\n- Runs: " + "; ".join(runs)
    )


def overhead_block() -> str:
    data = read_result("overhead")
    if not data:
        return "(no overhead results yet: run `python -m tests.bench.overhead`)"
    out = [f"Mode: {data['mode']}, {data['seconds']:.0f} s. Setup:"]
    for name, info in data["setup"].items():
        state = "ok" if info.get("ok") else f"NOT RUN: {info.get('error')}"
        version = f" {info['version']}" if info.get("version") else ""
        out.append(
            f"- {name}{version}: {state}"
            + (f"; `{info['command']}`" if info.get("command") else "")
        )
        for note in info.get("notes") or []:
            out.append(f"  - its log: `{note[:160]}`")
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = defaultdict(list)
    for cell in data["cells"].values():
        groups[(cell["size"], cell["stream"])].append(cell)
    for (size, stream), cells in groups.items():
        cells.sort(key=lambda c: c["concurrency"])
        concs = [c["concurrency"] for c in cells]
        out.append(
            f"\n**{size} history ({cells[0]['bytes']:,} bytes, {cells[0]['messages']} messages), "
            f"{'streaming' if stream else 'JSON'}**: req/s (x direct), added p50 / p99 ms"
            + (", added TTFB p50 ms" if stream else "")
            + "\n"
        )
        heads = ["target"] + [f"c={c}" for c in concs]
        rows = []
        for name in TARGET_ORDER:
            row: list[Any] = [name]
            present = False
            for cell in cells:
                r = cell["targets"].get(name)
                if not r or not r.get("n"):
                    row.append("n/a")
                    continue
                present = True
                if name == "direct":
                    text = f"{r['throughput_rps']} req/s; p50 {r['p50_ms']} / p99 {r['p99_ms']} ms"
                    if stream:
                        text += f"; TTFB {r['ttfb_p50_ms']}"
                else:
                    text = (
                        f"{r['throughput_rps']} ({r.get('throughput_vs_direct')}x); "
                        f"+{r.get('added_p50_ms')} / +{r.get('added_p99_ms')}"
                    )
                    if stream:
                        text += f"; +{r.get('added_ttfb_p50_ms')}"
                if r.get("errors"):
                    text += f"; {r['errors']} errors"
                if r.get("wrong_compaction"):
                    text += f"; {r['wrong_compaction']} not compacted"
                row.append(text)
            if present:
                rows.append(row)
        out.append(table(heads, rows))
    out.append("\n**Ratios at 50 KB** (xun-proxy's compacting path, c, against the peers)\n")
    rows = []
    for cell in sorted(data["cells"].values(), key=lambda c: (c["stream"], c["concurrency"])):
        if cell["size"] != "50KB":
            continue
        r = cell["targets"].get("xun-session") or {}
        rows.append(
            [
                f"{'stream' if cell['stream'] else 'json'} c={cell['concurrency']}",
                r.get("added_p50_share_of_litellm"),
                r.get("added_p50_share_of_headroom"),
                r.get("throughput_vs_litellm"),
                r.get("throughput_vs_headroom"),
            ]
        )
    out.append(
        table(
            [
                "cell",
                "added p50 / LiteLLM's",
                "added p50 / Headroom's",
                "throughput / LiteLLM's",
                "throughput / Headroom's",
            ],
            rows,
        )
    )
    out.append("\n**Targets**\n")
    out.append(
        table(
            ["target", "measured", "met"],
            [[c["target"], c["value"], c["met"]] for c in data["checks"]],
        )
    )
    buf = data.get("buffering") or {}
    out.append(
        "\n**No buffering**: the upstream spaces its stream events 150 ms apart; a relay that "
        "buffers would deliver them together.\n"
    )
    out.append(
        table(
            [
                "target",
                "content events",
                "first (ms)",
                "spread (ms)",
                "expected spread",
                "unbuffered",
            ],
            [
                [
                    k,
                    v.get("content_events"),
                    v.get("first_ms"),
                    v.get("spread_ms"),
                    v.get("expected_spread_ms"),
                    v.get("streams_unbuffered", v.get("error")),
                ]
                for k, v in buf.items()
            ],
        )
    )
    rss = data.get("rss_mib_at_end") or {}
    out.append(
        "\nResident memory at the end of the run (MiB): "
        + ", ".join(f"{k} {v}" for k, v in rss.items())
    )
    return "\n".join(out)


def economy_block() -> str:
    data = read_result("economy")
    if not data:
        return "(no economy results yet: run `python -m tests.bench.economy`)"
    f0 = data["cache_factors"][0]
    out = [
        f"Mode: {data['mode']}, {data['trajectories']} trajectories, {data['seconds']:.0f} s. "
        f"Token counts: {data['token_counts']}. Summaries: {data['summariser']}. "
        f"Cache model: {data['cache_model']}.",
    ]
    for name, info in data["setup"].items():
        if not info.get("ok"):
            out.append(f"- {name}: NOT RUN: {info.get('error')}")
        for note in info.get("notes") or []:
            out.append(f"- {name}'s log: `{note[:160]}`")
    for subset, title in (
        ("all", "all trajectories"),
        ("long", "the long (SWE, Claude Code, OpenHands) trajectories"),
    ):
        out.append(
            f"\n**Totals over {title}** (saving against direct; cost = uncached prompt "
            f"+ {f0} x cached prompt + summary completions)\n"
        )
        rows = []
        for name, t in data["totals"][subset].items():
            p = t["probe"]
            rows.append(
                [
                    name,
                    t["trajectories"],
                    t["billed"],
                    t["peak"],
                    t["level1"],
                    t["level2"],
                    t["summary_calls"],
                    t["summary_tokens"],
                    t.get("saving_pct"),
                    t.get(f"saving_cost_{f0}_pct"),
                    t.get("saving_cost_0.5_pct"),
                    t["costlier_than_direct_by_1pct"].get(str(f0)),
                    t["costlier_than_direct_by_1pct"].get("0.5"),
                    f"{p.get('placeholders_retrieved', 0)}/{p.get('placeholders', 0)}"
                    if name not in ("direct", "headroom")
                    else "",
                    t["errors"],
                ]
            )
        out.append(
            table(
                [
                    "config",
                    "traj.",
                    "prompt+summary tokens",
                    "peak prompt",
                    "L1 turns",
                    "L2 turns",
                    "summary calls",
                    "summary tokens",
                    "saving %",
                    f"cost saving {f0}x %",
                    "cost saving 0.5x %",
                    f"traj. costlier {f0}x",
                    "traj. costlier 0.5x",
                    "placeholders retrieved",
                    "errors",
                ],
                rows,
            )
        )
    out.append("\n**Per trajectory** (long ones one by one; the short tau / tau2 runs grouped)\n")
    rows = []
    grouped: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    direct_group: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in data["per_trajectory"]:
        long = e["source"] not in ("tau-bench", "tau2-bench")
        for name, r in e["configs"].items():
            if long:
                rows.append(
                    [
                        e["trajectory"],
                        name,
                        r["turns"],
                        r["billed"],
                        r["peak"],
                        r["level1"],
                        r["level2"],
                        r["summary_calls"],
                        r.get("saving_pct"),
                        r.get(f"saving_cost_{f0}_pct"),
                        r.get("saving_cost_0.5_pct"),
                    ]
                )
            else:
                g = grouped[(e["source"], name)]
                for k in (
                    "turns",
                    "billed",
                    "level1",
                    "level2",
                    "summary_calls",
                    f"cost_{f0}",
                    "cost_0.5",
                ):
                    g[k] += r.get(k, 0)
                g["peak"] = max(g["peak"], r["peak"])
                g["n"] += 1
                if name == "direct":
                    direct_group[e["source"]] = g
    for (source, name), g in grouped.items():
        base = direct_group.get(source) or {}

        def pct(key: str, g: dict[str, float] = g, base: dict[str, float] = base) -> float | None:
            return round(100 * (1 - g[key] / base[key]), 2) if base.get(key) else None

        rows.append(
            [
                f"{source} ({int(g['n'])} runs)",
                name,
                int(g["turns"]),
                int(g["billed"]),
                int(g["peak"]),
                int(g["level1"]),
                int(g["level2"]),
                int(g["summary_calls"]),
                pct("billed"),
                pct(f"cost_{f0}"),
                pct("cost_0.5"),
            ]
        )
    out.append(
        table(
            [
                "trajectory",
                "config",
                "turns",
                "prompt+summary tokens",
                "peak",
                "L1",
                "L2",
                "summaries",
                "saving %",
                f"cost saving {f0}x %",
                "cost saving 0.5x %",
            ],
            rows,
        )
    )
    return "\n".join(out)


def compactors_block() -> str:
    """Totals of `economy.py --compactor ...` (strategies side by side, Headroom left out)."""
    data = read_result("economy-compactors")
    if not data:
        return "(no strategy comparison yet: see `economy.py --compactor`)"
    f0 = data["cache_factors"][0]
    out = [
        f"{data['trajectories']} trajectories, {data['seconds']:.0f} s; strategies: "
        + ", ".join(
            f"`{name.split('@')[0]}` = `{c['compactor']}`"
            for name, c in data["configs"].items()
            if c.get("compactor") and name.endswith("@16k")
        )
        + ".\n"
    ]
    for subset in ("all", "long"):
        rows = []
        for name, t in data["totals"][subset].items():
            rows.append(
                [
                    f"{name} ({subset})",
                    t["billed"],
                    t["peak"],
                    t["summary_calls"],
                    t.get("saving_pct"),
                    t.get(f"saving_cost_{f0}_pct"),
                    t.get("saving_cost_0.5_pct"),
                    t["costlier_than_direct_by_1pct"].get(str(f0)),
                    t["costlier_than_direct_by_1pct"].get("0.5"),
                ]
            )
        out.append(
            table(
                [
                    "config",
                    "prompt+summary tokens",
                    "peak",
                    "summary calls",
                    "saving %",
                    f"cost saving {f0}x %",
                    "cost saving 0.5x %",
                    f"traj. costlier {f0}x",
                    "traj. costlier 0.5x",
                ],
                rows,
            )
        )
        out.append("")
    return "\n".join(out).rstrip()


def scale_block() -> str:
    data = read_result("scale")
    if not data:
        return "(no scale results yet: run `python -m tests.bench.scale`)"
    out = []
    rows = []
    for backend, d in data["memory"].items():
        if "error" in d:
            rows.append([backend, "n/a", "n/a", "n/a", "n/a", d["error"]])
            continue
        for r in d["rows"]:
            rows.append(
                [
                    backend,
                    r["sessions"],
                    r.get("stored_sessions", r.get("store_keys")),
                    r["rss_mib"],
                    r.get("store_mib"),
                    r.get("failures"),
                ]
            )
    out.append(
        "**Proxy resident memory against sessions stored** (one 2 KB chat turn per new session)\n"
    )
    out.append(
        table(
            [
                "store",
                "sessions",
                "in the store (SQLite rows / Redis keys)",
                "proxy RSS (MiB)",
                "store size (MiB)",
                "failed requests",
            ],
            rows,
        )
    )
    out.append("")
    for backend, d in data["memory"].items():
        if "rss_growth_1k_to_10k_pct" in d:
            g = d["rss_growth_1k_to_10k_pct"]
            verdict = "within 10%: target met" if g is not None and g <= 10 else "target missed"
            out.append(f"- {backend}: RSS growth from 1,000 to 10,000 sessions: {g} % ({verdict})")
    cpu = data.get("cpu")
    if cpu:
        out.append("\n**Per-request CPU time against history size** (best of runs, CPU time)\n")
        out.append(
            table(
                [
                    "tokens",
                    "messages",
                    "body bytes",
                    "fingerprint ms",
                    "rebuild ms",
                    "whole turn ms",
                    "turn us / 1k tokens",
                    "whole turn ms, session with 300 turns kept",
                ],
                [
                    [
                        r["tokens"],
                        r["messages"],
                        r["body_bytes"],
                        r["fingerprint_ms"],
                        r["rebuild_ms"],
                        r["turn_ms"],
                        r["turn_us_per_ktok"],
                        r.get("turn300_ms"),
                    ]
                    for r in cpu["rows"]
                ],
            )
        )
        out.append("\nGrowth (fit of time = a x tokens^b over 5k..200k tokens):\n")
        out.append(
            table(
                ["measure", "exponent b", "R^2", "per-token cost at 200k / at 10k", "linear"],
                [
                    [k, v["exponent"], v["r2"], v["per_token_ratio_200k_vs_10k"], v["linear"]]
                    for k, v in cpu["fits"].items()
                ],
            )
        )
    return "\n".join(out)


def experiments_block(name: str = "overhead-experiments") -> str:
    """An overhead run with proposed hot-path changes side by side (`--variant`)."""
    data = read_result(name)
    if not data:
        return "(no experiment results: see `overhead.py --variant`)"
    names = [n for n in next(iter(data["cells"].values()))["targets"] if n.startswith("xun-")]
    labels = {
        name: name.replace("xun-session", "session").replace("xun-pass", "pass") for name in names
    }
    rows = []
    for key, cell in data["cells"].items():
        row: list[Any] = [key]
        for name in names:
            r = cell["targets"].get(name) or {}
            row.append(f"+{r.get('added_p50_ms')} ms, {r.get('throughput_rps')}/s")
        rows.append(row)
    argv = data.get("argv") or []
    specs = [argv[i + 1] for i, a in enumerate(argv) if a == "--variant" and i + 1 < len(argv)]
    specs = [s.replace(str(Path.home()), "~") for s in specs]
    head = (
        f"{data['mode']} run at commit {data.get('commit')}, {data['seconds']:.0f} s, same "
        "interleaving as above, peers left "
        "out; each cell: added p50 over direct, throughput. Variants (`--variant "
        "LABEL=PATCHES[@PYTHON]`, patches from `tests/bench/patched.py`): "
        + "; ".join(f"`{s}`" for s in specs)
        + ".\n"
    )
    return head + "\n" + table(["cell", *(labels[n] for n in names)], rows)


def wires_block(name: str = "wires") -> str:
    """`wires.py`: the three wire formats side by side, and one session under concurrency."""
    data = read_result(name)
    if not data:
        return "(no wire results yet: run `python -m tests.bench.wires`)"
    cells = data["cells"]

    def row(key: str, target: str) -> dict[str, Any]:
        return (cells.get(key) or {}).get("targets", {}).get(target) or {}

    out = [
        f"Mode: {data['mode']}, {data['seconds']:.0f} s, commit {data.get('commit')}, load "
        f"average {data['machine'].get('loadavg_at_start')} at its start. `{data['command']}` "
        f"with `XUN_CACHE_READ_FACTORS='{data['env']['XUN_CACHE_READ_FACTORS']}'`."
        + "".join(
            f" `[{label}]`: the proxy from `{info['dir']}`"
            + (f" (commit {info['commit']})" if info.get("commit") else "")
            + " beside it."
            for label, info in (data.get("compared") or {}).items()
        )
        + "\n",
        "**Per wire, 50 KB history**: added over direct (ms); CPU = the proxy process's CPU "
        "time per request (from `/proc`, c=1 JSON); throughput at c=16 (JSON) and its ratio "
        "to direct.\n",
    ]
    rows = []
    for wire, size in data["sizes"].items():
        direct = row("json/c1", f"{wire}/direct")
        session = row("json/c1", f"{wire}/session")
        passed = row("json/c1", f"{wire}/pass")
        streamed = row("stream/c1", f"{wire}/session")
        busy = row("json/c16", f"{wire}/session")
        busy_pass = row("json/c16", f"{wire}/pass")
        busy_direct = row("json/c16", f"{wire}/direct")
        others = []
        for label in data.get("compared") or {}:
            other = row("json/c1", f"{wire}/session[{label}]")
            others.append(f"+{other.get('added_p50_ms')}; {other.get('proxy_cpu_ms_per_request')}")
        rows.append(
            [
                wire,
                f"{size['bytes']:,} B, {size['messages']} msgs",
                direct.get("p50_ms"),
                f"+{session.get('added_p50_ms')} / +{session.get('added_p90_ms')}",
                f"+{passed.get('added_p50_ms')}",
                f"+{streamed.get('added_ttfb_p50_ms')}",
                f"{session.get('proxy_cpu_ms_per_request')} "
                f"({passed.get('proxy_cpu_ms_per_request')})",
                busy_direct.get("throughput_rps"),
                f"{busy.get('throughput_rps')} ({busy.get('throughput_vs_direct')}x)",
                f"{busy_pass.get('throughput_rps')} ({busy_pass.get('throughput_vs_direct')}x)",
                *others,
            ]
        )
    out.append(
        table(
            [
                "wire",
                "history",
                "direct p50, c=1",
                "session: added p50 / p90, c=1",
                "pass: added p50",
                "session: added first byte p50 (stream)",
                "CPU ms/req session (pass)",
                "direct req/s, c=16",
                "session req/s, c=16",
                "pass req/s, c=16",
                *(
                    f"session [{label}]: added p50; CPU ms/req"
                    for label in data.get("compared") or {}
                ),
            ],
            rows,
        )
    )
    for wire, shared in (data.get("shared") or {}).items():
        out.append(
            f"\n**One session under concurrency** ({wire}, 50 KB, JSON, 16 connections; "
            f"`-over`: threshold {data['over_threshold']} tokens, the cost-aware strategy "
            "declining to compact)\n"
        )
        rows = []
        for name, r in shared["targets"].items():
            lease = r.get("lease")
            rows.append(
                [
                    name,
                    r.get("throughput_rps"),
                    r.get("throughput_vs_direct"),
                    r.get("p50_ms"),
                    r.get("p90_ms"),
                    r.get("proxy_ms_p50"),
                    r.get("proxy_cpu_ms_per_request"),
                    ", ".join(f"{k} {v}" for k, v in lease.items()) if lease else "",
                    r.get("errors"),
                    ", ".join(f"{k} {v}" for k, v in (r.get("unexpected_compaction") or {}).items())
                    or "0",
                ]
            )
        out.append(
            table(
                [
                    "target",
                    "req/s",
                    "x direct",
                    "p50 ms",
                    "p90 ms",
                    "proxy ms p50",
                    "CPU ms/req",
                    "lease (access log)",
                    "errors",
                    "answers not `none`",
                ],
                rows,
            )
        )
    out.append("\n**Targets**\n")
    out.append(
        table(
            ["target", "measured", "met"],
            [[c["target"], c["value"], c["met"]] for c in data["checks"]],
        )
    )
    buf = data.get("buffering") or {}
    if buf:
        unbuffered = [k for k, v in buf.items() if v.get("streams_unbuffered")]
        out.append(
            f"\nNo buffering (events spaced {150} ms by the upstream): "
            f"{len(unbuffered)} of {len(buf)} targets keep the spacing"
            + (
                ""
                if len(unbuffered) == len(buf)
                else f" (not: {', '.join(k for k in buf if k not in unbuffered)})"
            )
            + "."
        )
    return "\n".join(out)


BLOCKS = {
    "headline": headline.render,
    "machine": machine_block,
    "overhead": overhead_block,
    "economy": economy_block,
    "scale": scale_block,
    "compactors": compactors_block,
    "cache-writes": cache_writes_block,
    "experiments": experiments_block,
    "experiments-head": lambda: experiments_block("overhead-experiments-head"),
    "trail": trail_block,
    "wires": wires_block,
    "field": lambda: field_phases.report_block(read_result("field")),
    "lookback": lambda: lookback_figures.report_block(read_result("lookback-32k")),
}


def update() -> None:
    for doc in DOCS:
        text = doc.read_text()
        for name, render in BLOCKS.items():
            pattern = re.compile(
                rf"(<!-- bench:{name} -->\n)(?:.*?\n)?(<!-- /bench:{name} -->)", re.DOTALL
            )
            if not pattern.search(text):
                continue
            body = render()
            text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
        doc.write_text(text)
        print(f"updated {doc}")


if __name__ == "__main__":
    update()
