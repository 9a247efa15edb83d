"""Run every benchmark, then redraw the charts and the generated parts of BENCHMARKS.md (its
headline table) and of the lab notes in docs/bench/.

    python -m tests.bench.all                 # overhead, wires, economy, scale; charts + report
    python -m tests.bench.all --quick         # the quick variants (results saved as *-quick)
    python -m tests.bench.all --report-only   # charts + BENCHMARKS.md, docs/bench/ from saved JSON

The full run takes about 45 minutes on 2 cores (overhead ~15, wires ~5, economy ~20, scale
~5); it is run by hand, not by CI. Each step runs in its own process, one after the other,
so no two benchmarks share the machine at once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from tests.bench import charts, report
from tests.bench.common import ROOT

STEPS = ("overhead", "wires", "economy", "scale")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the xun-proxy benchmarks and the report")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    args = parser.parse_args(argv)
    failed = []
    if not args.report_only:
        for step in args.steps:
            cmd = [
                sys.executable,
                "-m",
                f"tests.bench.{step}",
                *(["--quick"] if args.quick else []),
            ]
            print(f"\n### {' '.join(cmd[1:])}\n", flush=True)
            if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                failed.append(step)
    if args.quick and not args.report_only:
        print("quick results are saved as *-quick.json; the report uses the full results")
    charts.main()
    report.update()
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
