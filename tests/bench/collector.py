"""The cycle collector's pauses in the proxy at concurrency 1, this checkout against another.

    python -m tests.bench.collector --compare /path/to/other/checkout [--rounds 10]

Both proxies run from `tests/bench/gc_wrap.py`, which logs every collection (generation,
duration, objects freed) before starting `python -m proxy serve` of its working directory;
the c=1 phase of `tests.bench.field` (a 50 KB history, targets interleaved request by
request) drives them beside the direct upstream. Printed per proxy: collections, those over
0.5 ms, their total time and the longest, by generation (once both are serving: start-up's
own collections left out), and the c=1 latencies.
`--env NAME=VALUE` (repeatable) goes to the second proxy only: `XUN_GC_SWITCH=0.001` sets
the GIL's switch interval, `XUN_GC_NORECLAIM=1` turns the idle reclaimer off.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

from tests.bench.common import ROOT, Child, fast_upstream, free_port, run_dir, running, table
from tests.bench.field_phases import Target, latency_c1

WRAP = Path(__file__).with_name("gc_wrap.py")
PAUSE = re.compile(r"gcpause gen=(\d) ms=([\d.]+)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", metavar="DIR", help="the other checkout (default: this)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args(argv)
    scratch = run_dir("collector")
    upstream = fast_upstream(scratch)

    def proxy(name: str, where: Path, env: dict[str, str]) -> Child:
        port = free_port()
        argv = [sys.executable, str(WRAP), "serve", "--upstream", upstream.url + "/v1"]
        argv += ["--port", str(port), "--store", f"sqlite:///{scratch / f'{name}.db'}"]
        argv += ["--token-threshold", str(10**9)]
        return Child(name, argv, port, scratch / f"{name}.log", env=env, cwd=where)

    other_env = dict(item.split("=", 1) for item in args.env)
    proxies = [
        proxy("xun", ROOT, {}),
        proxy("xun-other", Path(args.compare or ROOT).resolve(), other_env),
    ]
    with running([upstream, *proxies]):
        upstream.start()
        upstream.wait_ready("/health", timeout=20)
        for child in proxies:
            child.start()
            child.wait_ready("/healthz", timeout=30)
        started = {p.name: len(p.log.read_bytes()) for p in proxies}  # start-up's own left out
        targets = [Target("direct", upstream, upstream)]
        targets += [Target(p.name, p, upstream, session=True) for p in proxies]
        phase = argparse.Namespace(rounds=args.rounds, requests=args.requests, peer_requests=0)
        c1 = asyncio.run(latency_c1(targets, phase))
    rows = []
    for child in proxies:
        served = child.log.read_bytes()[started[child.name] :].decode(errors="replace")
        pauses = [(int(g), float(ms)) for g, ms in PAUSE.findall(served)]
        slow = [ms for _, ms in pauses if ms > 0.5]
        gens = "/".join(str(sum(1 for g, _ in pauses if g == n)) for n in range(3))
        r, d = c1[child.name], c1["direct"]
        rows.append(
            [
                child.name,
                len(pauses),
                gens,
                len(slow),
                round(sum(ms for _, ms in pauses), 1),
                max((ms for _, ms in pauses), default=0.0),
                round(r["p50"] - d["p50"], 2),
                round(r["p99"] - d["p99"], 2),
            ]
        )
    head = ["proxy", "collections", "gen 0/1/2", "over 0.5 ms", "total ms", "longest ms"]
    print(table([*head, "added p50 ms", "added p99 ms"], rows))
    print(f"direct: p50 {c1['direct']['p50']} ms, p99 {c1['direct']['p99']} ms; logs in {scratch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
