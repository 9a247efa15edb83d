"""Summaries prepared ahead: when the crossing is near, and the summariser of the turn that
crosses. Pure: no I/O (the background request itself is `proxy.turn.summary_ahead`'s).

- `lead_turns` and `projections`: how far ahead to look (a turn or two, more when a summary
  takes longer than the session's turns are apart) and the sizes the session's growth per
  turn says its next requests will have. The strategy itself is then asked, on those sizes,
  whether it would summarise (`WouldSummarise` records the question without answering it).
- `AheadSummarizer`: what the crossing turn's compactor calls for its summary. It gives the
  prepared summary when one fits (and limits the cut to the messages it covers), and
  otherwise answers nothing and notes it (`deferred`): the turn then goes upstream as it would
  have without compacting, and the summary joins a later turn. Only a request that would not
  fit the model's window without a summary (`must_wait`) waits for one, as before.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from proxy.compaction.summarizer import Summarizer

# Turns looked ahead at least, and at most (a summary slower than this many turns joins later).
MIN_LEAD_TURNS = 2
MAX_LEAD_TURNS = 6
# Turns of the log the growth per turn is read from.
GROWTH_WINDOW = 4


def _sizes(records: list[dict[str, Any]]) -> list[tuple[float, int, str]]:
    out = []
    for record in records:
        total = record.get("total_tokens")
        if isinstance(total, int) and not isinstance(total, bool):
            at = record.get("at")
            stamp = float(at) if isinstance(at, int | float) else 0.0
            out.append((stamp, total, str(record.get("compaction") or "none")))
    return out


def growth_per_turn(records: list[dict[str, Any]], window: int = GROWTH_WINDOW) -> float | None:
    """The mean growth of the billed size over the last turns that compacted nothing; None
    before two such turns."""
    sizes = _sizes(records)
    steps = [
        later[1] - earlier[1]
        for earlier, later in itertools.pairwise(sizes)
        if later[2] == "none" and later[1] >= earlier[1]
    ][-window:]
    return sum(steps) / len(steps) if steps else None


def turn_interval(records: list[dict[str, Any]], window: int = GROWTH_WINDOW) -> float | None:
    """Seconds between the session's last turns (the median of the recent gaps)."""
    stamps = [s[0] for s in _sizes(records) if s[0] > 0][-(window + 1) :]
    gaps = sorted(b - a for a, b in itertools.pairwise(stamps) if b >= a)
    return gaps[len(gaps) // 2] if gaps else None


def lead_turns(summary_seconds: float | None, interval: float | None) -> int:
    """How many turns ahead a summary must start to be ready at the crossing."""
    if not summary_seconds or not interval or interval <= 0:
        return MIN_LEAD_TURNS
    needed = math.ceil(summary_seconds / interval) + 1
    return max(MIN_LEAD_TURNS, min(MAX_LEAD_TURNS, needed))


def projections(total: int, growth: float, lead: int) -> list[int]:
    """The sizes of the session's next `lead` requests at its growth per turn."""
    step = max(0.0, growth)
    return [int(total + step * k) for k in range(1, lead + 1)]


@dataclass
class WouldSummarise:
    """The summariser while a strategy is asked whether it would summarise: it notes the
    question and answers nothing (the strategy then keeps the conversation as it was)."""

    shares_prefix: bool = False
    asked: bool = False

    async def __call__(self, messages: list[dict[str, Any]]) -> str | None:
        self.asked = True
        return None


@dataclass
class AheadSummarizer:
    """The crossing turn's summariser (see the module docstring).

    `prepared`: the summary written ahead, when one fits this request; `cut_limit`: the index
    in the conversation of the first message it does not cover (`Conversation.acompact`
    keeps that message and the ones after it).
    """

    inner: Summarizer
    prepared: str | None = None
    cut_limit: int | None = None
    must_wait: bool = False
    used: bool = False
    deferred: bool = False

    @property
    def shares_prefix(self) -> bool:
        return self.inner.shares_prefix

    async def __call__(self, messages: list[dict[str, Any]]) -> str | None:
        if self.prepared is not None:
            self.used = True
            return self.prepared
        if self.must_wait:
            return await self.inner(messages)
        self.deferred = True
        return None
