"""Upper bounds on what any compaction can save on the corpus, from the direct replay alone.

    python -m tests.bench.bounds

For each trajectory and threshold, the direct calls are priced as the economy benchmark prices
them (o200k_base counts; the longest common prefix, in whole blocks, with the previous request
is cached at the factor). A compaction can only change the turns from the first one whose
prompt is over the threshold on; those turns' share of the direct cost is the first bound.

The second, tighter bound holds the prompt after crossing at a floor no real strategy beats:
the first system message, the first user message (the task) and one summary of
SUMMARY_MAX_TOKENS tokens, all cached, plus what the turn adds (the messages that are new since
the previous request, billed in full as they are in the direct replay). One compaction is paid:
the floor sent once uncached and one summary call (its prompt at the cached price, the
instruction and the summary in full). Every later compaction, any tail kept for the model to
work with, and the summaries' growth are left out, so the real saving is strictly below this.
"""

from __future__ import annotations

from typing import Any

from proxy.compact import SUMMARY_MAX_TOKENS
from tests.bench.economy import LONG
from tests.bench.tokens import Counter, cached_prefix

THRESHOLDS = (16_000, 32_000, 64_000)
FACTORS = (0.1, 0.5)
SUMMARY_INSTRUCTION = 450


def replay(traj: Any, counter: Counter) -> list[tuple[int, int, int]]:
    """(prompt, cached, floor) of each direct turn."""
    from tests.support.corpus import turns

    out: list[tuple[int, int, int]] = []
    previous: list[tuple[int, int]] | None = None
    for history, _ in turns(traj):
        body: dict[str, Any] = {"messages": history}
        if traj.tools:
            body["tools"] = traj.tools
        prompt, seq = counter.request(body)
        cached = cached_prefix(previous, seq)
        previous = seq
        sizes = list(zip(history, seq[1:], strict=True))
        system = next((t for m, (_, t) in sizes if m["role"] == "system"), 0)
        task = next((t for m, (_, t) in sizes if m["role"] == "user"), 0)
        out.append((prompt, cached, seq[0][1] + system + task + SUMMARY_MAX_TOKENS))
    return out


def bounds(rows: list[tuple[int, int, int]], threshold: int) -> dict[str, float]:
    out: dict[str, float] = {}
    cross = next((k for k, (p, _, _) in enumerate(rows) if p > threshold), None)
    raw = sum(p for p, _, _ in rows)
    out["raw"] = raw
    for f in FACTORS:
        out[f"direct_{f}"] = sum(p - c + f * c for p, c, _ in rows)
    if cross is None:
        out["raw_bound"] = raw
        for f in FACTORS:
            out[f"after_{f}"] = 0.0
            out[f"bound_{f}"] = out[f"direct_{f}"]
        return out
    head, tail = rows[:cross], rows[cross:]
    floor = tail[0][2]
    out["raw_bound"] = sum(p for p, _, _ in head) + sum(min(p, floor + (p - c)) for p, c, _ in tail)
    for f in FACTORS:
        head_cost = sum(p - c + f * c for p, c, _ in head)
        out[f"after_{f}"] = out[f"direct_{f}"] - head_cost
        summary = f * tail[0][0] + SUMMARY_INSTRUCTION + SUMMARY_MAX_TOKENS
        held = floor + sum(min(p - c + f * c, (p - c) + f * floor) for p, c, _ in tail[1:])
        out[f"bound_{f}"] = head_cost + min(out[f"after_{f}"], held + summary)
    return out


def sawtooth(rows: list[tuple[int, int, int]], threshold: int) -> dict[str, float]:
    """The ideal of compacting only when over the threshold: on every turn whose prompt
    would be over it, one summary call (the prompt at the cached price, the instruction and
    the summary in full) and the prompt back at the floor plus the turn's new messages,
    uncached; no tail, no waiting. Raw tokens count the summary calls' prompts in full."""
    out = {"raw_saw": 0.0, **{f"saw_{f}": 0.0 for f in FACTORS}}
    size: int | None = None  # the compacted prompt of the previous turn, once compacted
    for prompt, cached, floor in rows:
        new = prompt - cached
        current, hit = (prompt, cached) if size is None else (size + new, size)
        if current > threshold:
            extra = SUMMARY_INSTRUCTION + SUMMARY_MAX_TOKENS
            out["raw_saw"] += current + extra
            for f in FACTORS:
                out[f"saw_{f}"] += f * current + extra
            current, hit = floor + new, 0
            size = current
        elif size is not None:
            size = current
        out["raw_saw"] += current
        for f in FACTORS:
            out[f"saw_{f}"] += current - hit + f * hit
    return out


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}" if whole else ""


def cells(b: dict[str, float]) -> str:
    """after crossing | floor bound | at-threshold ideal, each as 0.1x / 0.5x (/ raw) %."""
    after = " / ".join(pct(b[f"after_{f}"], b[f"direct_{f}"]) for f in FACTORS)
    floor = [pct(b[f"direct_{f}"] - b[f"bound_{f}"], b[f"direct_{f}"]) for f in FACTORS]
    floor.append(pct(b["raw"] - b["raw_bound"], b["raw"]))
    saw = [pct(b[f"direct_{f}"] - b[f"saw_{f}"], b[f"direct_{f}"]) for f in FACTORS]
    saw.append(pct(b["raw"] - b["raw_saw"], b["raw"]))
    return f"{after} | {' / '.join(floor)} | {' / '.join(saw)}"


def main() -> None:
    from tests.support.corpus import load_all

    counter = Counter.create()
    trajectories = load_all()
    data = {t.name: (t.source in LONG, replay(t, counter)) for t in trajectories}
    print(f"token counts: {counter.source}\n")
    heads = (
        "direct cost after crossing 0.1x / 0.5x % | floor bound 0.1x / 0.5x / raw % | "
        "at-threshold ideal 0.1x / 0.5x / raw % |"
    )
    print(f"| trajectory | threshold | direct peak | {heads}")
    print("|---|---|---|---|---|---|")
    totals: dict[tuple[str, int], dict[str, float]] = {}
    for name, (long, rows) in data.items():
        peak = max((p for p, _, _ in rows), default=0)
        for t in THRESHOLDS:
            b = {**bounds(rows, t), **sawtooth(rows, t)}
            for subset in ("long", "all") if long else ("all",):
                tot = totals.setdefault((subset, t), {})
                for k, v in b.items():
                    tot[k] = tot.get(k, 0.0) + v
            if long and peak > t:
                print(f"| {name} | {t // 1000}k | {peak:,} | {cells(b)} |")
    print(f"\n| totals | threshold | {heads}")
    print("|---|---|---|---|---|")
    for (subset, t), b in sorted(totals.items(), key=lambda kv: (kv[0][0] != "long", kv[0][1])):
        print(f"| {subset} | {t // 1000}k | {cells(b)} |")


if __name__ == "__main__":
    main()
