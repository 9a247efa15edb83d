"""The token economy's promise with cache writes billed: with the default settings no
trajectory costs more through the proxy than sent directly, at any write price, beyond the
extract tool's own definition (`extract_tool: always` sends it in every request of a session
with tools, at most 60 tokens: tests/session/test_extract_tool_size.py), and every tool result
the proxy reclaimed can be asked back whole.

Runs the benchmark's own replay (`tests.bench.economy`: real proxy processes, the replay
upstream keeping the books, its probe asking back every tool result at the end) at 16k on
the corpus sample committed with the tests (tests/corpus_sample/README.md: three trajectories
that compact at 16k), in every clone. ponyc-4588 crosses the threshold late and ends soon
after its one compaction (it cost 1.0 % more at 2x writes once the tool joined with that
compaction, whose rewrite of the tools block the strategy did not price). Where the full
corpus sits beside the checkout the sample is read from it, and tau-bench task44-trial3
joins: it never compacts (it cost 3.0 % more while the extract tool's definition went in
every request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bench import economy
from tests.support.corpus import FULL_CORPUS, REPLAY_DIR

# Trajectory name -> what `--only` matches it by.
SAMPLE = {
    "mini-v1/django__django-16560": "django__django-16560",
    "openhands/ponylang__ponyc-4588": "ponylang__ponyc-4588",
    "openhands/ponylang__ponyc-4595": "ponylang__ponyc-4595",
}
DEFINITION_TOKENS = 60  # the extract tool's definition at most (o200k_base, every wire)
NEVER_COMPACTS = {"tau-bench/task44-trial3": "task44-trial3"}
TRAJECTORIES = {**SAMPLE, **(NEVER_COMPACTS if FULL_CORPUS else {})}


def replay(write_factor: float, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Per trajectory, the cost rows of direct and of the proxy at 16k (default settings,
    told the write price as an operator would tell it)."""
    for name in ("XUN_EXTRACT_TOOL", "XUN_COMPACTOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XUN_CACHE_READ_FACTORS", '{"": 0.1}')
    monkeypatch.setenv("XUN_CACHE_WRITE_FACTORS", f'{{"": {write_factor}}}')
    written: dict[str, Any] = {}

    def keep(name: str, data: dict[str, Any]) -> Path:
        written.update(data)
        return Path(name)

    monkeypatch.setattr(economy, "write_result", keep)
    argv = ["--skip", "headroom", "--cache-factor", "0.1", "--write-factor", str(write_factor)]
    argv += ["--corpus", str(REPLAY_DIR), "--thresholds", "16000"]
    argv += ["--only", *TRAJECTORIES.values()]
    assert economy.main(argv) == 0
    rows = {e["trajectory"]: e["configs"] for e in written["per_trajectory"]}
    assert set(rows) == set(TRAJECTORIES)
    return rows


@pytest.mark.parametrize("write_factor", [1.0, 1.25, 2.0])
def test_no_trajectory_costs_more_than_direct(
    write_factor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = replay(write_factor, monkeypatch)
    for name, configs in rows.items():
        proxy, direct = configs["xun@16k"], configs["direct"]
        assert proxy["errors"] == 0 and direct["errors"] == 0, name
        # The definition's tokens in every request, each billed at most as a cache write.
        definition = DEFINITION_TOKENS * proxy["turns"] * write_factor
        assert proxy["cost_0.1"] <= direct["cost_0.1"] + definition, name
        # Every tool result comes back whole through the proxy's extract tool.
        probe = proxy["probe"]
        assert probe["failed"] == 0 and probe["retrieved"] == probe["checked"], (name, probe)
        assert probe["placeholders_retrieved"] == probe["placeholders"], (name, probe)
    for name in SAMPLE:
        compacted = rows[name]["xun@16k"]
        assert compacted["level1"] + compacted["level2"] >= 1, name
        assert compacted["saving_cost_0.1_pct"] > 0, name  # compacted, and cheaper than direct
        assert compacted["probe"]["checked"] > 0, name
    for name in set(NEVER_COMPACTS) & set(rows):
        untouched = rows[name]
        assert untouched["xun@16k"]["level1"] + untouched["xun@16k"]["level2"] == 0
        # Never compacted: the proxy sent what the client sent and the tool's definition.
        extra = untouched["xun@16k"]["cost_0.1"] - untouched["direct"]["cost_0.1"]
        turns = untouched["xun@16k"]["turns"]
        assert 0 < extra <= DEFINITION_TOKENS * turns * write_factor
