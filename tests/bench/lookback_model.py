"""The looking-back replay model (issue 35): the economy's replay upstream, which also counts
future-reference coverage (`tests.bench.coverage`) and, for a `look@` configuration, looks back
through the proxy's hidden tool before it gives a turn's recorded answer.

Coverage: at every turn from a session's first compaction (the first request that shows a
placeholder or a summary), the literals the recorded next action uses
that its history held are each counted visible, one read away, one search away or
unreachable, in what the proxy sent upstream. A search's hits are computed with the proxy's
semantics over what the request does not show.

Looking back: when a literal its next action uses is not visible, the model first calls the
hidden tool, as a model would: one round with a search for each such literal; then, for each
search whose previews did not show the literal, it reads the newest hit (page after page while
a page goes on, then the next hit), at most `MAX_ROUNDS` rounds in all. The proxy answers
these rounds itself; each is a request the upstream bills, like any other.

A reader (`--reader`) also reads the hit whose preview showed the literal, as an agent opens
the file it found: the reads a self-tuning compaction learns from (`proxy.session.asked_back`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.session.extract_tool import EXTRACT_TOOL_NAME, content_text
from proxy.session.history import reclaim_keys
from tests.bench import coverage, local_summary, replay_wires
from tests.bench.coverage import Tally
from tests.bench.economy import PLACEHOLDER, ReplayUpstream, completion
from tests.bench.tokens import Counter

LOOK_PREFIX = "look_"
MAX_ROUNDS = 4  # hidden rounds before a turn's recorded answer, at most
HIT_ID = re.compile(r"^- (\S+) \(turn \d+, ", re.MULTILINE)  # a search hit's line
NEXT_PAGE = re.compile(r"the next page starts at offset (\d+)\.\]$")


def hit_holding(answer: str, literal: str) -> str | None:
    """The id of the first search hit whose preview shows `literal`."""
    starts = list(HIT_ID.finditer(answer))
    for n, m in enumerate(starts):
        end = starts[n + 1].start() if n + 1 < len(starts) else len(answer)
        if literal in answer[m.start() : end]:
            return m.group(1)
    return None


def next_step(call: dict[str, Any], answer: str) -> dict[str, Any] | None:
    """What a model does when an answer did not show the literal it wants: after a search, it
    reads the newest hit; after a page that goes on, the next page; after a whole original,
    the next hit of its search; else it gives up."""
    literal, args = call["literal"], call["args"]
    hits = list(call.get("hits") or [])
    if "query" in args:
        hits = HIT_ID.findall(answer)
    else:
        page = NEXT_PAGE.search(answer.rstrip())
        if page is not None:
            read = {"toolcall_id": args["toolcall_id"], "offset": int(page.group(1))}
            return {"literal": literal, "args": read, "hits": hits}
    if not hits:
        return None
    return {"literal": literal, "args": {"toolcall_id": hits[0]}, "hits": hits[1:]}


class LookUpstream(ReplayUpstream):
    """The economy's replay upstream, counting coverage and, for `look@`, looking back."""

    def __init__(self, trajectories: list[Any], counter: Counter, reader: bool = False) -> None:
        super().__init__(trajectories, counter)
        self.reader = reader
        from tests.support.corpus import turns

        self.lengths = [[len(h) for h, _ in turns(t)] for t in trajectories]
        self.literals = [self._literals(t) for t in trajectories]
        self.all_originals = [self._originals(t) for t in trajectories]
        self.compacted: set[tuple[str, int]] = set()
        self.tallies: dict[tuple[str, int], Tally] = defaultdict(Tally)
        self.looks: dict[tuple[str, int], dict[str, int]] = defaultdict(
            lambda: dict.fromkeys(("turns", "rounds", "reads", "searches", "found", "missed"), 0)
        )
        self.misses: dict[tuple[str, int], list[list[Any]]] = defaultdict(list)
        self.plans: dict[tuple[str, int, str], dict[str, Any]] = {}

    def app(self) -> Starlette:
        routes = [Route("/v1/chat/completions", self.chat, methods=["POST"])]
        for wire in ("responses", "messages"):
            routes.append(Route(replay_wires.PATHS[wire], self.endpoint(wire), methods=["POST"]))
        return Starlette(routes=routes)

    def endpoint(self, wire: str) -> Any:
        async def answer(request: Request) -> Response:
            body = orjson.loads(await request.body())
            key = replay_wires.bench_key(request, body)
            try:
                cfg, ti_text, turn = key.split("|")
                ti = int(ti_text)
            except ValueError:
                self.unmatched += 1
                return replay_wires.error(f"unknown replay key {key!r}")
            now_text = request.headers.get("x-bench-now")
            now = float(now_text) if now_text else None
            chat = replay_wires.as_chat(wire, body)
            with self.lock:
                out = self.answer(cfg, ti, turn, chat, now)
            return JSONResponse(replay_wires.wire_reply(wire, out))

        return answer

    @staticmethod
    def _literals(traj: Any) -> list[list[str]]:
        from tests.support.corpus import turns

        out: list[list[str]] = []
        text: list[str] = []
        idents: set[str] = set()
        done = 0
        for history, reply in turns(traj):
            for message in history[done:]:
                piece = "\n".join(coverage.message_texts(message))
                text.append(piece)
                idents |= coverage.identifier_words(piece)
            done = len(history)
            out.append(sorted(coverage.action_literals(reply, "\n".join(text), idents)))
        return out

    @staticmethod
    def _originals(traj: Any) -> dict[str, str]:
        messages = traj.messages
        return {
            k: content_text(messages[i].get("content")) for i, k in reclaim_keys(messages).items()
        }

    def answer(
        self, cfg: str, ti: int, turn: str, body: dict[str, Any], now: float | None = None
    ) -> dict[str, Any]:
        messages = body.get("messages") or []
        if cfg == "direct" or not turn.isdigit() or local_summary.is_summary_request(messages):
            return super().answer(cfg, ti, turn, body, now)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and str(last.get("tool_call_id")).startswith(LOOK_PREFIX):
            return self.follow_up(cfg, ti, turn, body, now)
        missing = self.classify(cfg, ti, int(turn), messages)
        if cfg.startswith("look@") and missing:
            calls = [{"literal": literal, "args": {"query": literal}} for literal, _ in missing]
            self.looks[(cfg, ti)]["turns"] += 1
            self.plans[(cfg, ti, turn)] = {"calls": calls, "round": 1}
            return self.ask(cfg, ti, turn, body, now, calls)
        return super().answer(cfg, ti, turn, body, now)

    def classify(
        self, cfg: str, ti: int, k: int, messages: list[dict[str, Any]]
    ) -> list[tuple[str, str]]:
        """Count this turn's literals; return the ones not visible, with their category."""
        history = self.trajectories[ti].messages[: self.lengths[ti][k]]
        shown = coverage.shown_text(messages)
        key = (cfg, ti)
        items: list[coverage.Item] | None = None
        if key not in self.compacted:
            if not coverage.compacted(shown):
                return []
            self.compacted.add(key)
        ids = set()
        for m in messages:
            if m.get("role") == "tool":
                ids.update(PLACEHOLDER.findall(coverage.content_text(m.get("content"))))
        originals = [self.all_originals[ti][i] for i in ids if i in self.all_originals[ti]]
        out = []
        for literal in self.literals[ti][k]:

            def find(query: str) -> list[coverage.Item]:
                nonlocal items
                if items is None:
                    items = coverage.unsent_items(history, shown)
                return coverage.search(items, query)

            category = coverage.classify(literal, shown, originals, find)
            self.tallies[key].add(category, literal)
            if category != "visible":
                out.append((literal, category))
                if len(self.misses[key]) < 12:
                    self.misses[key].append([k, literal, category])
        return out

    def ask(
        self,
        cfg: str,
        ti: int,
        turn: str,
        body: dict[str, Any],
        now: float | None,
        calls: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """A hidden round: the tool calls of `calls`, billed like any request."""
        round_no = self.plans[(cfg, ti, turn)]["round"]
        tool_calls = []
        for n, c in enumerate(calls):
            c["id"] = f"{LOOK_PREFIX}{turn}_{round_no}_{n}"
            kind = "searches" if "query" in c["args"] else "reads"
            self.looks[(cfg, ti)][kind] += 1
            tool_calls.append(
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {
                        "name": EXTRACT_TOOL_NAME,
                        "arguments": orjson.dumps(c["args"]).decode(),
                    },
                }
            )
        self.looks[(cfg, ti)]["rounds"] += 1
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
        prompt, seq = self.counter.request(body)
        cached = self.cached(cfg, ti, seq, now)
        self.previous[(cfg, ti)] = seq
        if now is not None:
            self.previous_at[(cfg, ti)] = now
        out = self.counter.message(message)
        self.records.append(
            {
                "cfg": cfg,
                "ti": ti,
                "turn": turn,
                "kind": "turn",
                "prompt": prompt,
                "cached": cached,
                "completion": out,
                "messages": len(body.get("messages") or []),
                "round": round_no,
            }
        )
        return completion(message, prompt, cached, out)

    def follow_up(
        self, cfg: str, ti: int, turn: str, body: dict[str, Any], now: float | None
    ) -> dict[str, Any]:
        """The proxy's answers to a hidden round: read on where a search did not show it."""
        plan = self.plans.get((cfg, ti, turn))
        messages = body.get("messages") or []
        answers = {
            m.get("tool_call_id"): coverage.content_text(m.get("content"))
            for m in messages
            if m.get("role") == "tool"
        }
        nxt = []
        for c in (plan or {}).get("calls", []):
            text = answers.get(c["id"], "")
            if c["literal"] in text:
                hit = hit_holding(text, c["literal"]) if self.reader else None
                if "query" in c["args"] and hit is not None and plan is not None:
                    if plan["round"] < MAX_ROUNDS:  # a reader opens what it found
                        nxt.append({"literal": c["literal"], "args": {"toolcall_id": hit}})
                        continue
                self.looks[(cfg, ti)]["found"] += 1
                continue
            step = next_step(c, text)
            if step is not None and plan is not None and plan["round"] < MAX_ROUNDS:
                nxt.append(step)
            else:
                self.looks[(cfg, ti)]["missed"] += 1
        if plan is not None and nxt:
            plan["round"] += 1
            plan["calls"] = nxt
            return self.ask(cfg, ti, turn, body, now, nxt)
        self.plans.pop((cfg, ti, turn), None)
        return ReplayUpstream.answer(self, cfg, ti, turn, body, now)
