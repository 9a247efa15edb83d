"""Token economy: replay the real agent trajectories of the corpus with and without compaction.

    python -m tests.bench.economy                     # every trajectory, every configuration
    python -m tests.bench.economy --quick             # 3 long trajectories + 10 short ones
    python -m tests.bench.economy --compactor seed=proxy.compact:AutoCompactor \\
                                  --compactor new=package.module:Class   # compare strategies

Each trajectory (converted by `tests.support.corpus`) is replayed turn by turn: the client sends the
recorded history up to an assistant turn, and a replay upstream answers with that recorded
assistant turn. Since the answers are fixed, the client's history is the recorded one at every
turn: compaction can only change what the proxy sends upstream, and that is what is counted.

Configurations, each a real server process on loopback (the replay upstream runs in this
process): `direct` (no proxy), `headroom` (Headroom's proxy, default optimisation) and
xun-proxy at each threshold (16k, 32k, 64k) for each compactor given (default: the proxy's
default). The replay upstream reports usage counted with tiktoken o200k_base (see
`tests.bench.tokens`), answers the proxy's summary requests with a DETERMINISTIC LOCAL
summariser (`tests.bench.local_summary`), and treats the longest common prefix (tools block,
then whole messages) with the same session's previous request as cached. Cache-aware cost =
write factor x uncached prompt tokens + cache factor x cached prompt tokens + completion tokens
of the summary calls, over the turns and the summary calls (a summary call is cached by the
same rule against the session's previous turn, and does not replace it). Every uncached prompt
token is written into the cache (the next request reads it), so the replay upstream reports it
as `cache_write_tokens`, as GPT-5.6 does; `--write-factor` (default 1.0: writes free) prices
those writes, as Anthropic (1.25x, 2x for its 1-hour cache) and GPT-5.6 on (1.25x) bill them.

After each trajectory the client sends one extra probe request (not counted): the upstream
asks, through the proxy's extract tool, for every tool result it ever saw as a placeholder,
and checks each answer equals the original.

Repeat runs give the same figures: before each turn the client waits until the proxy has no
request, save or summary written ahead in flight (`POST /bench/settle`, `tests.bench.clocked`,
which also reads a summary's time on the replay's clock). Before, a turn sent at once raced
the previous turn's bookkeeping, and one run's totals could differ from the next one's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import sys
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.compact import PLACEHOLDER_TEMPLATE
from proxy.compaction.cache_life import lifetime_for
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, content_text
from proxy.session.history import reclaim_keys
from proxy.session.lookback import page
from proxy.session.tool_output import EMPTY_OUTPUT
from tests.bench import local_summary, peers
from tests.bench.clocked import SETTLE
from tests.bench.common import (
    Child,
    git_commit,
    machine,
    print_header,
    run_dir,
    running,
    table,
    write_result,
    xun_proxy,
)
from tests.bench.tokens import Counter, cached_prefix
from tests.support.servers import UvicornThread

THRESHOLDS = (16_000, 32_000, 64_000)
CHART_TRAJECTORIES = ("claude-code/4d5611e5#0", "mini-v2/pylint-dev__astroid-1333")
_prefix, _suffix = PLACEHOLDER_TEMPLATE.split("{key}")
PLACEHOLDER = re.compile(re.escape(_prefix) + r"(.+?)" + re.escape(_suffix))
PROBE_PREFIX = "probe_"
# How long an unused prompt prefix stays cached: the proxy's own lifetime for the replay's
# model (OpenAI's in-memory cache), so the replay and the proxy agree on when it is cold.
CACHE_LIFETIME = lifetime_for("gpt-4o")


@dataclass
class Config:
    name: str
    kind: str  # direct | headroom | xun
    threshold: int | None = None
    compactor: str | None = None
    url: str = ""
    error: str | None = None
    settle: bool = True  # wait before each turn until the proxy has nothing in flight


class ReplayUpstream:
    """The upstream every configuration talks to; it keeps the books."""

    def __init__(self, trajectories: list[Any], counter: Counter) -> None:
        from tests.support.corpus import turns

        self.trajectories = trajectories
        self.replies = [[reply for _, reply in turns(t)] for t in trajectories]
        # The probe resends the last turn's history: only results within it can be asked for.
        self.last_len = [max((len(h) for h, _ in turns(t)), default=0) for t in trajectories]
        self.counter = counter
        self.records: list[dict[str, Any]] = []
        self.previous: dict[tuple[str, int], list[tuple[int, int]]] = {}
        # When each session's last turn was sent (the replay's clock): a prefix unused for
        # longer than the cache lifetime is no longer cached, for every configuration.
        self.previous_at: dict[tuple[str, int], float] = {}
        self.placeholders: dict[tuple[str, int], set[str]] = defaultdict(set)
        self.probes: dict[tuple[str, int], dict[str, Any]] = {}
        self.unmatched = 0
        self.lock = threading.Lock()

    def originals(self, ti: int) -> dict[str, str]:
        messages = self.trajectories[ti].messages[: self.last_len[ti]]
        return {
            key: content_text(messages[i].get("content"))
            for i, key in reclaim_keys(messages).items()
        }

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        key = request.headers.get("x-bench-key") or str(body.get("user") or "")
        try:
            cfg, ti_text, turn = key.split("|")
            ti = int(ti_text)
        except ValueError:
            self.unmatched += 1
            return JSONResponse(
                {
                    "error": {
                        "message": f"unknown replay key {key!r}",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
                400,
            )
        now = _float(request.headers.get("x-bench-now"))
        with self.lock:
            return JSONResponse(self.answer(cfg, ti, turn, body, now))

    def cached(self, cfg: str, ti: int, seq: list[tuple[int, int]], now: float | None) -> int:
        """The prefix the provider still holds: none once the cache has expired."""
        last = self.previous_at.get((cfg, ti))
        if now is not None and last is not None and now - last > CACHE_LIFETIME:
            return 0
        return cached_prefix(self.previous.get((cfg, ti)), seq)

    def answer(
        self, cfg: str, ti: int, turn: str, body: dict[str, Any], now: float | None = None
    ) -> dict[str, Any]:
        messages = body.get("messages") or []
        prompt, seq = self.counter.request(body)
        record: dict[str, Any] = {"cfg": cfg, "ti": ti, "turn": turn, "prompt": prompt, "cached": 0}
        if local_summary.is_summary_request(messages):
            # Cached like a turn (a summary that reuses the session's prefix gets the cache),
            # but it does not become the session's previous request.
            text = local_summary.summarise(messages, self.counter.count)
            cached = self.cached(cfg, ti, seq, now)
            record.update(kind="summary", cached=cached, completion=self.counter.count(text))
            self.records.append(record)
            return completion(
                {"role": "assistant", "content": text}, prompt, cached, record["completion"]
            )
        if turn == "probe":
            return self.probe(cfg, ti, messages, prompt)
        for msg in messages:
            if (
                msg.get("role") == "tool"
                and isinstance(msg.get("content"), str)
                and msg["content"].startswith(_prefix)
            ):
                self.placeholders[(cfg, ti)].update(PLACEHOLDER.findall(msg["content"]))
        cached = self.cached(cfg, ti, seq, now)
        self.previous[(cfg, ti)] = seq
        if now is not None:
            self.previous_at[(cfg, ti)] = now
        reply = self.replies[ti][int(turn)]
        message = {
            k: reply[k] for k in ("role", "content", "tool_calls") if reply.get(k) is not None
        }
        message.setdefault("content", None)
        out_tokens = self.counter.message(message)
        record.update(kind="turn", cached=cached, completion=out_tokens, messages=len(messages))
        self.records.append(record)
        return completion(message, prompt, cached, out_tokens)

    def probe(
        self, cfg: str, ti: int, messages: list[dict[str, Any]], prompt: int
    ) -> dict[str, Any]:
        # Every tool result of the trajectory, by its reclaim key: those shown as placeholders,
        # those summarised away after being reclaimed, and the ones never touched.
        ids = sorted(self.originals(ti))
        seen = self.placeholders.get((cfg, ti)) or set()
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and str(last.get("tool_call_id")).startswith(PROBE_PREFIX):
            originals = self.originals(ti)
            answers = {
                m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"
            }
            ok = failed = 0
            bad: list[str] = []
            for n, tool_id in enumerate(ids):
                got = answers.get(f"{PROBE_PREFIX}{n}")
                # An empty output comes back as the proxy's marker, never as an empty string; a
                # long one as its first page, which says where the next starts (the later pages:
                # tests/session/test_lookback.py).
                want = content_text(page(originals.get(tool_id) or EMPTY_OUTPUT))
                if got is not None and content_text(got) == want:
                    ok += 1
                else:
                    failed += 1
                    bad.append(tool_id)
            self.probes[(cfg, ti)] = {
                "placeholders": len(seen),
                "checked": len(ids),
                "retrieved": ok,
                "placeholders_retrieved": sum(1 for i in seen if i not in bad),
                "failed": failed,
                "failed_ids": bad[:5],
            }
            return completion({"role": "assistant", "content": "probe checked"}, prompt, 0, 2)
        if not ids:
            self.probes[(cfg, ti)] = {
                "placeholders": 0,
                "checked": 0,
                "retrieved": 0,
                "placeholders_retrieved": 0,
                "failed": 0,
            }
            return completion({"role": "assistant", "content": "nothing reclaimed"}, prompt, 0, 2)
        calls = [
            {
                "id": f"{PROBE_PREFIX}{n}",
                "type": "function",
                "function": {
                    "name": EXTRACT_TOOL_NAME,
                    "arguments": orjson.dumps({"toolcall_id": tool_id}).decode(),
                },
            }
            for n, tool_id in enumerate(ids)
        ]
        return completion({"role": "assistant", "content": None, "tool_calls": calls}, prompt, 0, 2)


def completion(message: dict[str, Any], prompt: int, cached: int, out: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-replay-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": out,
            "total_tokens": prompt + out,
            # What is not read from the cache is written into it (the next request reads it).
            "prompt_tokens_details": {
                "cached_tokens": cached,
                "cache_write_tokens": prompt - cached,
            },
        },
    }


class TurnClock:
    """When each turn is sent: the recorded time of the history's last message where the
    trajectory has one (Claude Code's), else `pause` seconds after the turn before, and every
    `every`-th such turn `long_pause` seconds after it (a break: a meeting, lunch)."""

    def __init__(
        self, traj: Any, ti: int, pause: float, every: int = 0, long_pause: float = 0.0
    ) -> None:
        self.times = getattr(traj, "times", None) or []
        self.first = next((t for t in self.times if t is not None), None)
        self.base = 1_800_000_000.0 + ti * 10_000_000.0  # sessions far apart
        self.pause = pause
        self.every, self.long_pause = every, long_pause
        self.turns = 0
        self.last: float | None = None

    def at(self, length: int) -> float:
        stamp = self.times[length - 1] if 0 < length <= len(self.times) else None
        if stamp is not None and self.first is not None:
            now = self.base + (stamp - self.first)
        else:
            self.turns += 1
            breaks = self.every > 0 and self.turns % self.every == 0
            pause = self.long_pause if breaks else self.pause
            now = self.base if self.last is None else self.last + pause
        self.last = now if self.last is None else max(now, self.last)
        return self.last


def _float(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


async def replay(
    cfg: Config,
    trajectories: list[Any],
    run_id: str,
    client_log: list[dict[str, Any]],
    pause: float = 30.0,
    breaks: tuple[int, float] = (0, 0.0),
) -> None:
    from tests.support.corpus import turns

    url = cfg.url + "/v1/chat/completions"
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        for ti, traj in enumerate(trajectories):
            session = f"{run_id}-{cfg.name}-{ti}"
            history: list[dict[str, Any]] = []
            clock = TurnClock(traj, ti, pause, *breaks)
            for k, (history, _) in enumerate(turns(traj)):
                now = clock.at(len(history))
                await settle(client, cfg)
                await send(
                    client, url, cfg, ti, str(k), history, traj.tools, session, client_log, now
                )
            if cfg.kind == "xun" and history:
                await settle(client, cfg)
                await send(client, url, cfg, ti, "probe", history, traj.tools, session, client_log)
            if ti % 25 == 0 or len(traj.messages) > 80:
                print(f"  {cfg.name}: {ti + 1}/{len(trajectories)} {traj.name}", flush=True)


async def settle(client: httpx.AsyncClient, cfg: Config) -> None:
    """Wait until the proxy has nothing in flight (`tests.bench.clocked`): a turn's save and
    the summary it starts ahead run after its answer is out, and the next turn must not race
    them, or the same run gives other figures."""
    if cfg.kind == "xun" and cfg.settle:
        resp = await client.post(cfg.url + SETTLE)
        resp.raise_for_status()


async def send(
    client: httpx.AsyncClient,
    url: str,
    cfg: Config,
    ti: int,
    turn: str,
    history: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    session: str,
    client_log: list[dict[str, Any]],
    now: float | None = None,
) -> None:
    key = f"{cfg.name}|{ti}|{turn}"
    body: dict[str, Any] = {"model": "gpt-4o", "messages": history, "user": key}
    if tools:
        body["tools"] = tools
    headers = {
        "authorization": "Bearer sk-bench",
        "content-type": "application/json",
        "x-bench-key": key,
        "X-Session-Id": session,
    }
    if now is not None:
        headers["x-bench-now"] = repr(now)
    entry: dict[str, Any] = {"cfg": cfg.name, "ti": ti, "turn": turn, "now": now}
    try:
        resp = await client.post(url, content=orjson.dumps(body), headers=headers)
        entry["status"] = resp.status_code
        entry["compaction"] = resp.headers.get("x-xun-compaction")
        if resp.status_code != 200:
            entry["error"] = resp.text[:300]
    except httpx.HTTPError as exc:
        entry["status"] = None
        entry["error"] = repr(exc)[:300]
    client_log.append(entry)


def account(
    configs: list[Config],
    trajectories: list[Any],
    upstream: ReplayUpstream,
    client_log: list[dict[str, Any]],
    factors: list[float],
    write_factor: float = 1.0,
) -> dict[str, Any]:
    rows: dict[str, dict[int, dict[str, Any]]] = {c.name: {} for c in configs}
    series: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for cfg in configs:
        for ti in range(len(trajectories)):
            rows[cfg.name][ti] = {
                "turns": 0,
                "prompt": 0,
                "peak": 0,
                "cached": 0,
                "summary_calls": 0,
                "summary_prompt": 0,
                "summary_cached": 0,
                "summary_completion": 0,
                "level1": 0,
                "level2": 0,
                "errors": 0,
                "turn_prompts": [],
                "summary_turns": [],
            }
    for rec in upstream.records:
        row = rows.get(rec["cfg"], {}).get(rec["ti"])
        if row is None:
            continue
        if rec["kind"] == "summary" and rec["turn"] == "probe":
            # The retrievability probe asks back every placeholder at once (no client does):
            # a summary its answers make the proxy write is the probe's, not counted either.
            continue
        if rec["kind"] == "summary":
            row["summary_calls"] += 1
            row["summary_prompt"] += rec["prompt"]
            row["summary_cached"] += rec["cached"]
            row["summary_completion"] += rec["completion"]
        elif rec["kind"] == "turn":
            row["turns"] += 1
            row["prompt"] += rec["prompt"]
            row["cached"] += rec["cached"]
            row["peak"] = max(row["peak"], rec["prompt"])
            row["turn_prompts"].append((int(rec["turn"]), rec["prompt"]))
    for entry in client_log:
        row = rows.get(entry["cfg"], {}).get(entry["ti"])
        if row is None or entry["turn"] == "probe":
            continue
        if entry.get("status") != 200:
            row["errors"] += 1
            row.setdefault("error_example", entry.get("error"))
        if entry.get("compaction") == "toolcall":
            row["level1"] += 1
        elif entry.get("compaction") == "summary":
            row["level2"] += 1
            row["summary_turns"].append(int(entry["turn"]))
    names = [t.name for t in trajectories]
    for cfg in configs:
        for ti, row in rows[cfg.name].items():
            row["turn_prompts"] = [p for _, p in sorted(row["turn_prompts"])]
            if names[ti] in CHART_TRAJECTORIES:
                series[names[ti]][cfg.name] = row["turn_prompts"]
            # Summaries within three turns of the previous one (issue 8's no-loop rule).
            turns = sorted(row.pop("summary_turns"))
            row["close_summaries"] = sum(1 for a, b in itertools.pairwise(turns) if b - a <= 3)
            row["summary_tokens"] = row["summary_prompt"] + row["summary_completion"]
            row["billed"] = row["prompt"] + row["summary_tokens"]
            for f in factors:
                cached = row["cached"] + row["summary_cached"]
                uncached = row["billed"] - row["summary_completion"] - cached
                row[f"cost_{f}"] = round(
                    write_factor * uncached + f * cached + row["summary_completion"], 1
                )
            probe = upstream.probes.get((cfg.name, ti))
            if probe is not None:
                row["probe"] = probe
            del row["turn_prompts"]
    per_traj: list[dict[str, Any]] = []
    for ti, traj in enumerate(trajectories):
        base = rows.get("direct", {}).get(ti)
        entry = {
            "trajectory": traj.name,
            "source": traj.source,
            "messages": len(traj.messages),
            "configs": {},
        }
        for cfg in configs:
            row = dict(rows[cfg.name][ti])
            if base and base["billed"]:
                row["saving_pct"] = round(100 * (1 - row["billed"] / base["billed"]), 2)
                for f in factors:
                    if base[f"cost_{f}"]:
                        row[f"saving_cost_{f}_pct"] = round(
                            100 * (1 - row[f"cost_{f}"] / base[f"cost_{f}"]), 2
                        )
            entry["configs"][cfg.name] = row
        per_traj.append(entry)
    totals = {}
    for subset, pick in (("all", lambda e: True), ("long", lambda e: e["source"] in LONG)):
        chosen = [e for e in per_traj if pick(e)]
        totals[subset] = total_rows(chosen, configs, factors)
    return {"per_trajectory": per_traj, "totals": totals, "series": series}


LONG = frozenset(
    {"mini-swe-agent-v1", "mini-swe-agent-v2", "claude-code", "openhands", "swe-agent"}
)
SUM_FIELDS = (
    "turns",
    "prompt",
    "cached",
    "summary_calls",
    "summary_prompt",
    "summary_cached",
    "summary_completion",
    "summary_tokens",
    "billed",
    "level1",
    "level2",
    "close_summaries",
    "errors",
)


def total_rows(
    entries: list[dict[str, Any]], configs: list[Config], factors: list[float]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cfg in configs:
        tot: dict[str, Any] = {f: 0 for f in SUM_FIELDS}
        tot["peak"] = 0
        probes = {
            "placeholders": 0,
            "placeholders_retrieved": 0,
            "checked": 0,
            "retrieved": 0,
            "failed": 0,
        }
        worse = {f: 0 for f in factors}
        for e in entries:
            row = e["configs"][cfg.name]
            for f in SUM_FIELDS:
                tot[f] += row[f]
            tot["peak"] = max(tot["peak"], row["peak"])
            for f in factors:
                tot[f"cost_{f}"] = round(tot.get(f"cost_{f}", 0) + row[f"cost_{f}"], 1)
                if row.get(f"saving_cost_{f}_pct", 0) < -1:
                    worse[f] += 1
            for k in probes:
                probes[k] += (row.get("probe") or {}).get(k, 0)
        tot["trajectories"] = len(entries)
        tot["probe"] = probes
        tot["costlier_than_direct_by_1pct"] = {str(f): worse[f] for f in factors}
        out[cfg.name] = tot
    base = out.get("direct")
    for tot in out.values():
        if base and base["billed"]:
            tot["saving_pct"] = round(100 * (1 - tot["billed"] / base["billed"]), 2)
            for f in factors:
                tot[f"saving_cost_{f}_pct"] = round(
                    100 * (1 - tot[f"cost_{f}"] / base[f"cost_{f}"]), 2
                )
    return out


def configurations(args: argparse.Namespace) -> list[Config]:
    configs = [Config("direct", "direct")]
    if "headroom" not in args.skip:
        configs.append(Config("headroom", "headroom"))
    compactors = args.compactor or [None]
    for spec in compactors:
        if spec is None:
            label, path = "xun", None
        elif "=" in spec:
            label, path = spec.split("=", 1)
        else:
            label, path = spec.rsplit(":", 1)[-1], spec
        for threshold in args.thresholds:
            configs.append(Config(f"{label}@{threshold // 1000}k", "xun", threshold, path))
    return configs


def pick_trajectories(args: argparse.Namespace) -> list[Any]:
    from tests.support.corpus import load_all

    trajectories = load_all(args.corpus)
    if args.only:
        trajectories = [t for t in trajectories if any(s in t.name for s in args.only)]
    if args.quick:
        long = [t for t in trajectories if t.source in LONG and len(t.messages) < 200][:3]
        short = [t for t in trajectories if t.source not in LONG][:10]
        trajectories = long + short
    return trajectories


def start(
    configs: list[Config], upstream_url: str, scratch: Path, args: argparse.Namespace
) -> tuple[list[Child], dict[str, Any]]:
    children: list[Child] = []
    setup: dict[str, Any] = {}
    for cfg in configs:
        if cfg.kind == "direct":
            cfg.url = upstream_url
            continue
        if cfg.kind == "headroom":
            info = peers.ensure("headroom", install=not args.no_install)
            setup["headroom"] = {"ok": info.ok, "version": info.version, "error": info.error}
            if not info.ok:
                cfg.error = info.error
                continue
            child = peers.headroom_child(upstream_url, scratch)
        else:
            extra: dict[str, Any] = {"compactor": cfg.compactor} if cfg.compactor else {}
            child = xun_proxy(
                f"xun-{cfg.name.replace('@', '-')}",
                upstream_url + "/v1",
                scratch,
                store=f"sqlite:///{scratch / (cfg.name.replace('@', '-') + '.db')}",
                token_threshold=cfg.threshold,
                max_body_bytes=256 * 2**20,
                module="tests.bench.clocked",
                **extra,
            )
        try:
            child.start()
            children.append(child)
            child.wait_ready("/health" if cfg.kind == "headroom" else "/healthz", 180)
        except (RuntimeError, OSError) as exc:
            cfg.error = f"did not start: {exc}"
            setup[cfg.name] = {"ok": False, "error": cfg.error}
            print(f"{cfg.name}: {cfg.error}", flush=True)
            continue
        cfg.url = child.url
        setup[cfg.name] = {
            "ok": True,
            "command": " ".join(child.argv),
            **({"compactor": cfg.compactor} if cfg.compactor else {}),
        }
    return children, setup


def cold_turns(client_log: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per configuration: turns sent after a pause longer than the cache lifetime, and how
    many of them the proxy compacted."""
    out: dict[str, dict[str, int]] = {}
    last: dict[tuple[str, int], float] = {}
    for entry in sorted(client_log, key=lambda e: (e["cfg"], e["ti"], e.get("now") or 0)):
        now, key = entry.get("now"), (entry["cfg"], entry["ti"])
        if now is None or not str(entry.get("turn")).isdigit():
            continue
        row = out.setdefault(entry["cfg"], {"cold_turns": 0, "compacted_when_cold": 0})
        if key in last and now - last[key] > CACHE_LIFETIME:
            row["cold_turns"] += 1
            if entry.get("compaction") in ("toolcall", "summary"):
                row["compacted_when_cold"] += 1
        last[key] = now
    return out


def probe_text(p: dict[str, Any]) -> str:
    shown = f"{p['placeholders_retrieved']}/{p['placeholders']}"
    return f"{shown} ({p['retrieved']}/{p['checked']})"


def print_tables(result: dict[str, Any]) -> None:
    cold = result.get("cold") or {}
    if cold:
        print_header(
            f"Cold prompt caches (turns more than {result['cache_lifetime']:.0f} s after the "
            f"previous one; {result['pause']:.0f} s between turns without a recorded time)"
        )
        rows = [[name, v["cold_turns"], v["compacted_when_cold"]] for name, v in cold.items()]
        print(table(["config", "cold turns", "compacted at a cold turn"], rows))
    factors = result["cache_factors"]
    f0 = factors[0]
    print_header(f"Token economy per trajectory (long ones; saving vs direct; cost at {f0}x cache)")
    names = [c for c in result["configs"]]
    rows = []
    for entry in result["per_trajectory"]:
        if entry["source"] not in LONG:
            continue
        for name in names:
            row = entry["configs"].get(name) or {}
            rows.append(
                [
                    entry["trajectory"],
                    name,
                    row.get("turns"),
                    row.get("billed"),
                    row.get("peak"),
                    row.get("level1"),
                    row.get("level2"),
                    row.get("summary_calls"),
                    row.get("summary_tokens"),
                    row.get("saving_pct"),
                    row.get(f"saving_cost_{f0}_pct"),
                    row.get("saving_cost_0.5_pct"),
                ]
            )
    heads = [
        "trajectory",
        "config",
        "turns",
        "billed",
        "peak",
        "L1",
        "L2",
        "sum calls",
        "sum tok",
        "saving %",
        f"cost saving {f0}x %",
        "cost saving 0.5x %",
    ]
    print(table(heads, rows))
    for subset in ("all", "long"):
        print_header(f"Totals ({subset} trajectories)")
        rows = []
        for name, tot in result["totals"][subset].items():
            rows.append(
                [
                    name,
                    tot["trajectories"],
                    tot["turns"],
                    tot["billed"],
                    tot["peak"],
                    tot["level1"],
                    tot["level2"],
                    tot["summary_calls"],
                    tot["summary_tokens"],
                    tot.get("saving_pct"),
                    tot.get(f"saving_cost_{f0}_pct"),
                    tot.get("saving_cost_0.5_pct"),
                    tot["costlier_than_direct_by_1pct"].get(str(f0)),
                    probe_text(tot["probe"]),
                    tot["errors"],
                ]
            )
        heads2 = [
            "config",
            "traj",
            "turns",
            "billed",
            "peak",
            "L1",
            "L2",
            "sum calls",
            "sum tok",
            "saving %",
            f"cost saving {f0}x %",
            "cost saving 0.5x %",
            f"traj costlier {f0}x",
            "placeholders retrievable (all results)",
            "errors",
        ]
        print(table(heads2, rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="xun-proxy token economy on the corpus")
    parser.add_argument("--quick", action="store_true", help="3 long + 10 short trajectories")
    parser.add_argument("--only", nargs="*", help="trajectories whose name contains one of these")
    parser.add_argument("--thresholds", nargs="+", type=int, default=list(THRESHOLDS))
    parser.add_argument(
        "--corpus", type=Path, default=None, help="the corpus's raw/ folder (default: shared's)"
    )
    parser.add_argument(
        "--compactor",
        action="append",
        metavar="[NAME=]package.module:Class",
        help="compaction strategy for xun-proxy (config key `compactor`); repeatable",
    )
    parser.add_argument("--cache-factor", type=float, default=0.1, help="price of a cached token")
    parser.add_argument(
        "--write-factor", type=float, default=1.0, help="price of an uncached token (a cache write)"
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=30.0,
        help="seconds between turns without a recorded time (Claude Code's have one)",
    )
    parser.add_argument(
        "--break-every",
        type=int,
        default=0,
        metavar="N",
        help="every N-th turn without a recorded time comes after --break seconds instead",
    )
    parser.add_argument("--break", dest="long_pause", type=float, default=1200.0)
    parser.add_argument("--skip", nargs="*", default=[], choices=["headroom"])
    parser.add_argument("--no-install", action="store_true", help="do not pip-install Headroom")
    parser.add_argument("--tag", default="", help="suffix of the result file")
    args = parser.parse_args(argv)
    started = time.time()
    counter = Counter.create()
    print(f"token counts: {counter.source}", flush=True)
    trajectories = pick_trajectories(args)
    configs = configurations(args)
    factors = sorted({args.cache_factor, 0.5})
    factors = [args.cache_factor] + [f for f in factors if f != args.cache_factor]
    upstream = ReplayUpstream(trajectories, counter)
    breaks = (args.break_every, args.long_pause)
    scratch = run_dir("economy")
    server = UvicornThread(upstream.app(), log_level="warning", timeout_keep_alive=600)
    server.start()
    run_id = uuid.uuid4().hex[:8]
    client_log: list[dict[str, Any]] = []
    children, setup = start(configs, server.url, scratch, args)
    try:
        with running(children):
            active = [c for c in configs if c.error is None]

            async def all_configs() -> None:
                await asyncio.gather(
                    *(
                        replay(c, trajectories, run_id, client_log, args.pause, breaks)
                        for c in active
                    )
                )

            asyncio.run(all_configs())
            if any(c.kind == "headroom" for c in active):
                setup.setdefault("headroom", {})["notes"] = peers.headroom_notes(scratch)
    finally:
        server.stop()
    active_configs = [c for c in configs if c.error is None]
    books = account(active_configs, trajectories, upstream, client_log, factors, args.write_factor)
    result = {
        "machine": machine(),
        "commit": git_commit(),
        "argv": sys.argv[1:],
        "mode": "quick" if args.quick else "full",
        "seconds": round(time.time() - started, 1),
        "token_counts": counter.source,
        "summariser": local_summary.LABEL,
        "cache_factors": factors,
        "write_factor": args.write_factor,
        "pause": args.pause,
        "breaks": {"every": args.break_every, "seconds": args.long_pause},
        "cache_lifetime": CACHE_LIFETIME,
        "cold": cold_turns(client_log),
        "cache_model": "longest common prefix with the session's previous request, in whole blocks "
        "(the tools block, then messages); summary calls get the same rule against the session's "
        "previous request, their completion tokens count at 1x",
        "configs": {
            c.name: {
                "kind": c.kind,
                "threshold": c.threshold,
                "compactor": c.compactor,
                "error": c.error,
            }
            for c in configs
        },
        "setup": setup,
        "unmatched_requests": upstream.unmatched,
        "trajectories": len(trajectories),
        **books,
        "scratch": str(scratch),
    }
    print_tables(result)
    name = "economy" + (f"-{args.tag}" if args.tag else "") + ("-quick" if args.quick else "")
    path = write_result(name, result)
    print(f"\nwrote {path} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
