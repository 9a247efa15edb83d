"""The cost-aware strategy: cost model, token budgets, hysteresis, break-even, no loops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.compact import CompactionContext
from proxy.compaction.cache_aware import CacheAwareCompactor, _Sizes
from proxy.compaction.economics import Economics, cache_factor_for, observed_hit_ratio
from proxy.conversation import Conversation
from proxy.conversation_message import RawOpenAIMessage, content_to_text, message_chars
from tests.support.core_helpers import add_tool_turn, sequence_errors

THRESHOLD = 10_000


def session(turns: int, size: int = 2000) -> Conversation:
    conv = Conversation()
    conv.set_system_message_content("You are an agent.")
    conv.add_user_message("Fix the bug.")
    for i in range(turns):
        add_tool_turn(conv, f"c{i}", f"{i}:" + "x" * size)
    return conv


def sized(conv: Conversation) -> Conversation:
    conv.total_tokens = sum(message_chars(m.completion_param()) for m in conv.messages) // 4
    return conv


def summarizer(calls: list[list[dict[str, Any]]]) -> Any:
    def summarize(messages: list[dict[str, Any]]) -> str:
        calls.append(messages)
        return "## overview\nshort summary"

    return summarize


async def run(
    conv: Conversation, econ: Economics, calls: list[Any] | None = None, **kw: Any
) -> Any:
    agent = CompactionContext(conv, summarizer(calls if calls is not None else []), THRESHOLD, econ)
    return await CacheAwareCompactor(**kw).auto_compact(agent)


@pytest.mark.parametrize(
    ("model", "overrides", "expected"),
    [
        ("claude-opus-4-6", None, 0.1),
        ("gpt-4o-mini", None, 0.5),
        ("gpt-4.1-2025", None, 0.25),
        ("local-llama", None, 0.5),
        ("gpt-4o", {"gpt-4o": 0.2}, 0.2),
        ("my-model-x", {"my-model": 0.3, "my": 0.9}, 0.3),
    ],
)
def test_cache_factor_by_model(model: str, overrides: Any, expected: float) -> None:
    assert cache_factor_for(model, overrides) == expected


def test_observed_hit_ratio_skips_turns_after_a_compaction() -> None:
    turns = [
        {"compaction": "none", "prompt_tokens": 100, "cached_tokens": 0},
        {"compaction": "summary", "prompt_tokens": 200, "cached_tokens": 150},
        {"compaction": "none", "prompt_tokens": 100, "cached_tokens": 0},
        {"compaction": "none", "prompt_tokens": 100, "cached_tokens": 80},
    ]
    assert observed_hit_ratio(turns) == pytest.approx((0.75 + 0.8) / 2)
    assert observed_hit_ratio([{"prompt_tokens": 5}, {"prompt_tokens": 6}]) is None


def test_prices() -> None:
    econ = Economics(cache_factor=0.1, hit_ratio=1.0)
    assert econ.effective_price == pytest.approx(0.1)
    assert econ.rewrite_cost(1000) == pytest.approx(900)
    assert econ.saving_per_turn(1000) == pytest.approx(100)
    uncached = Economics(cache_factor=0.1, hit_ratio=0.0)
    assert uncached.rewrite_cost(1000) == 0 and uncached.saving_per_turn(1000) == 1000


async def test_below_threshold_does_nothing() -> None:
    conv = sized(session(3))
    assert (await run(conv, Economics())).level == "none"


async def test_without_a_cache_it_compacts_at_once_down_to_the_target() -> None:
    conv = sized(session(30))
    before = conv.total_tokens
    report = await run(conv, Economics(hit_ratio=0.0))
    assert report.level in ("toolcall", "summary")
    assert report.estimated_tokens_after is not None and before is not None
    assert report.estimated_tokens_after <= THRESHOLD * 0.35 + 1500
    assert sequence_errors(conv.completion_params()) == []


async def test_with_a_cheap_cache_it_waits_until_the_forgone_savings_pay_the_rewrite() -> None:
    econ = Economics(cache_factor=0.1, hit_ratio=1.0)
    waited = 0
    for turns in range(25, 60):
        conv = sized(session(turns))
        report = await run(conv, econ, patience=1.0)
        if report.level != "none":
            break
        waited += 1
    assert waited >= 1  # deferred at first ...
    assert report.level != "none"  # ... but compacted once it paid for itself
    assert econ.accrued == 0


async def test_the_hard_ceiling_forces_a_compaction() -> None:
    econ = Economics(cache_factor=0.1, hit_ratio=1.0, context_window=20_000, reply_reserve=2_000)
    conv = sized(session(40))
    assert conv.total_tokens is not None and conv.total_tokens > 18_000
    report = await run(conv, econ)
    assert report.level != "none"


async def test_newest_tool_results_are_kept_by_token_budget() -> None:
    conv = sized(session(30))
    await run(conv, Economics(hit_ratio=0.0), keep_tool_ratio=0.1, toolcall_keep_max=12)
    kept = [
        m
        for m in conv.messages
        if m.role == "tool" and "[Compacted" not in str(m.completion_param()["content"])
    ]
    assert 1 <= len(kept) <= 2  # 10% of 10k tokens holds two 500-token results, not twelve


async def test_a_huge_old_message_is_summarised_not_kept() -> None:
    conv = session(6, size=400)
    conv.add_agent_message({"role": "assistant", "content": "y" * 200_000})
    conv.add_user_message("go on")
    for i in range(6, 10):
        add_tool_turn(conv, f"c{i}", "z" * 400)
    sized(conv)
    calls: list[Any] = []
    econ = Economics(hit_ratio=0.0, turns=10)
    for _ in range(4):  # it waits a few turns for the summary call to pay for itself
        report = await run(conv, econ, calls)
        if report.level != "none":
            break
    assert report.level == "summary"
    assert all(len(str(m.completion_param().get("content"))) < 100_000 for m in conv.messages)
    assert sequence_errors(conv.completion_params()) == []


def test_shared_prefix_summaries_are_priced_as_cached() -> None:
    def cost_of(shares: bool) -> float:
        conv = Conversation()
        for i in range(30):
            conv.add_user_message(f"question {i} " + "q" * 2000)
            conv.add_agent_message({"role": "assistant", "content": "a" * 2000})
        sized(conv)
        comp = CacheAwareCompactor(shares_prefix=shares)
        econ = Economics(cache_factor=0.1)
        sizes = _Sizes(conv, conv.total_tokens or 0)
        agent = CompactionContext(conv, summarizer([]), THRESHOLD, econ)
        plan = comp._summary_plan(
            sizes, THRESHOLD, comp._reclaim_plan(sizes, THRESHOLD, econ), agent, econ
        )
        assert plan is not None
        return plan.summary_cost

    assert cost_of(True) < cost_of(False) / 3


def _exchange(conv: Conversation, n: int) -> None:
    """About 300 tokens that no reclaim shrinks: a question, a call with a short result (under
    a placeholder's size), an answer. Only a summary can take them out."""
    conv.add_user_message(f"step {n}: " + "q" * 600)
    add_tool_turn(conv, f"c{n}", "ok")
    conv.add_agent_message({"role": "assistant", "content": f"done {n}: " + "a" * 600})


async def _regrowing_session(growth: list[int], seen: dict[str, int]) -> None:
    """One session growing by `growth[i]` exchanges a turn, compacted after each turn."""
    econ = Economics(cache_factor=0.5, hit_ratio=1.0)
    conv = Conversation()
    conv.set_system_message_content("sys")
    conv.add_user_message("task")
    n = 0
    last_after: int | None = None
    last_removed = 0
    summaries = 0
    for step in growth:
        for _ in range(step):
            _exchange(conv, n)
            n += 1
        sized(conv)
        size = conv.total_tokens or 0
        # Over the threshold, but not yet grown back by its share of what the last summary
        # removed (the shipped default, a quarter).
        share = CacheAwareCompactor.regrow_share
        held = (
            size > THRESHOLD
            and last_after is not None
            and size - last_after <= share * last_removed
        )
        seen["held"] += held
        # No patience: only the no-loop rule holds a summary back (the break-even wait aside).
        report = await run(conv, econ, patience=0.0)
        if report.level == "summary":
            assert not held, (size, last_after, last_removed)
            summaries += 1
            assert report.estimated_tokens_after is not None
            last_after = report.estimated_tokens_after
            last_removed = size - last_after
            econ.size_after_summary, econ.removed_by_summary = last_after, last_removed
        elif size > THRESHOLD:
            assert held  # nothing else stops a summary here
        assert sequence_errors(conv.completion_params()) == []
    assert summaries >= 1  # every session grows past the threshold at least once
    seen["summaries"] += summaries


def test_no_summary_until_the_session_regrew_its_share_of_what_the_last_one_removed() -> None:
    """Sessions that cross the threshold again and again: each crossing summarises unless
    the session has not yet regrown its share (a quarter) of what the last summary removed. The
    growths must reach that case, or the rule goes unchecked: three that do are given, and the
    generated ones reach it too."""
    seen = {"held": 0, "summaries": 0, "examples": 0}

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(growth=st.lists(st.integers(min_value=2, max_value=200), min_size=20, max_size=40))
    # Each: a jump far over the threshold, a summary, then a crossing within its quarter.
    @example(growth=[2] * 18 + [117, 32])
    @example(growth=[2] * 10 + [150, 30, 2, 2, 140, 35])
    @example(growth=[40, 180, 33, 3, 190, 36] + [2] * 14)
    def check(growth: list[int]) -> None:
        seen["examples"] += 1
        asyncio.run(_regrowing_session(growth, seen))

    check()
    # 20+ turns of 2-200 exchanges (300 tokens each) against a 10,000-token threshold: several
    # summaries a session, and turns over the threshold that the rule held back (after a
    # summary that removed much, a session crosses again before regrowing a quarter of it:
    # only a summary that removed over 33,000 tokens leaves room for that, so jumps reach 60,000).
    assert seen["summaries"] >= 2 * seen["examples"], seen
    # The given growths hold back 18 turns; the generated ones more (33 in a run alone, 15 in
    # one beside the rest of the suite: which lists are generated may differ between runs).
    assert seen["held"] >= 18 + 5, seen


def chat(turns: int, size: int) -> Conversation:
    """A session whose observations come as user messages (mini-swe-agent's)."""
    conv = Conversation()
    conv.set_system_message_content("You are an agent.")
    for i in range(turns):
        conv.add_user_message(f"{i}:" + "x" * size)
        conv.add_agent_message({"role": "assistant", "content": f"step {i}"})
    return conv


async def test_a_session_that_regrew_half_what_the_summary_removed_summarises_again() -> None:
    """The last summary removed a little more than the session has regrown since (it is
    back over the threshold): more than half of it, not all. Waiting for
    all of it kept such sessions just under the threshold on level 1 alone (each crossing a
    little further: corpus replays at 32k hovered for 10-20 turns)."""
    conv = sized(chat(14, size=3000))  # no tool results: only a summary can remove anything
    size = conv.total_tokens or 0
    assert size > THRESHOLD
    removed = size - 1_900 + 100
    econ = Economics(  # it has earned its price long ago: only the loop guard may hold it
        hit_ratio=0.0, turns=40, size_after_summary=1_900, removed_by_summary=removed
    )
    econ.accrued = 10**9
    assert (await run(conv, econ)).level == "summary"
    again = sized(chat(14, size=3000))
    econ.size_after_summary, econ.removed_by_summary = 1_900, removed
    econ.accrued = 10**9
    assert (await run(again, econ, regrow_share=1.0)).level == "none"


@pytest.mark.parametrize(
    ("kw", "bound"),
    [
        ({}, THRESHOLD * 0.015),  # the share of the threshold
        ({"tail_max_tokens": 300}, 300),  # the cap in tokens
        ({"tail_ratio": 0.5, "target_ratio": 0.2}, THRESHOLD * 0.2 - 1024),  # room under target
    ],
)
async def test_the_kept_tail_is_bounded_in_tokens(kw: dict[str, Any], bound: float) -> None:
    conv = sized(session(100, size=400))  # 100 exchanges of about 115 tokens each
    report = await run(conv, Economics(hit_ratio=0.0, turns=50), **kw)
    assert report.level == "summary"
    params = conv.completion_params()
    tail = [m for m in params[1:] if m["role"] != "user"]  # the moved task message aside
    tail_tokens = sum(message_chars(m) for m in tail) / 4
    assert tail and tail[-1] == params[-1]  # the newest exchange is always kept
    assert tail_tokens <= bound + 1
    assert sequence_errors(params) == []


def test_a_cache_write_premium_makes_a_rewrite_cost_more() -> None:
    from proxy.compaction.economics import Economics

    openai = Economics(cache_factor=0.5, hit_ratio=1.0)
    anthropic = Economics(cache_factor=0.1, hit_ratio=1.0, write_factor=1.25)
    assert openai.rewrite_cost(1000) == 500  # sent once at full price instead of at 0.5x
    assert anthropic.rewrite_cost(1000) == 1150  # written at 1.25x instead of read at 0.1x


def _reference_chars(param: dict[str, Any]) -> int:
    """`message_chars` as it was before its fast path for string content."""
    total = len(content_to_text(param.get("content")))
    for name in ("reasoning", "reasoning_content"):
        value = param.get(name)
        if isinstance(value, str):
            total += len(value)
    for call in param.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            total += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return total


_text = st.text(max_size=12)
_content = st.one_of(
    st.none(),
    _text,
    st.integers(),
    st.lists(st.one_of(_text, st.fixed_dictionaries({"type": _text, "text": _text})), max_size=3),
)
_call = st.one_of(
    _text,
    st.fixed_dictionaries(
        {"id": _text},
        optional={
            "function": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {}, optional={"name": st.one_of(st.none(), _text), "arguments": _content}
                ),
            )
        },
    ),
)
_param = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": _content,
        "reasoning": st.one_of(st.none(), _text, st.integers()),
        "reasoning_content": _text,
        "tool_calls": st.one_of(st.none(), st.lists(_call, max_size=3)),
        "tool_call_id": _text,
    },
)


@given(st.lists(_param, max_size=12), st.integers(0, 10**6))
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)  # big nested drafts
def test_sizes_measure_what_the_messages_send(params: list[dict[str, Any]], total: int) -> None:
    """`_Sizes` reads a raw message's dict rather than a copy of it, and `message_chars` has
    a fast path for text: the sizes are still those of the params the conversation sends."""
    conv = Conversation()
    conv.set_system_message_content("You are an agent.")
    conv.set_persistent_section("client", "Be brief.")
    conv.add_user_message("Fix the bug.")
    for param in params:
        conv.append(RawOpenAIMessage(param))
    chars = [_reference_chars(m.completion_param()) for m in conv.messages]
    assert [message_chars(p) for p in conv.completion_params()] == chars
    sizes = _Sizes(conv, total)
    per_char = total / max(1, sum(chars))
    assert sizes.per_char == per_char
    assert sizes.tokens == [c * per_char for c in chars]


def test_the_proxys_hidden_answers_are_reclaimed_first_never_kept_as_newest() -> None:
    """A search answer of the proxy's own (`xun-extract:` key) is the newest tool result: the
    model acted on it already, and it rides along in every request until reclaimed. Level 1
    reclaims it like the oldest results; the client's newest results stay whole."""
    conv = session(20, size=200)
    add_tool_turn(conv, "xun-extract:s1", "5 match(es) for 'x', newest first. " + "y" * 400)
    sized(conv)
    sizes = _Sizes(conv, conv.total_tokens or 0)
    plan = CacheAwareCompactor()._reclaim_plan(sizes, THRESHOLD, Economics())
    keys = [getattr(conv.messages[i], "key", None) for i in plan.reclaim]
    assert "xun-extract:s1" in keys
    assert "c19" not in keys and "c0" in keys  # the window of newest results is the client's
