"""Summaries prepared ahead, the pure parts (issue 28): when the crossing is near, the crossing
turn's summariser, the cut that keeps what a prepared summary does not cover, and the record
the session state keeps (its checks, and how a merge of two states carries it)."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.compact import AutoCompactor, CompactionContext
from proxy.compaction.crossing import (
    MAX_LEAD_TURNS,
    MIN_LEAD_TURNS,
    AheadSummarizer,
    WouldSummarise,
    growth_per_turn,
    lead_turns,
    projections,
    turn_interval,
)
from proxy.compaction.summarizer import Summarizer
from proxy.conversation import Conversation
from proxy.session.fingerprint import PrefixChain
from proxy.session.merge import merge_states
from proxy.session.prepared import Prepared, base_of, carried
from proxy.session.state import SessionState


def record(at: float, total: int, compaction: str = "none") -> dict[str, Any]:
    return {"at": at, "total_tokens": total, "compaction": compaction}


def test_growth_is_read_from_turns_that_compacted_nothing() -> None:
    records = [record(0, 1000), record(1, 1300), record(2, 1600), record(3, 500, "summary")]
    records += [record(4, 900), record(5, 1300)]
    # 300, 300 (the summary's drop is no growth), then 400, 400.
    assert growth_per_turn(records) == 350
    assert growth_per_turn(records[:1]) is None
    assert turn_interval(records) == 1.0


def test_lead_covers_the_time_a_summary_takes() -> None:
    assert lead_turns(None, 0.5) == MIN_LEAD_TURNS  # nothing measured yet: a turn or two
    assert lead_turns(2.5, 0.5) == 6  # five turns' time, plus the turn it is used at
    assert lead_turns(0.1, 10.0) == MIN_LEAD_TURNS
    assert lead_turns(60.0, 0.5) == MAX_LEAD_TURNS
    assert projections(5000, 300.0, 3) == [5300, 5600, 5900]
    assert projections(5000, -10.0, 2) == [5000, 5000]


def inner(reply: str = "fresh summary") -> tuple[Summarizer, list[Any]]:
    calls: list[Any] = []

    async def post(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(body)
        return {"choices": [{"message": {"content": reply}}]}

    return Summarizer(post=post, model="m"), calls


def test_the_crossing_turn_uses_a_prepared_summary_or_waits_for_none() -> None:
    summarizer, calls = inner()
    ready = AheadSummarizer(summarizer, prepared="prepared", cut_limit=3)
    assert asyncio.run(ready([{"role": "user", "content": "x"}])) == "prepared"
    assert ready.used and not ready.deferred and calls == []

    pending = AheadSummarizer(summarizer)
    assert asyncio.run(pending([{"role": "user", "content": "x"}])) is None
    assert pending.deferred and not pending.used and calls == []

    # A request that would not fit the window without a summary waits for one, as before.
    forced = AheadSummarizer(summarizer, must_wait=True)
    assert asyncio.run(forced([{"role": "user", "content": "x"}])) == "fresh summary"
    assert len(calls) == 1


def conversation(turns: int) -> Conversation:
    conv = Conversation()
    conv.set_system_message_content("You are an agent.")
    for n in range(turns):
        conv.add_user_message(f"question {n} " + "q" * 400)
        conv.add_agent_message({"role": "assistant", "content": f"answer {n} " + "a" * 400})
    return conv


def test_the_cut_keeps_every_message_a_prepared_summary_does_not_cover() -> None:
    natural = conversation(10)
    result = asyncio.run(natural.acompact(AheadSummarizer(inner()[0], "s", cut_limit=None), 4))
    assert result.ok and result.kept_count == 4

    limited = conversation(10)
    # The summary covers the conversation's first 9 messages (the system prompt and 8 more).
    result = asyncio.run(limited.acompact(AheadSummarizer(inner()[0], "s", cut_limit=9), 4))
    assert result.ok and result.kept_count == 12
    texts = [m.completion_param()["content"] for m in limited.messages[1:]]
    assert texts[0].startswith("question 4 ") and texts[-1].startswith("answer 9 ")


def test_a_strategy_is_asked_without_a_summary_being_made() -> None:
    conv = conversation(12)
    conv.total_tokens = 20_000
    asked = WouldSummarise()
    report = asyncio.run(
        AutoCompactor(summary_keep_max=4).auto_compact(CompactionContext(conv, asked, 5000))
    )
    assert asked.asked and report.level != "summary"


def test_a_prepared_summary_fits_only_the_messages_it_covers() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    chain = PrefixChain(messages)
    state = SessionState()
    prepared = Prepared("text", 4, chain.prefix(4), base_of(state), at=1.0)
    assert Prepared.of(prepared.to_dict()) == prepared
    assert prepared.fits(state, chain)
    assert prepared.fits(state, PrefixChain(messages[:4]))  # a retry of the same turn
    branched = [*messages[:3], {"role": "user", "content": "another way"}, *messages[4:]]
    assert not prepared.fits(state, PrefixChain(branched))  # an edit before its end: stale
    assert not prepared.fits(state, PrefixChain(messages[:3]))  # a branch from before it
    summarised = SessionState(summary="an earlier summary", cut=2, cut_hash=chain.prefix(2))
    assert not prepared.fits(summarised, chain)  # written over another compaction
    assert Prepared.of({"summary": "", "covers": 3}) is None
    assert Prepared.of("damaged") is None


def test_a_merge_keeps_the_prepared_summary_written_over_its_compaction() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    chain = PrefixChain(messages)
    mine = SessionState(prefix_len=6, prefix_hash=chain.prefix(6))
    theirs = SessionState(prefix_len=4, prefix_hash=chain.prefix(4))
    theirs.ahead = Prepared("text", 4, chain.prefix(4), base_of(theirs), at=1.0).to_dict()
    merged = merge_states(mine, theirs, chain, set())
    assert merged is not None and merged.ahead == theirs.ahead
    # A turn that used it (its summary now in force) drops it on a merge.
    used = SessionState(prefix_len=6, prefix_hash=chain.prefix(6), summary="text", cut=4)
    used.cut_hash = chain.prefix(4)
    assert carried(used, used, theirs) is None
    newer = Prepared("newer", 5, chain.prefix(5), base_of(theirs), at=2.0).to_dict()
    mine.ahead = newer
    assert carried(mine, mine, theirs) == newer


def test_a_request_that_continues_a_vouched_one_is_not_hashed_again() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    chain = PrefixChain(messages[:6])
    state = SessionState()
    prepared = Prepared("text", 4, chain.prefix(4), base_of(state), at=1.0)
    vouched = Prepared.of(prepared.vouch(chain))
    assert vouched is not None and vouched.verified == chain.prefix(6)
    assert vouched.fits(state, chain)
    # The next request: the state's prefix is the vouched request's whole history.
    state = SessionState(prefix_len=6, prefix_hash=chain.prefix(6))
    later = PrefixChain(messages, trusted=(6, chain.prefix(6)))
    assert vouched.fits(state, later)
    assert later._base == 6  # nothing before the trusted prefix was hashed
    # A record vouched for by another history proves nothing: the digest decides.
    other = Prepared.of({**prepared.to_dict(), "verified": "f" * 32})
    assert other is not None and other.fits(state, PrefixChain(messages))
    branched = [*messages[:2], {"role": "user", "content": "another way"}, *messages[3:]]
    assert not other.fits(SessionState(), PrefixChain(branched))
