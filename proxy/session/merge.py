"""What the loser of a compare-and-set race writes: two session states merged. Pure code.

Two requests of one session (an agent's parallel sub-calls, a client retry, two replicas)
each save the state they ended with; the later writer finds a newer version in the store. It
re-reads that state ("theirs") and merges it with its own ("mine") using the fingerprint
chain of its own request, which tells which of their decisions apply to its messages:

- The side with more compaction (a summary first, then more summary rounds, tool rounds and
  reclaimed ids) keeps its compaction. A summary is never dropped: when theirs is ahead and
  fits my messages (its cut matches my chain, its prefix is no longer than mine), I adopt it
  and keep my prefix and usage; when it does not fit, their state is kept as it is.
- Of two equally compacted states, the one covering the longer client prefix is kept.
- Reclaimed ids are united (those in my messages), hidden extract calls of both are kept
  (a rebuild re-checks each against its anchor message), and so are both turn logs and
  both sides' thinking bindings (each block's own prefix, whichever turn saw it). The
  savings totals add the other side's turns to the kept side's; of the look-back counts
  each side's higher is kept.

A longer prefix of theirs that cannot be checked against my messages (it reaches past them)
is never grafted onto my compaction: one of the two states is then kept whole, so the stored
state always describes one history consistently.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from dataclasses import replace
from typing import Any

import orjson

from proxy.session import savings_record
from proxy.session.asked_back import clean_counts
from proxy.session.fingerprint import PrefixChain
from proxy.session.prepared import carried
from proxy.session.state import HiddenExtract, SessionState
from proxy.session.turn_log import MAX_TURNS_KEPT, TurnLog, decode


def compaction_rank(state: SessionState) -> tuple[bool, int, int, int]:
    """How far compaction has gone; higher wins a merge."""
    return (
        bool(state.summary),
        state.summary_rounds,
        state.toolcall_rounds,
        len(state.reclaimed),
    )


def merge_states(
    mine: SessionState, theirs: SessionState, chain: PrefixChain, keys: Collection[str]
) -> SessionState | None:
    """The state to write over `theirs`, or None when `theirs` already holds everything.

    `chain` fingerprints my request's messages; `keys` are the reclaim keys that exist in them.
    """
    mine_rank, their_rank = compaction_rank(mine), compaction_rank(theirs)
    fits = theirs.summary is None or chain.matches(theirs.cut, theirs.cut_hash)
    if their_rank > mine_rank:
        if fits and theirs.prefix_len <= mine.prefix_len:
            return _adopt(mine, theirs, keys)
        return _keep_theirs(theirs, mine)
    if their_rank == mine_rank and theirs.prefix_len > mine.prefix_len:
        return _keep_theirs(theirs, mine)
    merged = replace(
        mine,
        reclaimed=_union(mine.reclaimed, theirs.reclaimed, keys),
        hidden=_hidden(mine, theirs, mine.cut if mine.summary else 0),
        turn_log=_turns(mine, theirs),
        savings=_savings(mine, theirs),
        context_window=_window(mine, theirs),
        resets=max(mine.resets, theirs.resets),
        thinking={**theirs.thinking, **mine.thinking},
        **_counts(mine, theirs),
    )
    merged.ahead = carried(merged, mine, theirs)
    return merged


def _adopt(mine: SessionState, theirs: SessionState, keys: Collection[str]) -> SessionState:
    """My prefix and usage, with their (further) compaction."""
    cut = theirs.cut if theirs.summary else 0
    adopted = replace(
        mine,
        summary=theirs.summary,
        trail=theirs.trail,  # the trail belongs with the summary it was kept with
        cut=theirs.cut,
        cut_hash=theirs.cut_hash,
        moved_user=theirs.moved_user,
        summary_rounds=theirs.summary_rounds,
        toolcall_rounds=max(mine.toolcall_rounds, theirs.toolcall_rounds),
        toolcall_reclaimed=max(mine.toolcall_reclaimed, theirs.toolcall_reclaimed),
        reclaimed=_union(theirs.reclaimed, mine.reclaimed, keys),
        hidden=_hidden(mine, theirs, cut),
        turn_log=_turns(mine, theirs),
        savings=_savings(mine, theirs),
        last_compaction=theirs.last_compaction,
        # What their compaction measured and reset belongs with it.
        size_after_summary=theirs.size_after_summary,
        removed_by_summary=theirs.removed_by_summary,
        accrued=theirs.accrued,
        context_window=_window(mine, theirs),
        resets=max(mine.resets, theirs.resets),
        thinking={**theirs.thinking, **mine.thinking},
        **_counts(mine, theirs),
    )
    adopted.ahead = carried(adopted, mine, theirs)
    return adopted


def _keep_theirs(theirs: SessionState, mine: SessionState) -> SessionState | None:
    """Their state, plus what only my turn knows (hidden calls, my turn record)."""
    merged = replace(
        theirs,
        hidden=_hidden(theirs, mine, theirs.cut if theirs.summary else 0),
        turn_log=_turns(theirs, mine),
        savings=_savings(theirs, mine),
        context_window=_window(theirs, mine),
        thinking={**mine.thinking, **theirs.thinking},
        **_counts(theirs, mine),
    )
    merged.ahead = carried(merged, theirs, mine)
    return None if merged == theirs else merged


def _union(first: list[str], second: list[str], keys: Collection[str]) -> list[str]:
    extra = [k for k in second if k in keys]
    return list(dict.fromkeys([*first, *extra]))


def _hidden(primary: SessionState, other: SessionState, cut: int) -> list[HiddenExtract]:
    """Both sides' hidden calls, one per anchor (the primary's first), none before the cut."""
    by_anchor: dict[int, HiddenExtract] = {}
    for entry in [*other.hidden, *primary.hidden]:
        by_anchor[entry.anchor] = entry
    return [by_anchor[a] for a in sorted(by_anchor) if a >= cut]


def _turns(primary: SessionState, other: SessionState) -> TurnLog:
    """Both logs' records, in time order, each once.

    A record is one line, written once by the turn it records, so the same record is the
    same line on both sides: lines are compared as text, and only the lines that sort
    among the other side's extra records are decoded (writers colliding on one session
    merge on most saves; decoding 300 records each time was most of their CPU).
    """
    if other.turn_log == primary.turn_log:
        return TurnLog(primary.turn_log.text)
    mine = primary.turn_log.text.split("\n") if primary.turn_log.text else []
    seen = set(mine)
    extra = [line for line in other.turn_log.text.split("\n") if line and line not in seen]
    if not extra:
        return TurnLog(primary.turn_log.text)
    added = sorted(extra, key=_at)
    first = _at(added[0])
    cut = len(mine)
    while cut > 0 and _at(mine[cut - 1]) > first:
        cut -= 1  # my records newer than the oldest extra one sort among the extras
    tail = sorted([*mine[cut:], *added], key=_at)
    lines = [*mine[:cut], *tail][-MAX_TURNS_KEPT:]
    return TurnLog("\n".join(lines))


def _savings(primary: SessionState, other: SessionState) -> savings_record.Buckets:
    """The primary's running totals plus the other side's turns it has not counted: its
    records the primary's log lacks (but those older than the primary's oldest record, which
    the primary dropped from its log, and counted, before)."""
    totals = {key: list(vec) for key, vec in primary.savings.items()}
    if other.turn_log == primary.turn_log:
        return totals
    mine = primary.turn_log.text.split("\n") if primary.turn_log.text else []
    seen = set(mine)
    oldest = _at(mine[0]) if mine else float("-inf")  # older: dropped from mine, counted
    for line in other.turn_log.lines():
        if line and line not in seen and _at(line) >= oldest:
            record = decode(line)
            if record is not None:
                savings_record.fold(totals, record)
    return totals


def _at(line: str) -> float:
    """When a stored turn record was made (0 for a line that is not a record)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return 0.0
    at = record.get("at") if isinstance(record, dict) else None
    return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0


def _counts(first: SessionState, second: SessionState) -> dict[str, Any]:
    """What the model asked back (`proxy.session.asked_back`): each count the higher of the
    two (both sides started from one stored state; neither turn's look-backs are lost
    when only one side saw any, and none is counted twice)."""
    mine, searches = clean_counts(first.lookback, first.searches)
    theirs, other = clean_counts(second.lookback, second.searches)
    tools = {name: list(row) for name, row in mine.items()}
    for name, row in theirs.items():
        kept = tools.get(name)
        if kept is None:
            tools[name] = list(row)
        else:
            tools[name] = [max(a, b) for a, b in zip(kept, row, strict=False)]
    pairs = itertools.zip_longest(searches, other, fillvalue=0)
    return {"lookback": tools, "searches": [max(a, b) for a, b in pairs]}


def _window(first: SessionState, second: SessionState) -> int | None:
    windows = [w for w in (first.context_window, second.context_window) if w]
    return min(windows) if windows else None
