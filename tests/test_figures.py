"""The figures of BENCHMARKS.md and the README come from the results files, so none goes stale.

BENCHMARKS.md's headline table is rendered again from `tests/bench/results/` by
`tests.bench.headline` and must equal what the document holds; so must every other generated
block (`bench:NAME` markers) of BENCHMARKS.md and of the lab notes in docs/bench/. The README
quotes no measured figure: it links to the headline table instead.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.bench import headline, report

ROOT = Path(__file__).resolve().parent.parent
BENCH_DOCS = [ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs" / "bench").glob("*.md"))]
BLOCK = re.compile(r"<!-- bench:([\w-]+) -->\n(.*?)<!-- /bench:\1 -->", re.S)

# A figure as the benchmarks report one: milliseconds, percentages, ratios, MiB, req/s.
FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|%|MiB|req/s)(?!\w)|\d+(?:\.\d+)?x(?![\w-])")


def test_the_headline_table_is_the_results_files() -> None:
    assert headline.current() == headline.render(), (
        "BENCHMARKS.md's headline table differs from tests/bench/results/: "
        "run `python3 -m tests.bench.headline --write`"
    )


@pytest.mark.parametrize("path", BENCH_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_generated_block_is_the_results_files(path: Path) -> None:
    for name, body in BLOCK.findall(path.read_text()):
        render = report.BLOCKS.get(name)
        if render is None:
            continue  # written by hand from a program's output (e.g. `issue8`)
        assert body.rstrip("\n") == render().rstrip("\n"), (
            f"{path.name}'s bench:{name} block differs from its results: "
            "run `python -m tests.bench.report`"
        )


def copy_sources(into: Path, *, coverage: bool = True) -> Path:
    for key, name in headline.SOURCES.items():
        if coverage or key != "coverage":
            shutil.copy(headline.RESULTS / f"{name}.json", into / f"{name}.json")
    return into


def test_a_changed_result_changes_the_table(tmp_path: Path) -> None:
    results = copy_sources(tmp_path)
    before = headline.render(results)
    field = json.loads((results / "field.json").read_text())
    field["results"]["c1"]["xun"]["p50"] += 1.0
    (results / "field.json").write_text(json.dumps(field))
    after = headline.render(results)
    assert before != after
    (row,) = (line for line in after.splitlines() if line.startswith("| Added latency"))
    added = field["results"]["c1"]["xun"]["p50"] - field["results"]["c1"]["direct"]["p50"]
    assert f"| {added:+.2f} / " in row


def test_each_row_names_its_run(tmp_path: Path) -> None:
    table = headline.render(copy_sources(tmp_path))
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    for row in rows[1:]:
        run = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert re.search(r"`[\w.-]+\.json`: \d{4}-\d\d-\d\d, [0-9a-f]{7,}, M\d", run), row
    assert re.search(r"^- M1: .+ cores", table, re.M)


def test_the_coverage_row_appears_only_with_a_coverage_file(tmp_path: Path) -> None:
    results = copy_sources(tmp_path, coverage=False)
    assert "coverage" not in headline.render(results).lower()
    machine = {"cpu": "AMD EPYC", "nproc": 2, "date": "2026-12-06 04:00:00 UTC"}
    counts = {"visible": 920, "one_read": 50, "one_search": 25, "unreachable": 5}
    data = {"machine": machine, "commit": "abc1234", "totals": counts, "per_trajectory": []}
    (results / "coverage.json").write_text(json.dumps(data))  # not the file the headline names
    assert "coverage" not in headline.render(results).lower()
    (results / f"{headline.SOURCES['coverage']}.json").write_text(json.dumps(data))
    (row,) = (line for line in headline.render(results).splitlines() if "coverage" in line.lower())
    expected = (
        "visible 92.0 % / one read away 5.0 % / one search away 2.5 % / unreachable 0.5 %"
        " of 1,000 literals"
    )
    assert expected in row
    assert f"`{headline.SOURCES['coverage']}.json`: 2026-12-06, abc1234" in row


def test_coverage_given_as_shares_reads_as_percentages() -> None:
    shares = {"total": {"visible": 0.9, "read": 0.06, "search": 0.03, "unreachable": 0.01}}
    assert headline.coverage_cell(shares) == (
        "visible 90.0 % / one read away 6.0 % / one search away 3.0 % / unreachable 1.0 %"
    )
    with pytest.raises(ValueError):
        headline.coverage_cell({"totals": {"seen": 3}})


def test_coverage_as_the_lookback_bench_writes_it_reads_the_plain_replay() -> None:
    def tally(visible: int, read: int, search: int, unreachable: int) -> dict[str, object]:
        total = visible + read + search + unreachable
        counts = {"visible": visible, "read": read, "search": search, "unreachable": unreachable}
        return {"literals": total, **counts, "pct": {"visible": 0.0}, "ex": ["x_y_z"]}

    data = {
        "threshold": 32000,
        "wires_detail": {"chat": {"total": {"plain": tally(1, 1, 1, 1)}}},
        "all_wires": {"plain": tally(180, 10, 6, 4), "look": tally(190, 10, 0, 0)},
        "targets": {"plain": {"visible": {"target": 92.0, "got": 90.0}}},
    }
    assert headline.coverage_cell(data) == (
        "visible 90.0 % / one read away 5.0 % / one search away 3.0 % / unreachable 2.0 %"
        " of 200 literals"
    )


def test_the_readme_quotes_no_figure_and_links_to_the_headline() -> None:
    readme = (ROOT / "README.md").read_text()
    assert FIGURE.findall(readme) == []
    assert "](BENCHMARKS.md#headline)" in readme


def test_the_figure_finder_sees_figures() -> None:
    text = "adds +0.86 ms, saves 45.1 %, 30.4x LiteLLM's, 57 MiB, 1,230 req/s; a 0x10 id"
    assert FIGURE.findall(text) == ["0.86 ms", "45.1 %", "30.4x", "57 MiB", "1,230 req/s"]
