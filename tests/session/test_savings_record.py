"""The savings arithmetic (proxy.session.savings_record) and the price table
(proxy.compaction.prices): what a turn's record says it saved, how records add up, shadow
turns kept apart, money only where a price is known, and running totals that survive a merge
of two writers."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compaction.prices import Prices
from proxy.session import savings_record
from proxy.session.fingerprint import PrefixChain
from proxy.session.merge import merge_states
from proxy.session.savings_record import Price, Tally, Tokens, fold, turn_savings
from proxy.session.state import SessionState
from proxy.session.turn_log import TurnLog

PRICE = Price(input=2.0, cache_read=0.5, cache_write=2.5, output=8.0)


def record(at: float, saved: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"at": at, "total_tokens": 1, "compaction": "none", "savings": saved, **extra}


def test_a_turn_bills_its_rounds_and_summaries_against_the_direct_estimate() -> None:
    rounds = [Tokens(900, 0, 0, 20), Tokens(950, 0, 0, 30)]  # one extract round, then the answer
    saved = turn_savings(
        "gpt-4o",
        rounds,
        [Tokens(400, 0, 0, 100)],
        3000,
        previous_direct=None,
        appended=False,
        caches=False,
    )
    assert saved == {
        "model": "gpt-4o",
        "sent": [900, 0, 0],
        "extract": [950, 0, 0, 20],  # the later round's prompt, the extract call's output
        "summary": [400, 0, 0, 100],
        "direct": [3000, 0, 0],
    }
    tally = Tally()
    _, vec = savings_record.vector_of(record(0, saved)) or ("", [])
    tally.add("gpt-4o", vec, lambda _: PRICE)
    totals = tally.totals()
    assert totals["prompt_tokens_sent"] == 900 + 950 + 400
    assert totals["tokens_saved"] == 3000 - 2250
    assert totals["extract_cost"] == pytest.approx((950 * 2 + 20 * 8) / 1e6)
    assert totals["summary_cost"] == pytest.approx((400 * 2 + 100 * 8) / 1e6)
    assert totals["cost_direct"] == pytest.approx(3000 * 2 / 1e6)
    assert totals["cost_saved"] == pytest.approx(totals["cost_direct"] - totals["cost_sent"])


@pytest.mark.parametrize(
    ("appended", "caches", "cached"),
    [(True, True, 2000), (False, True, 0), (True, False, 0)],
)
def test_the_direct_side_reads_its_append_only_prefix_from_the_cache(
    appended: bool, caches: bool, cached: int
) -> None:
    # This upstream writes half of an uncached prompt (reported cache writes): so would direct.
    main = Tokens(prompt=1000, cached=600, written=200)
    saved = turn_savings(
        "claude-sonnet-4-5",
        [main],
        [],
        2600,
        previous_direct=2000,
        appended=appended,
        caches=caches,
    )
    assert saved["sent"] == [1000, 600, 200]
    assert saved["direct"] == [2600, cached, round((2600 - cached) * 0.5)]


def test_the_direct_cache_read_never_exceeds_the_direct_prompt() -> None:
    """The direct prompt is an estimate scaled by each turn's bill: an appended turn's can come
    out below the previous turn's (here 2,400 after 2,600). Direct reads at most its prompt
    from the cache (2,400, none left to write), never the previous request whole."""
    main = Tokens(prompt=1000, cached=600, written=200)
    saved = turn_savings(
        "claude-sonnet-4-5", [main], [], 2400, previous_direct=2600, appended=True, caches=True
    )
    assert saved["direct"] == [2400, 2400, 0]
    _, vec = savings_record.vector_of(record(0, saved)) or ("", [])
    tally = Tally()
    tally.add("claude-sonnet-4-5", vec, lambda _: PRICE)
    # 2,400 read at 0.5 per million: nothing billed at the input or the write price.
    assert tally.totals()["cost_direct"] == pytest.approx(2400 * 0.5 / 1e6)


def test_the_direct_estimate_scales_by_what_this_turn_was_billed() -> None:
    assert (
        savings_record.direct_estimate(1000, sent_estimate=500, billed=600, calibration=2.0) == 1200
    )
    assert (
        savings_record.direct_estimate(1000, sent_estimate=500, billed=None, calibration=1.1)
        == 1100
    )
    assert (
        savings_record.direct_estimate(1000, sent_estimate=0, billed=None, calibration=None) == 1000
    )


def test_a_shadow_turn_counts_only_as_projected() -> None:
    """The shadow mode's contract: its record carries `shadow` and `projected_prompt_tokens`."""
    saved = turn_savings(
        "gpt-4o", [Tokens(5000)], [], 5000, previous_direct=None, appended=False, caches=False
    )
    buckets: savings_record.Buckets = {}
    fold(buckets, record(7200.5, saved))
    fold(buckets, record(7300.0, saved, shadow=True, projected_prompt_tokens=2000))
    assert list(buckets) == ["7200|gpt-4o"]
    tally = Tally()
    tally.add("gpt-4o", buckets["7200|gpt-4o"], lambda _: PRICE)
    totals = tally.totals()
    assert (totals["requests"], totals["prompt_tokens_sent"], totals["tokens_saved"]) == (
        1,
        5000,
        0,
    )
    assert tally.projected() == {
        "requests": 1,
        "prompt_tokens_direct": 5000,
        "prompt_tokens_projected": 2000,
        "tokens_saved": 3000,
        "cost_saved": pytest.approx(3000 * 2 / 1e6),
    }


def test_money_is_null_where_no_price_is_known() -> None:
    saved = turn_savings("my-local-llm", [Tokens(10)], [], 50, previous_direct=None, **_no_cache())
    _, vec = savings_record.vector_of(record(0, saved)) or ("", [])
    tally = Tally()
    tally.add("my-local-llm", vec, Prices())
    totals = tally.totals()
    assert totals["tokens_saved"] == 40
    assert totals["cost_saved"] is None and totals["cost_sent"] is None
    assert totals["unpriced_requests"] == 1


def _no_cache() -> dict[str, Any]:
    return {"appended": False, "caches": False}


def test_old_hours_fold_into_one_bucket_per_model() -> None:
    buckets: savings_record.Buckets = {}
    saved = turn_savings("m", [Tokens(1)], [], 2, previous_direct=None, **_no_cache())
    for hour in range(1, savings_record.MAX_BUCKETS + 3):
        fold(buckets, record(hour * savings_record.HOUR, saved))
    assert len(buckets) == savings_record.MAX_BUCKETS
    assert buckets["0|m"][0] == 3  # the three oldest hours, still counted
    assert sum(v[0] for v in buckets.values()) == savings_record.MAX_BUCKETS + 2


def test_a_merge_of_two_writers_counts_both_turns() -> None:
    base = SessionState()
    saved = turn_savings("m", [Tokens(100)], [], 300, previous_direct=None, **_no_cache())
    fold(base.savings, record(1.0, saved))
    base.turn_log = TurnLog.of([record(1.0, saved)])
    sides = []
    for at in (2.0, 3.0):
        state = SessionState.from_bytes(base.to_bytes())
        state.turn_log.append(record(at, saved))
        fold(state.savings, record(at, saved))
        sides.append(state)
    merged = merge_states(sides[0], sides[1], PrefixChain([]), set())
    assert merged is not None
    assert merged.savings["0|m"][0] == 3  # the base turn and each writer's own
    # Read back from the stored form: a damaged entry is dropped, not fatal.
    data = merged.to_dict()
    data["savings"] = {**data["savings"], "bad": "x", "3600|n": [1, "2"]}
    back = SessionState.from_dict(data)
    assert back.savings["0|m"][0] == 3 and back.savings["3600|n"][:2] == [1, 0]
    assert "bad" not in back.savings


def test_prices_match_the_longest_prefix_and_the_operators_entries_first() -> None:
    prices = Prices({"gpt-4o": {"input": 9.0}, "acme-": {"input": 1, "output": 2}})
    assert prices.entry("gpt-4o-mini-2024-07-18") == "gpt-4o-mini"
    assert prices("openai/gpt-4o-2024-08-06") == Price(9.0, 9.0, 9.0, 0.0)
    assert prices("acme-7b") == Price(1.0, 1.0, 1.0, 2.0)
    assert prices("claude-sonnet-4-5-20250929") == Price(3.0, 0.3, 3.75, 15.0)
    assert prices("unknown") is None and prices.entry("unknown") is None
