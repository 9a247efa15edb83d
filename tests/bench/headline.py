"""The headline table of BENCHMARKS.md, rendered from the results files.

    python3 -m tests.bench.headline            # print the table
    python3 -m tests.bench.headline --write    # write it between BENCHMARKS.md's markers
    python3 -m tests.bench.headline --check    # exit 1 when BENCHMARKS.md's table differs

The table sits between `<!-- bench:headline -->` and `<!-- /bench:headline -->` (so
`python -m tests.bench.report` and `tests.bench.all` rewrite it too). Every figure is read from
the results file its row names in SOURCES, and every row carries the date, the commit (the
repository's HEAD when the run started) and the machine of that file's run.
`tests/test_figures.py` renders it again and fails when BENCHMARKS.md's table differs.

The coverage row (issue 35: the literals a recorded agent's next action uses that compaction
left visible, one read away, one search away or unreachable) appears only when the file
`SOURCES["coverage"]` names exists (the whole corpus's run).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
DOC = ROOT / "BENCHMARKS.md"
MARKERS = ("<!-- bench:headline -->\n", "<!-- /bench:headline -->")

# The results file each figure comes from (tests/bench/results/<name>.json).
SOURCES = {
    # tests.bench.field: xun-proxy's session path, LiteLLM and Headroom in the same rounds
    "overhead": "field",
    # tests.bench.economy at the default settings (cost-aware, summaries ahead, the extract
    # tool in every request, look-back's trail of code names, as shipped)
    "economy": "economy-final",
    # section 2's run, the only one with Headroom in the replay
    "economy-headroom": "economy",
    # the default strategy with every uncached prompt token billed as a cache write at 1.25x
    "economy-writes": "economy-writes-final-w1.25",
    "scale": "scale",
    # tests.bench.lookback over the whole corpus, every wire (coverage-repeat and -race are its
    # reproducibility runs on one trajectory)
    "coverage": "coverage-32k",
    # the same run's books: what a replay model that looks back before it acts adds
    "lookback": "lookback-32k",
}
PEERS = ("xun", "litellm", "headroom")
THRESHOLD = "32k"
HEADERS = ["figure", "xun-proxy", "LiteLLM", "Headroom", "run"]


class Runs:
    """The results files read so far, and the machines their runs were on (M1, M2, ...)."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.machines: list[str] = []

    def load(self, name: str) -> dict[str, Any]:
        path = self.results / f"{name}.json"
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def run(self, name: str, data: dict[str, Any]) -> str:
        """`<name>.json`: date, commit, machine label, load average at its start."""
        m = data.get("machine") or {}
        desc = (
            f"{m.get('cpu')}, {m.get('nproc')} cores, {m.get('memory_gib')} GiB, "
            f"Python {m.get('python')}, {m.get('platform')}"
        )
        if desc not in self.machines:
            self.machines.append(desc)
        label = f"M{self.machines.index(desc) + 1}"
        date = str(m.get("date", "date unknown"))[:10]
        load = (m.get("loadavg_at_start") or ["?"])[0]
        tokens = str(data.get("token_counts", ""))
        counted = "; tokens " + ("o200k_base" if tokens.startswith("tiktoken") else "chars/4")
        return f"`{name}.json`: {date}, {data.get('commit')}, {label}, load {load}" + (
            counted if tokens else ""
        )


def _num(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def _added(value: float, base: float) -> str:
    return f"{value - base:+.2f}"


def overhead_rows(runs: Runs) -> Iterator[list[str]]:
    name = SOURCES["overhead"]
    data = runs.load(name)
    res, run = data["results"], runs.run(name, data)
    c1, tp, st = res["c1"], res["throughput"], res["streams"]
    d = c1["direct"]

    def row(figure: str, cell: Callable[[str], str]) -> list[str]:
        return [figure, *(cell(p) for p in PEERS), run]

    yield row(
        "Added latency, 50 KB history, 1 request at a time: p50 / p99 ms over direct",
        lambda p: f"{_added(c1[p]['p50'], d['p50'])} / {_added(c1[p]['p99'], d['p99'])}",
    )
    yield row("CPU per request, 1 request at a time: us", lambda p: f"{c1[p]['cpu_us']:,}")
    yield row(
        "Throughput, 50 KB, 16 connections: req/s (x LiteLLM's)",
        lambda p: f"{_num(tp[p]['rps'], 1)} ({tp[p]['rps'] / tp['litellm']['rps']:.1f}x)",
    )
    yield row(
        "Streams: p99 gap between chunks, x direct's",
        lambda p: f"{st[p]['gap_p99'] / st['direct']['gap_p99']:.2f}x",
    )
    big = res["histories"]["4MB"]
    yield row(
        "4 MB history growing a tool turn a request: added p50 ms",
        lambda p: _added(big[p]["p50"], big["direct"]["p50"]),
    )
    yield row(
        "Resident memory, idle / peak under load: MiB",
        lambda p: f"{res['memory_idle_mib'][p]} / {tp[p]['memory_load_mib']}",
    )


def _totals(data: dict[str, Any], config: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return data["totals"]["long"][config], data["totals"]["all"][config]


# The extract tool's definition at most, in tokens (tests/session/test_extract_tool_size.py):
# with `extract_tool: always` every request of a session with tools carries it.
DEFINITION_TOKENS = 60


def _costlier(data: dict[str, Any], config: str, price: str = "0.1") -> int:
    """Trajectories whose cost through `config` is above direct calls' (any amount)."""
    return sum(
        1
        for entry in data["per_trajectory"]
        if (entry["configs"].get(config) or {}).get(f"saving_cost_{price}_pct", 0) < 0
    )


def _costlier_beyond_tool(data: dict[str, Any], config: str, price: str = "0.1") -> int:
    """Trajectories costlier through `config` than direct by more than the extract tool's
    definition in every request, each billed at most as a cache write."""
    write = float(data.get("write_factor") or 1.0)
    count = 0
    for entry in data["per_trajectory"]:
        mine, direct = entry["configs"].get(config), entry["configs"].get("direct")
        if not mine or not direct:
            continue
        allowed = DEFINITION_TOKENS * int(mine.get("turns") or 0) * write
        count += mine[f"cost_{price}"] > direct[f"cost_{price}"] + allowed
    return count


def _costlier_cell(data: dict[str, Any], config: str) -> str:
    n = len(data["per_trajectory"])
    return (
        f"{_costlier_beyond_tool(data, config)} of {n} "
        f"({_costlier(data, config)} by at most the tool's definition)"
    )


def _saving(long: dict[str, Any], whole: dict[str, Any], key: str) -> str:
    return f"{long[key]:.1f} / {whole[key]:.1f}"


def economy_rows(runs: Runs) -> Iterator[list[str]]:
    config = f"xun@{THRESHOLD}"
    name, peer = SOURCES["economy"], SOURCES["economy-headroom"]
    data, hr = runs.load(name), runs.load(peer)
    run = runs.run(name, data) + "; Headroom: " + runs.run(peer, hr)
    xl, xa = _totals(data, config)
    hl, ha = _totals(hr, "headroom")
    yield [
        f"Prompt tokens saved, {THRESHOLD} threshold, long / all trajectories: %",
        _saving(xl, xa, "saving_pct"),
        "-",
        _saving(hl, ha, "saving_pct"),
        run,
    ]
    yield [
        f"Cost saved, cached prefix at 0.1x, {THRESHOLD}, long / all: %",
        _saving(xl, xa, "saving_cost_0.1_pct"),
        "-",
        _saving(hl, ha, "saving_cost_0.1_pct"),
        run,
    ]
    yield [
        f"Trajectories costlier than direct at 0.1x, {THRESHOLD}, beyond the extract tool's "
        "definition in each request",
        _costlier_cell(data, config),
        "-",
        f"{_costlier(hr, 'headroom')} of {len(hr['per_trajectory'])}",
        run,
    ]
    probe = xa["probe"]
    yield [
        f"Reclaimed tool results fetched back intact, {THRESHOLD}",
        f"{probe['retrieved']:,} of {probe['checked']:,}",
        "-",
        "-",
        runs.run(name, data),
    ]
    yield from writes_rows(runs)


def writes_rows(runs: Runs) -> Iterator[list[str]]:
    config = f"xun@{THRESHOLD}"
    name = SOURCES["economy-writes"]
    data = runs.load(name)
    long, whole = _totals(data, config)
    factor = data.get("write_factor")
    yield [
        f"Cost saved with cache writes billed {factor}x, {THRESHOLD}, long / all: % "
        f"(costlier than direct beyond the tool's definition)",
        f"{_saving(long, whole, 'saving_cost_0.1_pct')} ({_costlier_cell(data, config)})",
        "-",
        "-",
        runs.run(name, data),
    ]


def coverage_files(results: Path) -> list[Path]:
    """The coverage run the headline shows (`SOURCES["coverage"]`), when it exists."""
    return [p for p in results.glob("coverage*.json") if p.stem == SOURCES["coverage"]]


def _find_counts(node: Any) -> dict[str, Any] | None:
    """The first dict (breadth first, a `total*` key first) holding visible ... unreachable."""
    queue = [node]
    while queue:
        item = queue.pop(0)
        if not isinstance(item, dict):
            continue
        keys = [str(k) for k in item]
        if any(k.startswith("visible") for k in keys) and any("unreachable" in k for k in keys):
            return item
        ordered = sorted(item.items(), key=lambda kv: not str(kv[0]).startswith("total"))
        queue.extend(v for _, v in ordered if isinstance(v, dict))
    return None


COVERAGE_KINDS = (("visible", "visible"), ("read", "one read away"), ("search", "one search away"))


def coverage_cell(data: dict[str, Any]) -> str:
    """`visible a % / one read away b % / one search away c % / unreachable d %` of n literals.

    `tests.bench.lookback` writes the counts over every wire under `all_wires`, for the replay
    model that never looks back (`plain`) and the one that does (`look`): `plain` is read, as
    the coverage of what compaction left. Any other shape is searched for the first dict that
    holds `visible` ... `unreachable` (a `total*` key first).
    """
    wires = data.get("all_wires")
    plain = wires.get("plain") if isinstance(wires, dict) else None
    counts = _find_counts(plain if isinstance(plain, dict) else data)
    if counts is None:
        raise ValueError("no counts of visible ... unreachable in the coverage results")

    def pick(word: str) -> float:
        numbers = {str(k): v for k, v in counts.items() if isinstance(v, int | float)}
        for match in (str.__eq__, str.startswith, lambda k, w: w in k):
            hits = [v for k, v in numbers.items() if match(k, word)]
            if hits:
                return float(hits[0])
        raise ValueError(f"no `{word}` figure in the coverage results: {sorted(counts)}")

    values = [pick(word) for word, _ in COVERAGE_KINDS] + [pick("unreachable")]
    total = sum(values)
    labels = [label for _, label in COVERAGE_KINDS] + ["unreachable"]
    tail = ""
    if total > 0 and all(v == int(v) for v in values):  # counts of literals
        shares = [100.0 * v / total for v in values]
        tail = f" of {int(total):,} literals"
    elif total <= 1.0001:  # fractions
        shares = [100.0 * v for v in values]
    else:  # percentages
        shares = values
    parts = [f"{label} {v:.1f} %" for label, v in zip(labels, shares, strict=True)]
    return " / ".join(parts) + tail


def coverage_rows(runs: Runs) -> Iterator[list[str]]:
    files = coverage_files(runs.results)
    if not files:
        return
    loaded = {p.stem: runs.load(p.stem) for p in files}
    name = max(loaded, key=lambda n: str((loaded[n].get("machine") or {}).get("date", "")))
    data = loaded[name]
    threshold = data.get("threshold")
    at = f", threshold {threshold}" if threshold else ""
    yield [
        f"Future-reference coverage: the literals the next action uses{at}",
        coverage_cell(data),
        "-",
        "-",
        runs.run(name, data),
    ]
    if not (runs.results / f"{SOURCES['lookback']}.json").exists():
        return
    look = runs.load(SOURCES["lookback"])
    books = look["all_wires"]
    yield [
        f"Look-back's cost: billed prompt tokens a model that searches first adds{at}",
        f"+{books['added_billed_pct']:.1f} % (+{books['added_cost_0.1_pct']:.1f} % at 0.1x)",
        "-",
        "-",
        runs.run(SOURCES["lookback"], look),
    ]


def scale_rows(runs: Runs) -> Iterator[list[str]]:
    name = SOURCES["scale"]
    data = runs.load(name)
    run = runs.run(name, data)
    mem = data["memory"]
    yield [
        "Proxy memory from 1,000 to 10,000 stored sessions, SQLite / Redis",
        f"{mem['sqlite']['rss_growth_1k_to_10k_pct']:+.2f} % / "
        f"{mem['redis']['rss_growth_1k_to_10k_pct']:+.2f} %",
        "-",
        "-",
        run,
    ]
    last = max(data["cpu"]["rows"], key=lambda r: r["tokens"])
    yield [
        f"CPU of a whole turn, {last['tokens']:,}-token history ({last['messages']} messages)",
        f"{last['turn_ms']:.2f} ms",
        "-",
        "-",
        run,
    ]


def render(results: Path = RESULTS) -> str:
    """The block between the markers: the table, then the machines its runs were on."""
    runs = Runs(results)
    rows = [
        *overhead_rows(runs),
        *economy_rows(runs),
        *coverage_rows(runs),
        *scale_rows(runs),
    ]
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines.append("")
    lines += [f"- M{i}: {desc}" for i, desc in enumerate(runs.machines, 1)]
    return "\n".join(lines)


def _pattern() -> re.Pattern[str]:
    start, end = (re.escape(m) for m in MARKERS)
    return re.compile(rf"({start})(.*?)({end})", re.DOTALL)


def current(doc: Path = DOC) -> str:
    """The block BENCHMARKS.md holds now."""
    found = _pattern().search(doc.read_text())
    if found is None:
        raise ValueError(f"{doc.name} has no {MARKERS[0].strip()} block")
    return found.group(2).rstrip("\n")


def write(doc: Path = DOC, results: Path = RESULTS) -> None:
    text = doc.read_text()
    if not _pattern().search(text):
        raise ValueError(f"{doc.name} has no {MARKERS[0].strip()} block")
    body = render(results)
    doc.write_text(_pattern().sub(lambda m: m.group(1) + body + "\n" + m.group(3), text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BENCHMARKS.md's headline table")
    parser.add_argument("--write", action="store_true", help="write it into BENCHMARKS.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if BENCHMARKS.md differs")
    args = parser.parse_args(argv)
    if args.write:
        write()
        print(f"updated the headline table of {DOC}")
        return 0
    if args.check:
        same = current() == render()
        print("BENCHMARKS.md's headline table is current" if same else "it differs: --write")
        return 0 if same else 1
    print(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
