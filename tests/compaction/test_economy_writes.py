"""The token economy's promise with cache writes billed: with `extract_tool: after_compaction`
no trajectory costs more through the proxy than sent directly, at any write price (with the
default, `always`, a session that never compacts also pays the tool's definition, at most 60
tokens a request: tests/session/test_extract_tool_size.py).

Runs the benchmark's own replay (`tests.bench.economy`: real proxy processes, the replay
upstream keeping the books) on two trajectories of the corpus that were costlier than direct:
ponyc-4588 at 16k, which crosses the threshold late and ends soon after its one compaction
(it cost 1.0 % more at 2x writes once the tool joined with that compaction, whose rewrite
of the tools block the strategy did not price), and tau-bench task44-trial3, which never
compacts (it cost 3.0 % more while the extract tool's definition went in every request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bench import economy
from tests.support.corpus import CORPUS_DIR

pytestmark = pytest.mark.skipif(not CORPUS_DIR.is_dir(), reason=f"no corpus at {CORPUS_DIR}")

TRAJECTORIES = {
    "openhands/ponylang__ponyc-4588": "ponylang__ponyc-4588",
    "tau-bench/task44-trial3": "task44-trial3",
}


def replay(write_factor: float, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Per trajectory, the cost rows of direct and of the proxy at 16k (default settings but
    `extract_tool: after_compaction`, told the write price as an operator would tell it)."""
    monkeypatch.delenv("XUN_COMPACTOR", raising=False)
    monkeypatch.setenv("XUN_EXTRACT_TOOL", "after_compaction")
    monkeypatch.setenv("XUN_CACHE_READ_FACTORS", '{"": 0.1}')
    monkeypatch.setenv("XUN_CACHE_WRITE_FACTORS", f'{{"": {write_factor}}}')
    written: dict[str, Any] = {}

    def keep(name: str, data: dict[str, Any]) -> Path:
        written.update(data)
        return Path(name)

    monkeypatch.setattr(economy, "write_result", keep)
    argv = ["--skip", "headroom", "--cache-factor", "0.1", "--write-factor", str(write_factor)]
    argv += ["--thresholds", "16000", "--only", *TRAJECTORIES.values()]
    assert economy.main(argv) == 0
    rows = {e["trajectory"]: e["configs"] for e in written["per_trajectory"]}
    assert set(rows) == set(TRAJECTORIES)
    return rows


@pytest.mark.parametrize("write_factor", [1.0, 1.25, 2.0])
def test_no_trajectory_costs_more_than_direct(
    write_factor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = replay(write_factor, monkeypatch)
    for configs in rows.values():
        assert configs["xun@16k"]["errors"] == 0
        assert configs["direct"]["errors"] == 0
    compacted = rows["openhands/ponylang__ponyc-4588"]["xun@16k"]
    assert compacted["level1"] + compacted["level2"] >= 1
    assert compacted["saving_cost_0.1_pct"] > 0  # compacted, and cheaper than direct
    untouched = rows["tau-bench/task44-trial3"]
    assert untouched["xun@16k"]["level1"] + untouched["xun@16k"]["level2"] == 0
    # Never compacted: the proxy sent what the client sent, billed exactly as direct.
    assert untouched["xun@16k"]["cost_0.1"] == untouched["direct"]["cost_0.1"]
