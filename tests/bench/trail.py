"""Artifact trail: replay the corpus and check the model can still read old file paths.

    python -m tests.bench.trail                       # every trajectory, 32k, both strategies
    python -m tests.bench.trail --quick               # 3 long trajectories + 10 short ones
    python -m tests.bench.trail --baseline 8d2790a    # the proxy without the trail to compare

The replay is `tests.bench.economy`'s (recorded turns, a replay upstream counting tokens with
the deterministic local summariser and the prefix-cache model). Configurations, each a real
proxy process: `direct`, and for each strategy (`seed`, `cache-aware`) the proxy of this
checkout (`+trail`) and the proxy of the `--baseline` commit (exported with `git archive`,
default: the last commit before the trail), all in the same run.

Paths the model must still read: for every turn whose upstream request carries a summary,
the paths named in tool-call ARGUMENTS of the client's messages more than 20 messages back
(every string value of the arguments but a file's new text, split at white space and shell
punctuation, edges trimmed, keeping tokens that end in a file name with an extension or
have two or more segments; sed scripts, globs and `name/arity` left out). Each is
looked up verbatim in everything the upstream request shows the model (message text,
tool-call names and arguments). Reported per trajectory: at the first turn after the first
summary, and the lowest and overall share over every turn after it. The savings are the
economy's: raw tokens and cost with a 0.1x cache, against `direct`, for both builds.

While `proxy/session/rebuild.py` does not carry the trail yet (the lead's hook), the `+trail` proxy
runs through `python -m tests.bench.trail serve`, which loads `proxy.session.rebuild` with those
lines applied (`SESSION_HOOK`) before the server imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import types
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.bench import local_summary, synthetic
from tests.bench.common import (
    ROOT,
    Child,
    free_port,
    git_commit,
    machine,
    print_header,
    run_dir,
    running,
    table,
    write_result,
)
from tests.bench.economy import LONG, Config, ReplayUpstream, account, replay
from tests.bench.tokens import Counter
from tests.support.servers import UvicornThread

BASELINE = "4bc733c"  # main just before the artifact trail (the branch's base)
STRATEGIES = {"seed": "proxy.compact:AutoCompactor", "cache-aware": "cache-aware"}
BACK = 20  # a path is old when it was named more than this many messages back
SUMMARY_MARK = "Earlier conversation history has been compacted"
_EXT = (
    "py|js|ts|tsx|jsx|rs|go|c|h|cc|cpp|java|rb|ex|exs|md|rst|txt|json|toml|ya?ml|cfg|ini"
    "|sh|html|css|lock|pony|patch|diff|xml|csv|log"
)
_SPLIT = re.compile(r"[\s'\"`;|&()<>=,:\[\]{}]+")
_EXT_TOKEN = re.compile(rf"[\w.-]*\w\.(?:{_EXT})", re.IGNORECASE)
_EDGES = re.compile(r"^[^\w./~]+|[^\w/]+$")
# A file's new text (Write, Edit, str_replace_editor): what it names is code, not a file.
CONTENT_KEYS = frozenset(
    {"content", "old_string", "new_string", "old_str", "new_str", "file_text", "insert_text"}
)
_SED = re.compile(r"^\d*s/|/[gip]*$")

# The lines proxy/session/rebuild.py needs (the lead adds them; see SESSION_HOOK's use below).
SESSION_HOOK = [
    (
        "        if state.summary:\n"
        "            conv.set_system_message_content(state.summary, is_compressed=True)\n",
        "        if state.summary:\n"
        "            system = conv.set_system_message_content(state.summary, is_compressed=True)\n"
        "            system.trail = state.trail  # the artifact trail, shown with the summary\n",
    ),
    (
        "        state.summary = system.content\n",
        "        state.summary = system.content\n        state.trail = system.trail\n",
    ),
    (
        "        fresh.summary, fresh.cut, fresh.cut_hash = state.summary, state.cut, "
        "state.cut_hash\n",
        "        fresh.summary, fresh.cut, fresh.cut_hash = state.summary, state.cut, "
        "state.cut_hash\n        fresh.trail = state.trail\n",
    ),
    (
        "            summary = format_compacted_summary(self.state.summary)\n",
        "            summary = format_compacted_summary(self.state.summary, self.state.trail)\n",
    ),
    (
        _FORGET := "        state.summary, state.cut, state.cut_hash, state.moved_user = "
        "None, 0, None, None\n",
        _FORGET + "        state.trail = None\n",
    ),
]


def load_hooked_session() -> str:
    """Load proxy.session.rebuild with the trail's hook lines unless it has them; say which."""
    path = ROOT / "proxy" / "session" / "rebuild.py"
    source = path.read_text(encoding="utf-8")
    if "state.trail" in source:
        return "proxy/session/rebuild.py as it is (it keeps the trail)"
    for old, new in SESSION_HOOK:
        if source.count(old) != 1:
            raise SystemExit(f"cannot apply the trail hook to {path}: {old.strip()!r} not found")
        source = source.replace(old, new)
    module = types.ModuleType("proxy.session.rebuild")
    module.__file__ = str(path)
    sys.modules["proxy.session.rebuild"] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return "proxy/session/rebuild.py with the trail hook applied at start-up"


def serve(argv: list[str]) -> int:
    note = load_hooked_session()
    print(f"xun-proxy for the trail bench: {note}", file=sys.stderr, flush=True)
    from proxy.cli import main as cli_main

    return cli_main(argv)


# -- what the model can read -----------------------------------------------------------------


def _strings(value: Any, key: str = "") -> list[tuple[str, str]]:
    """(key, string) for every string value, with the key it sits under."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _strings(v, str(k).lower())]
    if isinstance(value, list):
        return [p for v in value for p in _strings(v, key)]
    return [(key, value)] if isinstance(value, str) else []


def _is_path(token: str) -> bool:
    if not token or token[0] in "-$" or any(c in token for c in "\\*%$") or _SED.search(token):
        return False
    if _EXT_TOKEN.fullmatch(token.rsplit("/", 1)[-1]):
        return True
    parts = [p for p in token.split("/") if p]
    return (
        len(parts) >= 2
        and all(any(c.isalnum() for c in p) for p in parts)
        and not parts[-1].isdigit()
    )


def argument_paths(message: dict[str, Any]) -> set[str]:
    """Paths named in one message's tool-call arguments (the bench's own reading): every
    string value but a file's new text, split at white space and shell punctuation."""
    found: set[str] = set()
    for call in message.get("tool_calls") or []:
        raw = (call.get("function") or {}).get("arguments") or ""
        try:
            values = _strings(json.loads(raw))
        except ValueError:
            values = [("", raw)]
        for key, value in values:
            if key in CONTENT_KEYS:
                continue
            for token in _SPLIT.split(value):
                token = _EDGES.sub("", token)  # "#!/bin/bash" names /bin/bash
                if _is_path(token):
                    found.add(token)
    return found


def shown_text(messages: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    for m in messages:
        parts.append(local_summary._text(m.get("content")))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            args = str(fn.get("arguments") or "")
            parts += [str(fn.get("name")), args]
            try:
                parts += [text for _, text in _strings(json.loads(args))]
            except ValueError:
                pass
    return "\n".join(parts)


class TrailUpstream(ReplayUpstream):
    """The economy's replay upstream, also checking which old paths each request shows."""

    def __init__(self, trajectories: list[Any], counter: Counter) -> None:
        super().__init__(trajectories, counter)
        from tests.support.corpus import turns

        self.histories = [[len(h) for h, _ in turns(t)] for t in trajectories]
        self.paths = [[argument_paths(m) for m in t.messages] for t in trajectories]
        self.visible: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)

    def answer(self, cfg: str, ti: int, turn: str, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        if (
            cfg != "direct"
            and turn.isdigit()
            and not local_summary.is_summary_request(messages)
            and any(SUMMARY_MARK in local_summary._text(m.get("content")) for m in messages[:2])
        ):
            length = self.histories[ti][int(turn)]
            old: set[str] = set()
            for paths in self.paths[ti][: max(0, length - BACK)]:
                old |= paths
            text = shown_text(messages)
            missing = sorted(p for p in old if p not in text)
            self.visible[(cfg, ti)].append(
                {"turn": int(turn), "old": len(old), "missing": len(missing), "ex": missing[:5]}
            )
        return super().answer(cfg, ti, turn, body)


def visibility(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    measured = [r for r in rows if r["old"]]
    if not measured:
        return None
    first = measured[0]
    shares = [1 - r["missing"] / r["old"] for r in measured]
    old = sum(r["old"] for r in measured)
    return {
        "turns": len(measured),
        "first_pct": round(100 * (1 - first["missing"] / first["old"]), 1),
        "first_old": first["old"],
        "min_pct": round(100 * min(shares), 1),
        "all_pct": round(100 * (1 - sum(r["missing"] for r in measured) / old), 1),
        "missing_examples": first["ex"],
    }


# -- the run --------------------------------------------------------------------------------


def export_baseline(ref: str, scratch: Path) -> Path:
    out = scratch / f"baseline-{ref}"
    archive = subprocess.run(
        ["git", "archive", ref, "proxy", "tests"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


def children(
    configs: list[Config], upstream: str, scratch: Path, baseline: Path
) -> tuple[list[Child], dict[str, Any]]:
    started: list[Child] = []
    setup: dict[str, Any] = {}
    for cfg in configs:
        if cfg.kind == "direct":
            cfg.url = upstream
            continue
        port = free_port()
        trail = cfg.name.split("@")[0].endswith("+trail")
        module = ["tests.bench.trail", "serve"] if trail else ["proxy", "serve"]
        argv = [sys.executable, "-m", *module, "--upstream", upstream + "/v1"]
        argv += ["--port", str(port), "--token-threshold", str(cfg.threshold)]
        argv += ["--store", f"sqlite:///{scratch / (cfg.name.replace('@', '-') + '.db')}"]
        argv += ["--max-body-bytes", str(256 * 2**20)]
        env = {"XUN_COMPACTOR": str(cfg.compactor)}
        cwd = ROOT if trail else baseline
        env["PYTHONPATH"] = str(cwd)
        child = Child(f"xun-{cfg.name.replace('@', '-')}", argv, port, scratch / f"{cfg.name}.log")
        child.env, child.cwd = env, cwd
        child.start()
        started.append(child)
        child.wait_ready("/healthz", 180)
        cfg.url = child.url
        setup[cfg.name] = {"command": " ".join(argv), "cwd": str(cwd), "compactor": cfg.compactor}
        setup[cfg.name]["log_head"] = child.tail(3)
    return started, setup


def pick(args: argparse.Namespace) -> list[Any]:
    from tests.support.corpus import load_all

    trajectories = load_all()
    if args.only:
        trajectories = [t for t in trajectories if any(s in t.name for s in args.only)]
    if args.quick:
        long = [t for t in trajectories if t.source in LONG and len(t.messages) < 200][:3]
        trajectories = long + [t for t in trajectories if t.source not in LONG][:10]
    return trajectories


def summarise(
    configs: list[Config], trajectories: list[Any], books: dict[str, Any], up: TrailUpstream
) -> dict[str, Any]:
    per: list[dict[str, Any]] = []
    for ti, entry in enumerate(books["per_trajectory"]):
        row: dict[str, Any] = {"trajectory": entry["trajectory"], "source": entry["source"]}
        for cfg in configs:
            if cfg.kind == "direct":
                continue
            data = entry["configs"][cfg.name]
            row[cfg.name] = {
                "saving_pct": data.get("saving_pct"),
                "saving_cost_0.1_pct": data.get("saving_cost_0.1_pct"),
                "level2": data.get("level2"),
                "paths": visibility(up.visible.get((cfg.name, ti), [])),
                "errors": data.get("errors"),
            }
        per.append(row)
    totals: dict[str, Any] = {}
    for cfg in configs:
        if cfg.kind == "direct":
            continue
        tot = books["totals"]["long"][cfg.name]
        rows = [r[cfg.name] for r in per]
        measured = [r["paths"] for r in rows if r["paths"]]
        totals[cfg.name] = {
            "long_saving_pct": tot.get("saving_pct"),
            "long_saving_cost_0.1_pct": tot.get("saving_cost_0.1_pct"),
            "all_saving_pct": books["totals"]["all"][cfg.name].get("saving_pct"),
            "costlier_than_direct_0.1": sum(1 for r in rows if (r["saving_cost_0.1_pct"] or 0) < 0),
            "costlier_than_direct_raw": sum(1 for r in rows if (r["saving_pct"] or 0) < 0),
            "costlier_long_0.1": sum(
                1
                for r in per
                if r["source"] in LONG and (r[cfg.name]["saving_cost_0.1_pct"] or 0) < 0
            ),
            # Trajectories a build makes costlier than direct that its baseline did not.
            "new_losses_0.1": _new_losses(per, cfg.name),
            "trajectories_with_a_summary": len(measured),
            "first_pct_min": min((m["first_pct"] for m in measured), default=None),
            "min_pct_min": min((m["min_pct"] for m in measured), default=None),
            "under_90_first": sum(1 for m in measured if m["first_pct"] < 90),
            "errors": sum(r["errors"] or 0 for r in rows),
        }
    return {"per_trajectory": per, "totals": totals}


def _new_losses(per: list[dict[str, Any]], name: str) -> int | None:
    base = name.replace("+trail", "")
    if base == name:
        return None
    return sum(
        1
        for r in per
        if (r[name]["saving_cost_0.1_pct"] or 0) < 0 <= (r[base]["saving_cost_0.1_pct"] or 0)
    )


def print_tables(result: dict[str, Any]) -> None:
    names = [n for n in result["configs"] if n != "direct"]
    print_header("Old file paths the model can still read, per trajectory with a summary")
    rows = []
    for row in result["per_trajectory"]:
        for name in names:
            paths = row[name]["paths"]
            if paths is None:
                continue
            rows.append(
                [
                    row["trajectory"],
                    name,
                    paths["first_old"],
                    paths["first_pct"],
                    paths["min_pct"],
                    paths["all_pct"],
                    row[name]["saving_pct"],
                    row[name]["saving_cost_0.1_pct"],
                ]
            )
    heads = ["trajectory", "config", "old paths", "first %", "min %", "all %", "saving %"]
    print(table([*heads, "cost saving 0.1x %"], rows))
    print_header("Totals")
    heads = ["config", "long saving %", "long cost saving 0.1x %", "all saving %"]
    heads += ["costlier 0.1x (all / long / new)", "with summary", "first % (min)", "min % (min)"]
    rows = []
    for name, tot in result["totals"].items():
        rows.append(
            [
                name,
                tot["long_saving_pct"],
                tot["long_saving_cost_0.1_pct"],
                tot["all_saving_pct"],
                f"{tot['costlier_than_direct_0.1']} / {tot['costlier_long_0.1']} / "
                f"{tot['new_losses_0.1'] if tot['new_losses_0.1'] is not None else '-'}",
                tot["trajectories_with_a_summary"],
                tot["first_pct_min"],
                tot["min_pct_min"],
            ]
        )
    print(table(heads, rows))


def report_block() -> str:
    """The BENCHMARKS.md block (`tests.bench.report`), from the saved result."""
    from tests.bench.common import read_result

    data = read_result("trail")
    if not data:
        return "(no trail results yet: run `python -m tests.bench.trail`)"
    head = (
        f"Commit {data['commit']} against the baseline {data['baseline']}, {data['mode']} run, "
        f"{data['trajectories']} trajectories at {data['threshold'] // 1000}k, "
        f"{data['seconds']:.0f} s. Old paths: {data['old_path_rule']}; first / lowest share "
        "over the turns after the first summary. Savings against direct, long trajectories.\n"
    )
    names = list(data["totals"])
    rows = []
    for row in data["per_trajectory"]:
        cells = [row[n]["paths"] for n in names]
        if not any(cells):
            continue
        rows.append(
            [row["trajectory"]]
            + [f"{c['first_pct']:.0f} / {c['min_pct']:.0f}" if c else "n/a" for c in cells]
        )
    totals = [
        [
            name,
            tot["long_saving_pct"],
            tot["long_saving_cost_0.1_pct"],
            f"{tot['costlier_than_direct_0.1']} / {tot['costlier_long_0.1']} / "
            f"{'-' if tot['new_losses_0.1'] is None else tot['new_losses_0.1']}",
            tot["first_pct_min"],
            tot["min_pct_min"],
        ]
        for name, tot in data["totals"].items()
    ]
    heads = ["config", "saving % (raw)", "cost saving 0.1x %"]
    heads.append("costlier than direct at 0.1x (all / long / not so without the trail)")
    return (
        head
        + "\n"
        + table(["trajectory (old paths readable, %)", *names], rows)
        + "\n\n"
        + table([*heads, "first % (worst)", "lowest % (worst)"], totals)
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve(argv)
    parser = argparse.ArgumentParser(description="artifact trail replay on the corpus")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--threshold", type=int, default=32_000)
    parser.add_argument("--baseline", default=BASELINE, help="commit of the proxy without it")
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--synthetic", type=int, default=0, help="add N long OpenHands-style sessions"
    )
    args = parser.parse_args(argv)
    started = time.time()
    counter = Counter.create()
    trajectories = pick(args) + synthetic.trajectories(args.synthetic)
    k = args.threshold // 1000
    configs = [Config("direct", "direct")]
    for label, path in STRATEGIES.items():
        # Its proxies run without the replay's clock (`tests.bench.clocked`): nothing to settle.
        configs.append(Config(f"{label}@{k}k", "xun", args.threshold, path, settle=False))
        configs.append(Config(f"{label}+trail@{k}k", "xun", args.threshold, path, settle=False))
    upstream = TrailUpstream(trajectories, counter)
    scratch = run_dir("trail")
    baseline = export_baseline(args.baseline, scratch)
    server = UvicornThread(upstream.app(), log_level="warning", timeout_keep_alive=600)
    server.start()
    client_log: list[dict[str, Any]] = []
    run_id = uuid.uuid4().hex[:8]
    try:
        procs, setup = children(configs, server.url, scratch, baseline)
        with running(procs):

            async def everything() -> None:
                runs = (replay(c, trajectories, run_id, client_log) for c in configs)
                await asyncio.gather(*runs)

            asyncio.run(everything())
    finally:
        server.stop()
    books = account(configs, trajectories, upstream, client_log, [0.1, 0.5])
    result = {
        "machine": machine(),
        "commit": git_commit(),
        "baseline": args.baseline,
        "argv": argv,
        "mode": "quick" if args.quick else "full",
        "seconds": round(time.time() - started, 1),
        "threshold": args.threshold,
        "token_counts": counter.source,
        "summariser": local_summary.LABEL,
        "old_path_rule": f"named in tool-call arguments more than {BACK} messages back",
        "configs": {c.name: {"compactor": c.compactor, "threshold": c.threshold} for c in configs},
        "setup": setup,
        "unmatched_requests": upstream.unmatched,
        "trajectories": len(trajectories),
        **summarise(configs, trajectories, books, upstream),
        "scratch": str(scratch),
    }
    print_tables(result)
    name = "trail" + (f"-{args.tag}" if args.tag else "") + ("-quick" if args.quick else "")
    print(f"\nwrote {write_result(name, result)} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
