"""Merging the states of two concurrent writers (proxy.session.merge): pure, table-like cases."""

from __future__ import annotations

from typing import Any

from proxy.session.merge import compaction_rank, merge_states
from proxy.session.rebuild import apply_compaction, rebuild, record_turn
from proxy.session.state import HiddenExtract, SessionState


def history(turns: int, size: int = 400) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "start"},
    ]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}:" + "x" * size})
    return msgs


def turn_state(
    msgs: list[dict[str, Any]], *, reclaim: int | None = None, summary: str | None = None, at: float
) -> SessionState:
    rb = rebuild(msgs, None)
    if reclaim is not None:
        rb.conversation.compact_toolcall(keep_max=reclaim)
        rb.conversation.compaction_counter.toolcall_rounds += 1
    if summary is not None:
        rb.conversation.compact(lambda m: summary, keep_recent=7)
    apply_compaction(rb)
    return record_turn(rb, total_tokens=1000, now=at)


def mine_of(msgs: list[dict[str, Any]]) -> tuple[Any, set[str]]:
    rb = rebuild(msgs, None)
    return rb.chain, set(rb.originals)


def test_same_compaction_same_prefix_writes_mine_with_both_turns() -> None:
    msgs = history(10)
    theirs = turn_state(msgs, reclaim=4, at=1.0)
    mine = turn_state(msgs, reclaim=4, at=2.0)
    chain, keys = mine_of(msgs)
    merged = merge_states(mine, theirs, chain, keys)
    assert merged is not None
    assert merged.reclaimed == mine.reclaimed
    assert [t["at"] for t in merged.turns] == [1.0, 2.0]


def test_never_drops_their_summary_when_it_fits() -> None:
    msgs = history(12)
    theirs = turn_state(msgs[:-2], summary="THEIR SUMMARY", at=1.0)
    theirs.size_after_summary, theirs.removed_by_summary = 1234, 5678
    mine = turn_state(msgs, at=2.0)  # a longer history, written without the summary
    assert compaction_rank(theirs) > compaction_rank(mine)
    chain, keys = mine_of(msgs)
    merged = merge_states(mine, theirs, chain, keys)
    assert merged is not None
    assert merged.summary == "THEIR SUMMARY"
    assert (merged.cut, merged.cut_hash) == (theirs.cut, theirs.cut_hash)
    assert merged.summary_rounds == theirs.summary_rounds
    assert merged.size_after_summary == theirs.size_after_summary
    # My prefix and usage are kept: the longer prefix wins.
    assert (merged.prefix_len, merged.prefix_hash) == (mine.prefix_len, mine.prefix_hash)
    # A later request of my history rebuilds with their summary.
    assert rebuild(msgs, merged).state.summary == "THEIR SUMMARY"


def test_their_summary_of_another_history_is_kept_whole() -> None:
    mine_msgs = history(12)
    other = history(12)
    other[3] = {**other[3], "content": "an edited tool result"}  # diverges before any cut
    theirs = turn_state(other, summary="OTHER", at=1.0)
    mine = turn_state(mine_msgs, at=2.0)
    chain, keys = mine_of(mine_msgs)
    kept = merge_states(mine, theirs, chain, keys)
    assert kept is not None  # theirs stays, summary and all (plus my turn record)
    assert (kept.summary, kept.cut_hash) == ("OTHER", theirs.cut_hash)
    assert (kept.prefix_len, kept.prefix_hash) == (theirs.prefix_len, theirs.prefix_hash)
    assert kept.turns == [*theirs.turns, *mine.turns]


def test_their_longer_prefix_wins_a_tie() -> None:
    msgs = history(12)
    theirs = turn_state(msgs, at=1.0)
    mine = turn_state(msgs[:-2], at=2.0)
    chain, keys = mine_of(msgs[:-2])
    kept = merge_states(mine, theirs, chain, keys)
    assert kept is not None  # theirs, plus my turn record
    assert (kept.prefix_len, kept.prefix_hash) == (theirs.prefix_len, theirs.prefix_hash)
    assert [t["at"] for t in kept.turns] == [1.0, 2.0]


def test_my_further_compaction_wins_and_takes_their_reclaims() -> None:
    msgs = history(12)
    theirs = turn_state(msgs, reclaim=8, at=1.0)
    mine = turn_state(msgs, summary="MINE", at=2.0)
    chain, keys = mine_of(msgs)
    merged = merge_states(mine, theirs, chain, keys)
    assert merged is not None and merged.summary == "MINE"
    assert set(theirs.reclaimed) <= set(merged.reclaimed)
    assert set(merged.reclaimed) <= keys


def test_hidden_calls_of_both_writers_survive() -> None:
    msgs = history(10)
    theirs = turn_state(msgs, at=1.0)
    mine = turn_state(msgs, at=2.0)
    call = {"id": "x1", "type": "function", "function": {"name": "extract", "arguments": "{}"}}
    theirs.hidden = [HiddenExtract(anchor=4, visible_ids=["c1"], calls=[call], results=[])]
    mine.hidden = [HiddenExtract(anchor=6, visible_ids=["c2"], calls=[call], results=[])]
    chain, keys = mine_of(msgs)
    merged = merge_states(mine, theirs, chain, keys)
    assert merged is not None
    assert [h.anchor for h in merged.hidden] == [4, 6]
    # Theirs kept whole still gets my hidden call.
    theirs.summary_rounds, theirs.summary = 5, None
    kept = merge_states(mine, theirs, chain, keys)
    assert kept is not None and [h.anchor for h in kept.hidden] == [4, 6]


def test_nothing_to_add_keeps_theirs_without_a_write() -> None:
    msgs = history(10)
    theirs = turn_state(msgs, summary="S", at=1.0)
    mine = SessionState.from_bytes(theirs.to_bytes())
    mine.summary, mine.summary_rounds = None, 0
    chain, keys = mine_of(msgs[:4])  # my history is shorter than their cut
    assert merge_states(mine, theirs, chain, keys) is None
