"""The crossing turn's latency against an ordinary turn's, with summaries prepared ahead and
without (issue 28).

The issue's scenario: an agent runs scripted tool turns (two 600-character results each,
0.4 s of tool work between turns) through the proxy with the default strategy (cache-aware)
and a threshold of 6000, against an upstream that answers the agent at once but takes
`--delay` seconds (2.5) to write a summary. The same run is made with `--summary-ahead off`
(the summary is made inside the turn that crosses) and `on`; each client request is timed
at the client. Reported per mode: the ordinary turn's median, the crossing turns' latencies
(the turns that compacted with a summary) and their ratio to the ordinary median, the
slowest turn, the turns that waited over a second, summary requests made and used, the
turns the strategy would have summarised at that went up without (the summary still being
written: the speculation's cost), and every prompt token sent upstream, summary requests
included, raw and billed with the repeated prefix cached at 0.1x. Two sessions run one after
the other on each proxy: from the second on, the proxy knows how long a summary takes, and
starts it as many turns ahead.

`--real-model`: the same comparison against llama.cpp's server with Gemma 3 270M
(`./scripts/real-model` installs it) instead of the fake upstream: the tool session of
`tests.bench.real_model` (a file read, then a comment on it, `--pause` seconds of tool work
between turns; threshold 470, 36 turns), one session per proxy, each mode in turn, with the
seed strategy: the default one (`--compactor cache-aware`) writes no summary in this session,
its placeholders keep it under its break-even point. In a 768-token window (`--n-ctx 768`)
the session overflows the window at turn 21 before a strategy would summarise, and the
refused request is summarised and retried inside that turn in both modes; the default window
is 2048. The model answers one request at a time, so a summary written in the background
holds up whatever turn comes while it runs. Reported per mode: the median turn without a
summary, the turns that applied one, the turns a summary held up, the slowest turn, the
summary requests made and how long each took, the turns that waited for one (went up
without), the prompt tokens the model counted; each turn in the results file.

    python -m tests.bench.summary_ahead [--turns 44] [--delay 2.5] [--sessions 2] [--repeat 1]
    python -m tests.bench.summary_ahead --real-model [--turns 36] [--pause 0.4] [--compactor seed]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from proxy.server.app import create_app
from tests.bench.real_model import Session, model_server, run_session
from tests.conftest import proxy_settings
from tests.support.agent import SYSTEM, TOOLS, is_summary_request
from tests.support.fake_upstream import FakeUpstream, Reply, count_prompt_tokens
from tests.support.servers import UvicornThread

RESULTS = Path(__file__).resolve().parent / "results" / "summary_ahead.json"
THRESHOLD = 470  # what a user sets for the real model's 768-token window
PAUSE = 0.4
SUMMARY_ID = re.compile(r"SUMMARY-\d+")


class Model:
    """Two tool calls a turn at once; a summary after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.turn = 0
        self.summaries = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            self.summaries += 1
            return Reply.text(f"## overview\nSUMMARY-{self.summaries}", delay=self.delay)
        self.turn += 1
        calls = [("read_file", json.dumps({"path": f"src/f{self.turn}_{k}.py"})) for k in (1, 2)]
        return Reply(tool_calls=calls)


def billed(bodies: list[dict[str, Any]], factor: float) -> float:
    """Prompt tokens billed with a prompt cache: what a request repeats of the request before
    it (same tools, the same leading messages) at `factor`, the rest in full."""
    total, previous = 0.0, None
    for body in bodies:
        tokens = count_prompt_tokens(body)
        cached = 0
        if previous is not None and previous.get("tools") == body.get("tools"):
            shared = 0
            for a, b in zip(previous["messages"], body["messages"], strict=False):
                if a != b:
                    break
                shared += 1
            if shared:
                prefix = {"messages": body["messages"][:shared], "tools": body.get("tools")}
                cached = count_prompt_tokens(prefix)
        total += tokens - cached + factor * cached
        if not is_summary_request(body):
            previous = body
    return total


def output(n: int) -> str:
    line = f"result {n}: " + "x" * 60 + "\n"
    return (line * 9)[:600]


def run(mode: str, turns: int, delay: float, sessions: int) -> list[dict[str, Any]]:
    """`sessions` sessions of `turns` turns, one after the other, through a fresh proxy with
    summary_ahead = `mode` (from the second on, the proxy knows how long a summary takes)."""
    rows = []
    with FakeUpstream() as fake:
        fake.default = Model(delay)
        settings = proxy_settings(
            fake, token_threshold=6000, compactor="cache-aware", summary_ahead=mode == "on"
        )
        with UvicornThread(create_app(settings)) as server:
            for number in range(1, sessions + 1):
                before = httpx.get(server.url + "/metrics").text
                start = len(fake.chat_requests)
                latencies, compactions = session(server.url, f"bench-{mode}-{number}", turns)
                time.sleep(delay + 0.5)  # a summary still being written counts as made
                after = httpx.get(server.url + "/metrics").text
                bodies = [r.json for r in fake.chat_requests[start:]]
                row = measure(latencies, compactions, bodies)
                row["waiting_turns"] = ahead(after, "waiting") - ahead(before, "waiting")
                row["unused"] = ahead(after, "unused") - ahead(before, "unused")
                rows.append({"mode": mode, "session": number, "turns": turns, **row})
    return rows


def session(url: str, name: str, turns: int) -> tuple[list[float], list[str]]:
    """One agent session; each turn's latency at the client and the proxy's header."""
    client = openai.OpenAI(
        base_url=url + "/v1",
        api_key="sk-bench",
        default_headers={"X-Session-Id": name},
        max_retries=0,
        timeout=120,
    )
    history: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read the source files one by one."},
    ]
    latencies, compactions, n = [], [], 0
    for _ in range(turns):
        began = time.perf_counter()
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history, tools=TOOLS
        )
        message = raw.parse().choices[0].message.model_dump(exclude_none=True)
        latencies.append(time.perf_counter() - began)
        compactions.append(raw.headers["x-xun-compaction"])
        history.append(message)
        for call in message.get("tool_calls") or []:
            n += 1
            history.append({"role": "tool", "tool_call_id": call["id"], "content": output(n)})
        time.sleep(PAUSE)
    client.close()
    return latencies, compactions


def measure(
    latencies: list[float], compactions: list[str], bodies: list[dict[str, Any]]
) -> dict[str, Any]:
    main = [b for b in bodies if not is_summary_request(b)]
    used = {m for b in main for m in SUMMARY_ID.findall(json.dumps(b))}
    ordinary = [t for t, c in zip(latencies[1:], compactions[1:], strict=True) if c == "none"]
    crossing = [t for t, c in zip(latencies, compactions, strict=True) if c == "summary"]
    median = statistics.median(ordinary)
    return {
        "ordinary_median_ms": round(median * 1000, 1),
        "crossing_ms": [round(t * 1000, 1) for t in crossing],
        "crossing_ratio": [round(t / median, 1) for t in crossing],
        "slowest_ms": round(max(latencies[1:]) * 1000, 1),
        "waited_over_1s": sum(1 for t in latencies if t > 1.0),
        "summary_requests": len(bodies) - len(main),
        "summaries_used": len(used),
        "prompt_tokens": sum(count_prompt_tokens(b) for b in bodies),
        "summary_prompt_tokens": sum(
            count_prompt_tokens(b) for b in bodies if is_summary_request(b)
        ),
        "billed_at_0.1x_cached": round(billed(bodies, 0.1)),
        "last_request_tokens": count_prompt_tokens(main[-1]),
    }


def ahead(metrics: str, outcome: str) -> int:
    line = f'xun_summary_ahead_total{{outcome="{outcome}"}} '
    return int(sum(float(r.split()[-1]) for r in metrics.splitlines() if r.startswith(line)))


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| summary ahead | session | ordinary turn (median) | crossing turns | crossing / ordinary "
        "| slowest turn | turns > 1 s | summary requests made / used | turns waiting for "
        "one | prompt tokens sent (summaries) | billed, cached prefix at 0.1x |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        crossing = ", ".join(f"{ms:.0f} ms" for ms in r["crossing_ms"]) or "-"
        ratio = ", ".join(f"{x:g}x" for x in r["crossing_ratio"]) or "-"
        lines.append(
            f"| {r['mode']} | {r['session']} | {r['ordinary_median_ms']:.0f} ms "
            f"| {crossing} | {ratio} "
            f"| {r['slowest_ms']:.0f} ms | {r['waited_over_1s']} "
            f"| {r['summary_requests']} / {r['summaries_used']} | {r['waiting_turns']} "
            f"| {r['prompt_tokens']} ({r['summary_prompt_tokens']}) "
            f"| {r['billed_at_0.1x_cached']} |"
        )
    return "\n".join(lines)


def run_real(url: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One real-model session through a fresh proxy with summary_ahead = `mode`."""
    session = run_session(
        url,
        compactor=args.compactor,
        n_ctx=args.n_ctx,
        threshold=THRESHOLD,
        turns=args.turns,
        file_chars=args.file_chars,
        summary_ahead=mode == "on",
        pause=args.pause,
    )
    return {"mode": mode, "turns": args.turns, "pause_s": args.pause, **measure_real(session)}


def measure_real(session: Session) -> dict[str, Any]:
    answered = [t for t in session.turns[1:] if t.status == 200]
    ordinary = [t.seconds for t in answered if t.compaction != "summary"]
    crossing = [t.seconds for t in answered if t.compaction == "summary"]
    median = statistics.median(ordinary)
    summaries = [e.seconds for e in session.exchanges if e.kind == "summary"]
    # A turn a summary finished during waited for it: made inside the turn, or written in
    # the background and holding the model (one request at a time) when the turn came.
    held = [t.seconds for t in answered if any(e.kind == "summary" for e in t.exchanges)]
    return {
        "ordinary_median_ms": round(median * 1000),
        "crossing_ms": [round(t * 1000) for t in crossing],
        "crossing_ratio": [round(t / median, 1) for t in crossing],
        "held_ms": [round(t * 1000) for t in held],
        "slowest_ms": round(max(t.seconds for t in session.turns[1:]) * 1000),
        "over_2x_ordinary": sum(1 for t in answered if t.seconds > 2 * median),
        "refused": sum(1 for t in session.turns if t.status != 200),
        "summary_s": [round(s, 1) for s in summaries],
        "waiting_turns": ahead(session.metrics, "waiting"),
        "unused": ahead(session.metrics, "unused"),
        "prompt_tokens_counted": sum(e.counted or 0 for e in session.exchanges if e.status == 200),
        "total_s": round(sum(t.seconds for t in session.turns), 1),
        "per_turn": [
            [t.number, t.status, t.compaction, round(t.seconds, 2)]
            + [f"{e.kind} {e.status} {e.seconds:.1f}s" for e in t.exchanges]
            for t in session.turns
        ],
    }


def real_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| summary ahead | ordinary turn (median) | turns applying a summary | ratio "
        "| turns a summary held up | slowest turn | turns > 2x ordinary | summaries written (s "
        "each) | turns waiting for one | refused | prompt tokens counted | all turns |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        crossing = ", ".join(f"{ms / 1000:.1f} s" for ms in r["crossing_ms"]) or "-"
        ratio = ", ".join(f"{x:g}x" for x in r["crossing_ratio"]) or "-"
        lines.append(
            f"| {r['mode']} | {r['ordinary_median_ms'] / 1000:.1f} s | {crossing} | {ratio} "
            f"| {', '.join(f'{ms / 1000:.1f} s' for ms in r['held_ms']) or '-'} "
            f"| {r['slowest_ms'] / 1000:.1f} s | {r['over_2x_ordinary']} "
            f"| {len(r['summary_s'])} ({', '.join(f'{s:g}' for s in r['summary_s'])}) "
            f"| {r['waiting_turns']} | {r['refused']} | {r['prompt_tokens_counted']} "
            f"| {r['total_s']:.0f} s |"
        )
    return "\n".join(lines)


def main_real(args: argparse.Namespace, run_info: dict[str, Any]) -> int:
    with model_server(args.n_ctx) as server:
        rows = [
            run_real(server.url, mode, args) for _ in range(args.repeat) for mode in ("off", "on")
        ]
    path = RESULTS.with_name(f"summary_ahead_real_{args.compactor}_{args.n_ctx}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {**run_info, "n_ctx": args.n_ctx, "threshold": THRESHOLD, "file_chars": args.file_chars}
    info["compactor"] = args.compactor
    path.write_text(json.dumps({**info, "runs": rows}, indent=2) + "\n")
    print(real_table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, help="44; 36 with --real-model")
    parser.add_argument("--delay", type=float, default=2.5)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--real-model", action="store_true", help="llama.cpp, not the fake")
    parser.add_argument("--pause", type=float, default=PAUSE, help="tool work (--real-model)")
    parser.add_argument("--n-ctx", type=int, default=2048, help="the window (--real-model)")
    parser.add_argument("--file-chars", type=int, default=800, help="a file read (--real-model)")
    parser.add_argument("--compactor", default="seed", choices=["cache-aware", "seed"])
    args = parser.parse_args(argv)
    args.turns = args.turns or (36 if args.real_model else 44)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load = os.getloadavg()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    run_info = {
        "commit": head.stdout.strip(),
        "started": started,
        "load_average": [round(x, 2) for x in load],
    }
    if args.real_model:
        return main_real(args, run_info)
    rows = [
        row
        for _ in range(args.repeat)
        for mode in ("off", "on")
        for row in run(mode, args.turns, args.delay, args.sessions)
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    run_info["delay_s"] = args.delay
    RESULTS.write_text(json.dumps({**run_info, "runs": rows}, indent=2) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
