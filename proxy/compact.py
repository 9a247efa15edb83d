"""Two-level compaction: the compactors, and (from `proxy.rules`) the prompts, the result
types and the cut-point rule.

Level 1 (reclaiming old tool results) and level 2 (summarising the head of the conversation)
are methods of `Conversation`; this module decides *when* to use which (`AutoCompactor`). The
constants both levels share live in `proxy.rules`, which `conversation` and
`conversation_message` import, so none of them imports this module: no cycle. It does no
I/O: the summariser is injected.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from proxy.rules import (
    COMPACTED_SYSTEM_PROMPT,
    ESCALATION_RATIO,
    NOTHING_TO_CONDENSE,
    PLACEHOLDER_TEMPLATE,
    SUCCESS,
    SUMMARIZE_FAILED,
    SUMMARY_MAX_TOKENS,
    SUMMARY_PROMPT,
    CompactStatus,
    CutPlan,
    Summarizer,
    SummaryCompactResult,
    ToolCallCompactResult,
    format_compacted_summary,
    placeholder_for,
    plan_cut,
    summary_request_messages,
)
from proxy.trail import default_budget

if TYPE_CHECKING:
    from proxy.compaction.economics import Economics
    from proxy.conversation import Conversation

__all__ = [
    "COMPACTED_SYSTEM_PROMPT",
    "ESCALATION_RATIO",
    "NOTHING_TO_CONDENSE",
    "PLACEHOLDER_TEMPLATE",
    "SUCCESS",
    "SUMMARIZE_FAILED",
    "SUMMARY_MAX_TOKENS",
    "SUMMARY_PROMPT",
    "AutoCompactor",
    "CompactStatus",
    "CompactionAgent",
    "CompactionContext",
    "CompactionReport",
    "CompactorAbstract",
    "CutPlan",
    "Summarizer",
    "SummaryCompactResult",
    "ToolCallCompactResult",
    "compact_conversation",
    "format_compacted_summary",
    "placeholder_for",
    "plan_cut",
    "summary_request_messages",
]


class CompactionAgent(Protocol):
    """What a compactor needs: the conversation, a summariser and the trigger.

    Read-only members, so any object with these attributes qualifies (a callable held in a
    dataclass field reads as read-only to type checkers).
    """

    @property
    def conversation(self) -> Conversation: ...

    @property
    def summarize(self) -> Summarizer: ...

    @property
    def token_threshold(self) -> int: ...


@dataclass
class CompactionContext:
    """The plain `CompactionAgent`: a conversation with its summariser and threshold."""

    conversation: Conversation
    summarize: Summarizer
    token_threshold: int = 192_000
    # Prices and history for cost-aware strategies; the seed's compactor ignores it.
    economics: Economics | None = None


@dataclass
class CompactionReport:
    """What one `auto_compact` call did; `level` is the deepest level that changed anything."""

    level: Literal["none", "toolcall", "summary"]
    toolcall_results: list[ToolCallCompactResult] = field(default_factory=list)
    summary_results: list[SummaryCompactResult] = field(default_factory=list)
    tokens_before: int | None = None
    estimated_tokens_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "toolcall_results": [r.to_dict() for r in self.toolcall_results],
            "summary_results": [r.to_dict() for r in self.summary_results],
            "tokens_before": self.tokens_before,
            "estimated_tokens_after": self.estimated_tokens_after,
        }


class CompactorAbstract(ABC):
    """A compaction strategy. Subclass it and implement `auto_compact` for a custom one."""

    @abstractmethod
    async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
        """Compact `agent.conversation` if it is over `agent.token_threshold`."""


@dataclass
class AutoCompactor(CompactorAbstract):
    """The tiered strategy: reclaim tool results, escalate to a summary, retry smaller.

    Each retry halves both keep counts, down to a floor of 1 tool result and 2 messages
    (a tail of two still holds the last exchange).
    """

    toolcall_keep_max: int = 12
    summary_keep_max: int = 16
    escalation_rounds: int = 2
    max_retries: int = 2

    async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
        conversation = agent.conversation
        threshold = agent.token_threshold
        conversation.trail_budget = default_budget(threshold)
        tokens_before = conversation.total_tokens
        report = CompactionReport("none", tokens_before=tokens_before)
        if tokens_before is None or tokens_before <= threshold:
            report.estimated_tokens_after = tokens_before
            return report
        length_at_start = conversation.estimated_message_length()

        def estimate() -> int:
            # total_tokens is known only for the conversation as it was; scale it by how much
            # of the measurable text is left.
            if length_at_start == 0:
                return tokens_before
            ratio = conversation.estimated_message_length() / length_at_start
            return int(tokens_before * ratio)

        counter = conversation.compaction_counter
        tool_keep, summary_keep = self.toolcall_keep_max, self.summary_keep_max
        for attempt in range(self.max_retries + 1):
            if attempt:
                tool_keep = max(1, tool_keep // 2)
                summary_keep = max(2, summary_keep // 2)
            reclaimed = conversation.compact_toolcall(keep_max=tool_keep)
            report.toolcall_results.append(reclaimed)
            if reclaimed.reclaimed_count:
                counter.toolcall_rounds += 1
                if report.level == "none":
                    report.level = "toolcall"
            estimated = estimate()
            report.estimated_tokens_after = estimated
            escalate = (
                counter.toolcall_rounds > self.escalation_rounds
                or estimated >= threshold * ESCALATION_RATIO
            )
            if not escalate:
                conversation.total_tokens = estimated
                break
            summary = await conversation.acompact(agent.summarize, summary_keep)
            report.summary_results.append(summary)
            if not summary.ok:
                # The request still goes out; keep what the reclaim saved as the best guess.
                conversation.total_tokens = estimated
                break
            report.level = "summary"
            estimated = estimate()
            report.estimated_tokens_after = estimated
            if estimated < threshold:
                break
        return report


async def compact_conversation(
    agent: CompactionAgent, keep_recent: int = 16
) -> SummaryCompactResult:
    """Level 2 only (the seed's `/compact`): summarise all but the newest `keep_recent`."""
    agent.conversation.trail_budget = default_budget(agent.token_threshold)
    return await agent.conversation.acompact(agent.summarize, keep_recent)
