"""The tiered strategy: reclaim, escalate by rounds or by the 95% rule, summarise, retry."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

import proxy.compact
from proxy.compact import (
    ESCALATION_RATIO,
    NOTHING_TO_CONDENSE,
    SUCCESS,
    SUMMARIZE_FAILED,
    AutoCompactor,
    CompactionAgent,
    CompactionContext,
    CompactionReport,
    CompactorAbstract,
    Summarizer,
    SummaryCompactResult,
    ToolCallCompactResult,
    compact_conversation,
)
from proxy.conversation import Conversation
from tests.support.core_helpers import agent_conversation

TOKENS = 10_000


class Summaries:
    """A summariser returning a fixed answer and counting its calls."""

    def __init__(self, answer: str | None = "short summary") -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, messages: list[dict[str, Any]]) -> str | None:
        self.calls += 1
        return self.answer


class KeepSpy(Conversation):
    """Records keep counts; its summary 'succeeds' without shrinking anything."""

    def __init__(self) -> None:
        super().__init__()
        self.tool_keeps: list[int] = []
        self.summary_keeps: list[int] = []

    def compact_toolcall(self, keep_max: int = 12) -> ToolCallCompactResult:
        self.tool_keeps.append(keep_max)
        return super().compact_toolcall(keep_max)

    async def acompact(self, summarize: Summarizer, keep_recent: int = 16) -> SummaryCompactResult:
        self.summary_keeps.append(keep_recent)
        return SummaryCompactResult(SUCCESS, summary="s")


def context(conversation: Conversation, summarize: Summarizer, threshold: int) -> CompactionContext:
    conversation.total_tokens = TOKENS
    return CompactionContext(conversation, summarize, threshold)


def estimate_after_reclaim(conversation: Conversation, keep: int) -> int:
    copy = Conversation.loads(conversation.dumps())
    before = copy.estimated_message_length()
    copy.compact_toolcall(keep)
    return int(TOKENS * copy.estimated_message_length() / before)


@pytest.mark.parametrize("tokens", [None, 100, 9000])
async def test_no_compaction_at_or_under_the_threshold(tokens: int | None) -> None:
    conversation = agent_conversation()
    conversation.total_tokens = tokens
    before = conversation.dumps()
    summaries = Summaries()
    agent = CompactionContext(conversation, summaries, token_threshold=9000)
    report = await AutoCompactor(toolcall_keep_max=0).auto_compact(agent)
    assert (report.level, report.tokens_before, report.estimated_tokens_after) == (
        "none",
        tokens,
        tokens,
    )
    assert conversation.dumps() == before and summaries.calls == 0


async def test_a_cheap_round_that_is_enough_stops_there() -> None:
    conversation = agent_conversation(turns=3, size=2000)
    summaries = Summaries()
    report = await AutoCompactor(toolcall_keep_max=1).auto_compact(
        context(conversation, summaries, 9000)
    )
    assert report.level == "toolcall" and summaries.calls == 0
    assert report.toolcall_results[0].reclaimed_count == 5
    assert conversation.total_tokens == report.estimated_tokens_after
    assert conversation.total_tokens == estimate_after_reclaim(
        agent_conversation(turns=3, size=2000), 1
    )
    assert conversation.compaction_counter.toolcall_rounds == 1


async def test_rounds_below_the_limit_do_not_escalate() -> None:
    conversation = agent_conversation(turns=3, size=2000)
    conversation.compaction_counter.toolcall_rounds = 1
    summaries = Summaries()
    compactor = AutoCompactor(toolcall_keep_max=1, escalation_rounds=2)
    await compactor.auto_compact(context(conversation, summaries, 9000))
    assert summaries.calls == 0
    assert conversation.compaction_counter.toolcall_rounds == 2


async def test_escalates_after_escalation_rounds_cheap_rounds() -> None:
    conversation = agent_conversation(turns=3, size=2000)
    conversation.compaction_counter.toolcall_rounds = 2
    summaries = Summaries()
    compactor = AutoCompactor(toolcall_keep_max=1, summary_keep_max=6, escalation_rounds=2)
    report = await compactor.auto_compact(context(conversation, summaries, 9000))
    assert report.level == "summary" and summaries.calls == 1
    assert conversation.total_tokens is None
    assert conversation.compaction_counter.summary_rounds == 1
    assert conversation.compaction_counter.toolcall_rounds == 0


@pytest.mark.parametrize(("margin", "escalates"), [(0, True), (2, False)])
async def test_escalates_in_the_same_round_when_the_estimate_is_still_high(
    margin: int, escalates: bool
) -> None:
    conversation = agent_conversation(turns=3, size=400)
    estimate = estimate_after_reclaim(conversation, 1)
    threshold = math.floor(estimate / ESCALATION_RATIO) + margin
    assert estimate < threshold < TOKENS
    summaries = Summaries()
    compactor = AutoCompactor(toolcall_keep_max=1, summary_keep_max=6)
    report = await compactor.auto_compact(context(conversation, summaries, threshold))
    assert summaries.calls == int(escalates)
    assert report.level == ("summary" if escalates else "toolcall")


@pytest.mark.parametrize(
    ("tool_keep", "summary_keep", "tool_keeps", "summary_keeps"),
    [(12, 16, [12, 6, 3], [16, 8, 4]), (1, 2, [1, 1, 1], [2, 2, 2]), (5, 5, [5, 2, 1], [5, 2, 2])],
)
async def test_retries_halve_both_keep_counts(
    tool_keep: int, summary_keep: int, tool_keeps: list[int], summary_keeps: list[int]
) -> None:
    conversation = KeepSpy()
    conversation.add_user_message("x" * 1000)
    compactor = AutoCompactor(toolcall_keep_max=tool_keep, summary_keep_max=summary_keep)
    report = await compactor.auto_compact(context(conversation, Summaries(), 9000))
    assert (conversation.tool_keeps, conversation.summary_keeps) == (tool_keeps, summary_keeps)
    assert len(report.summary_results) == 3


async def test_max_retries_bounds_the_rounds() -> None:
    conversation = KeepSpy()
    conversation.add_user_message("x")
    await AutoCompactor(max_retries=0).auto_compact(context(conversation, Summaries(), 9000))
    assert conversation.summary_keeps == [16]


async def test_still_over_after_a_real_summary_retries_smaller() -> None:
    conversation = agent_conversation(turns=6, size=100)
    summaries = Summaries("s" * 100_000)
    report = await AutoCompactor().auto_compact(context(conversation, summaries, 9000))
    assert [r.status for r in report.summary_results] == [SUCCESS] * 3
    assert summaries.calls == 3 and conversation.compaction_counter.summary_rounds == 3


async def test_a_summary_that_gets_under_stops_the_loop() -> None:
    conversation = agent_conversation(turns=6, size=100)
    summaries = Summaries()
    report = await AutoCompactor().auto_compact(context(conversation, summaries, 9000))
    assert report.level == "summary" and summaries.calls == 1
    assert report.estimated_tokens_after is not None and report.estimated_tokens_after < 9000


async def test_a_failed_summary_stops_and_keeps_the_reclaim() -> None:
    conversation = agent_conversation(turns=3, size=400)
    summaries = Summaries(None)
    compactor = AutoCompactor(toolcall_keep_max=1, escalation_rounds=0)
    report = await compactor.auto_compact(context(conversation, summaries, 9000))
    assert [r.status for r in report.summary_results] == [SUMMARIZE_FAILED]
    assert report.level == "toolcall" and summaries.calls == 1
    assert len(conversation.reclaimed_keys()) == 5
    assert conversation.total_tokens == report.estimated_tokens_after


async def test_nothing_to_condense_stops_the_loop() -> None:
    conversation = agent_conversation(turns=1, size=400)
    report = await AutoCompactor().auto_compact(context(conversation, Summaries(), 9000))
    assert [r.status for r in report.summary_results] == [NOTHING_TO_CONDENSE]
    assert conversation.total_tokens == TOKENS


async def test_async_summariser_is_awaited() -> None:
    async def summarize(messages: list[dict[str, Any]]) -> str:
        return "async summary"

    conversation = agent_conversation(turns=6)
    report = await AutoCompactor().auto_compact(context(conversation, summarize, 9000))
    assert report.summary_results[0].summary == "async summary"


async def test_report_is_json_friendly() -> None:
    conversation = agent_conversation(turns=6)
    report = await AutoCompactor().auto_compact(context(conversation, Summaries(), 9000))
    saved = json.loads(json.dumps(report.to_dict()))
    assert saved["level"] == "summary" and saved["tokens_before"] == TOKENS


async def test_compact_conversation_summarises_without_a_threshold() -> None:
    conversation = agent_conversation(turns=3)
    agent = CompactionContext(conversation, Summaries())
    result = await compact_conversation(agent, keep_recent=6)
    assert result.status is SUCCESS and result.kept_count == 6


def test_escalation_ratio_is_a_module_constant() -> None:
    assert proxy.compact.ESCALATION_RATIO == 0.95
    assert "ESCALATION_RATIO" not in {f.name for f in dataclasses.fields(AutoCompactor)}


def test_auto_compactor_defaults() -> None:
    assert dataclasses.asdict(AutoCompactor()) == {
        "toolcall_keep_max": 12,
        "summary_keep_max": 16,
        "escalation_rounds": 2,
        "max_retries": 2,
    }


def test_compactor_abstract_needs_auto_compact() -> None:
    with pytest.raises(TypeError):
        CompactorAbstract()  # type: ignore[abstract]


async def test_a_custom_strategy_subclasses_compactor_abstract() -> None:
    class ToolCallsOnly(CompactorAbstract):
        async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
            result = agent.conversation.compact_toolcall(keep_max=0)
            return CompactionReport("toolcall", [result])

    agent = CompactionContext(agent_conversation(), Summaries())
    report = await ToolCallsOnly().auto_compact(agent)
    assert report.toolcall_results[0].reclaimed_count == 6
